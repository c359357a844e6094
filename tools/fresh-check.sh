#!/usr/bin/env bash
# Proves the README's two commands on a clean Debian 12 root, not on a machine where something
# installed earlier could hide a missing install step. For each command it makes a fresh root with
# debootstrap (minbase bookworm: what `debootstrap` gives, nothing of this machine's), copies in a
# clone of this repository's HEAD, and runs the command there with chroot, as root, with a plain
# environment; then it prints each command's exit code and time. Needs root and the Debian archive
# this machine's apt reaches (its mirror and security sources are used, read from apt).
#
#   tools/fresh-check.sh [--keep] [--only run|test|deb] [--deb FILE] [WORKDIR]
#                                                   (default WORKDIR: /var/tmp/gsrq-fresh)
# --deb FILE (from tools/package.sh): also, on a third clean root, `apt-get install ./FILE`, then
# `gsrq --help`, `gsrq info` of the installed sample and `gsrq-studio --screenshot` from PATH
# (the screenshot is copied to WORKDIR/deb-screenshot.png).
#
# The base system is debootstrapped once into WORKDIR/base.tgz and unpacked anew for each command.
# --keep leaves the roots (WORKDIR/root-run, WORKDIR/root-test) for a look inside afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
keep=0
only=""
deb=""
work=/var/tmp/gsrq-fresh
while (($#)); do
  case "$1" in
    --keep) keep=1 ;;
    --only) only=$2; shift ;;
    --deb) deb=$(realpath "$2"); shift ;;
    -*) echo "fresh-check: unknown option $1 (--keep, --only run|test)" >&2; exit 2 ;;
    *) work=$1 ;;
  esac
  shift
done
case "$only" in ""|run|test|deb) ;; *) echo "fresh-check: --only takes run, test or deb, not '$only'" >&2; exit 2 ;; esac
if [[ -n $deb && ! -f $deb ]]; then
  echo "fresh-check: --deb $deb: no such file" >&2
  exit 2
fi
if [[ $only == deb && -z $deb ]]; then
  echo "fresh-check: --only deb needs --deb FILE" >&2
  exit 2
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "fresh-check: debootstrap and chroot need root" >&2
  exit 2
fi
# The Debian mirror and security archive this machine's apt uses (a local mirror or proxy included),
# read from apt itself; GSRQ_DEBIAN_MIRROR and GSRQ_DEBIAN_SECURITY override them. No archive is
# named here: where neither apt nor the variable gives one, the check stops and says which to set.
apt_repo() { # apt_repo SUITE: the URI of the first source of that suite
  # --no-release-info: the configured sources, also where no lists were downloaded (apt-get update
  # not run, or its lists cleaned). awk reads all of apt's output (no early exit: apt-get would die
  # of SIGPIPE under pipefail).
  { apt-get indextargets --no-release-info --format '$(REPO_URI) $(RELEASE)' 2>/dev/null || true; } |
    awk -v s="$1" '!found && $2 == s { print $1; found = 1 }' | sed 's:/*$::'
}
mirror=${GSRQ_DEBIAN_MIRROR:-$(apt_repo bookworm)}
security=${GSRQ_DEBIAN_SECURITY:-$(apt_repo bookworm-security)}
if [[ -z $mirror ]]; then
  echo "fresh-check: this machine's apt has no Debian 12 (bookworm) source: set GSRQ_DEBIAN_MIRROR to the" \
    "Debian archive to debootstrap from (e.g. your local mirror's URL)" >&2
  exit 2
fi
if [[ -z $security ]]; then
  echo "fresh-check: this machine's apt has no bookworm-security source: set GSRQ_DEBIAN_SECURITY to the" \
    "Debian security archive the clean roots should use" >&2
  exit 2
fi

if ! command -v debootstrap >/dev/null; then
  echo "fresh-check: installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap; }
fi

mkdir -p "$work"
if [[ ! -f $work/base.tgz ]]; then
  echo "fresh-check: debootstrapping Debian 12 (bookworm, minbase) from $mirror"
  rm -rf "$work/base"
  start=$SECONDS
  debootstrap --variant=minbase bookworm "$work/base" "$mirror" > "$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; echo "fresh-check: debootstrap failed (log: $work/debootstrap.log)" >&2; exit 1; }
  # The updates and security suites, as a Debian 12 machine has them.
  cat > "$work/base/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
  tar -C "$work/base" -czf "$work/base.tgz" .
  rm -rf "$work/base"
  echo "fresh-check: base system ready in $((SECONDS - start)) s"
fi

mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  mounted=()
}
trap cleanup EXIT

# run NAME COMMAND: a fresh root, the repository's HEAD in /root/gsrq, COMMAND run there.
declare -A code seconds
check() {
  local name=$1 cmd=$2 root=$work/root-$1
  cleanup
  rm -rf "$root"
  mkdir -p "$root"
  tar -C "$root" -xzf "$work/base.tgz"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  # How this machine reaches the registries, as a user's machine on the same network would have it:
  # certificate authorities added locally (a TLS-inspecting proxy's) and pip's configuration. What
  # the project installs, it still installs itself.
  if [[ -d /usr/local/share/ca-certificates ]]; then
    mkdir -p "$root/usr/local/share/ca-certificates" "$root/etc/ssl/certs"
    cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
    [[ ! -f /etc/ssl/certs/ca-certificates.crt ]] || cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
  fi
  [[ ! -f /etc/pip.conf ]] || cp /etc/pip.conf "$root/etc/pip.conf"
  # apt's own settings for reaching the archive (proxies, a mirror's clock), as the machine has them.
  for f in /etc/apt/apt.conf.d/*; do
    if grep -qiE '^[[:space:]]*Acquire::' "$f" 2>/dev/null; then cp "$f" "$root/etc/apt/apt.conf.d/"; fi
  done
  git clone -q --no-local "$repo" "$root/root/gsrq"
  [[ -z $deb ]] || cp "$deb" "$root/root/gsrq-studio.deb"
  for m in proc sys dev dev/pts; do
    mkdir -p "$root/$m"
    case $m in
      proc) mount -t proc proc "$root/proc" ;;
      sys) mount -t sysfs sys "$root/sys" ;;
      *) mount --bind "/$m" "$root/$m" ;;
    esac
    mounted+=("$root/$m")
  done
  echo "fresh-check: [$name] $cmd (log: $work/$name.log)"
  local start=$SECONDS rc=0
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd /root/gsrq && $cmd" > "$work/$name.log" 2>&1 < /dev/null || rc=$?
  code[$name]=$rc
  seconds[$name]=$((SECONDS - start))
  tail -15 "$work/$name.log"
  [[ ! -f $root/root/shot.png ]] || cp "$root/root/shot.png" "$work/$name-screenshot.png"
  cleanup
  ((keep)) || rm -rf "$root"
}

[[ -z $only || $only == run ]] && check run "bash tools/run.sh"
[[ -z $only || $only == test ]] && check test "bash tools/test.sh"
if [[ -n $deb && ( -z $only || $only == deb ) ]]; then
  check deb "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq /root/gsrq-studio.deb &&
    cd / && command -v gsrq gsrq-studio && gsrq --help | head -5 &&
    gsrq --no-db info /usr/share/gsrq-studio/samples/stories260K-gpl3.safetensors | head -5 &&
    QT_QPA_PLATFORM=offscreen gsrq-studio --store /root/runs.db --screenshot /root/shot.png --page dataset \
      --open /usr/share/gsrq-studio/samples/stories260K-gpl3.safetensors && test -s /root/shot.png &&
    ls /usr/share/applications/gsrq-studio.desktop /usr/share/icons/hicolor/scalable/apps/gsrq-studio.svg"
fi

echo
echo "fresh-check on a clean Debian 12 root ($(git -C "$repo" rev-parse --short HEAD)):"
fail=0
for name in run test deb; do
  [[ -n ${code[$name]+x} ]] || continue
  what="bash tools/$name.sh"
  [[ $name != deb ]] || what="apt-get install ./$(basename "$deb"), gsrq and gsrq-studio from PATH"
  printf '  %s   exit %d   %d min %02d s\n' "$what" "${code[$name]}" $((seconds[$name] / 60)) $((seconds[$name] % 60))
  ((code[$name] == 0)) || fail=1
done
exit $fail
