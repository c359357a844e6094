#!/usr/bin/env bash
# The C++ sources in the house style (.clang-format), checked or applied with Debian's clang-format 14
# (tools/setup.sh installs it):
#   tools/format.sh          check: lists the files that differ and exits 1
#   tools/format.sh --fix    rewrites them in place
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || true)
if [[ -z $fmt ]]; then
  echo "format.sh: clang-format-14 is missing (bash tools/setup.sh installs it)" >&2
  exit 2
fi
# The emulator's CUDA headers mirror NVIDIA's declarations and stay as they are.
mapfile -t files < <(find core gpu app views tests fuzz -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' \
  -o -name '*.cuh' \) -not -path 'gpu/emulator/include/*' | sort)
case "${1:-}" in
  --fix) "$fmt" -i "${files[@]}"; exit 0 ;;
  "") ;;
  *) echo "format.sh: unknown option $1 (--fix)" >&2; exit 2 ;;
esac
bad=()
for f in "${files[@]}"; do
  if ! "$fmt" --dry-run --Werror "$f" > /dev/null 2>&1; then
    bad+=("$f")
  fi
done
if ((${#bad[@]})); then
  echo "format.sh: ${#bad[@]} file(s) not in the house style (bash tools/format.sh --fix rewrites them):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format.sh: ${#files[@]} files in the house style"
