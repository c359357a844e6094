# Sourced by the scripts that run on the GPU machine: finds the bundle of tools/gpu/bundle.sh, an
# unpacked folder ($GSRQ_BUNDLE) or gpu-bundle/gsrq-gpu.tar.xz unpacked to a temporary folder that
# is removed on exit, and sets root (the bundle) and gsrq (its CLI). Run from the repository root.
if [ -n "${GSRQ_BUNDLE:-}" ]; then
  root=$GSRQ_BUNDLE
else
  [ -f gpu-bundle/gsrq-gpu.tar.xz ] || { echo "$0: no gpu-bundle/gsrq-gpu.tar.xz; run tools/gpu/bundle.sh first" >&2; exit 2; }
  bundle_tmp=$(mktemp -d) && trap 'rm -rf "$bundle_tmp"' EXIT
  tar -C "$bundle_tmp" -xJf gpu-bundle/gsrq-gpu.tar.xz
  root=$bundle_tmp/gsrq-gpu
fi
gsrq=$root/bin/gsrq
