#!/usr/bin/env bash
# tools/fresh-check.sh names no package host: with no bookworm source in apt's configuration and no
# GSRQ_DEBIAN_MIRROR it stops with exit 2 and a message naming the variable, before it installs or
# debootstraps anything (WORKDIR stays empty). Not root: exit 77, CTest's skip.
#   tests/tools/fresh_check_mirror.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# apt with no sources at all: an APT_CONFIG of its own, nothing of this machine's changed.
cat > "$work/apt.conf" <<CONF
Dir::Etc::SourceList "/dev/null";
Dir::Etc::SourceParts "$work/no-parts";
CONF
mkdir -p "$work/no-parts" "$work/fresh"
set +e
out=$(env -u GSRQ_DEBIAN_MIRROR -u GSRQ_DEBIAN_SECURITY APT_CONFIG="$work/apt.conf" \
  bash "$root/tools/fresh-check.sh" --only run "$work/fresh" 2>&1)
rc=$?
set -e
if [[ $(id -u) -ne 0 ]]; then
  # Not root: fresh-check.sh refuses first for root, so its mirror logic cannot be reached here.
  [[ $rc -eq 2 && $out == *"need root"* ]] || fail "as a user: expected exit 2 for root, got $rc: $out"
  echo "skipped: the mirror's refusal needs root (fresh-check.sh refuses a user first, as it should)"
  exit 77
else
  [[ $rc -eq 2 ]] || fail "expected exit 2 without a mirror, got $rc: $out"
  [[ $out == *GSRQ_DEBIAN_MIRROR* ]] || fail "the message does not name GSRQ_DEBIAN_MIRROR: $out"
  [[ -z $(ls -A "$work/fresh") ]] || fail "it wrote into its WORKDIR before stopping: $(ls -A "$work/fresh")"
  # With the mirror given but no security source, it names the second variable.
  set +e
  out=$(env -u GSRQ_DEBIAN_SECURITY GSRQ_DEBIAN_MIRROR=file:///nonexistent/debian APT_CONFIG="$work/apt.conf" \
    bash "$root/tools/fresh-check.sh" --only run "$work/fresh" 2>&1)
  rc=$?
  set -e
  [[ $rc -eq 2 && $out == *GSRQ_DEBIAN_SECURITY* ]] || fail "expected exit 2 naming GSRQ_DEBIAN_SECURITY: $rc: $out"
  echo "no mirror: exit 2, naming GSRQ_DEBIAN_MIRROR; no security archive: exit 2, naming GSRQ_DEBIAN_SECURITY"
fi
