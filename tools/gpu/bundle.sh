#!/usr/bin/env bash
# The GPU bundle: the gsrq CLI and the GPU test suites built here for a machine that has an NVIDIA
# driver and nothing else of ours (no Qt, no -dev packages, no network), with every library they
# link beside them. Binaries carry RPATH $ORIGIN/../lib (old-style, so it covers the libraries'
# own dependencies too): nothing is installed there and LD_LIBRARY_PATH is not needed.
#   tools/gpu/bundle.sh [ARCHS]        ARCHS: CUDA architectures (default 90: H100, H200)
# Writes gpu-bundle/gsrq-gpu.tar.xz (git-ignored) holding gsrq-gpu/{bin,lib,tools,resources}; run it
# there with tools/gpu/run-all.sh OUTDIR from the repository root.
set -euo pipefail
cd "$(dirname "$0")/../.."
archs=${1:-90}
build=build-gpu
# Portable CPU code (x86-64-v3: AVX2, FMA), the GPU code for $archs, no desktop app.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGSRQ_NATIVE=OFF -DGSRQ_MARCH=x86-64-v3 \
  -DGSRQ_BUILD_STUDIO=OFF -DGSRQ_CUDA_ARCHITECTURES="$archs" \
  -DCMAKE_EXE_LINKER_FLAGS='-Wl,--disable-new-dtags' -DCMAKE_BUILD_RPATH='$ORIGIN/../lib' >/dev/null
ninja -C "$build" -j2 gsrq tst_gpu tst_decode_gpu
if ! strings "$build/app/cli/gsrq" | grep -c cudaGetDeviceCount >/dev/null; then
  echo "bundle.sh: $build/app/cli/gsrq was built without CUDA (is nvcc at /usr/local/cuda/bin?)" >&2
  exit 2
fi

stage=$build/stage
rm -rf "$stage" && mkdir -p "$stage/gsrq-gpu/bin" "$stage/gsrq-gpu/lib" "$stage/gsrq-gpu/resources/samples"
root=$stage/gsrq-gpu
cp "$build/app/cli/gsrq" "$build/tests/tst_gpu" "$build/tests/tst_decode_gpu" "$root/bin/"
strip --strip-unneeded "$root"/bin/*
# Every library the binaries load, but glibc's own (the one part that must be the machine's).
for bin in "$root"/bin/*; do ldd "$bin"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' | while read -r lib; do
  cp -L "$lib" "$root/lib/"
done
cp resources/samples/stories260K-gpl3.safetensors resources/samples/README.md "$root/resources/samples/"
mkdir -p "$root/tools/bench" "$root/tools/gpu"
cp tools/bench/torch_gskm.py tools/bench/torch_decode.py "$root/tools/bench/"
git rev-parse HEAD >"$root/COMMIT" 2>/dev/null || echo unknown >"$root/COMMIT"
git diff --quiet HEAD 2>/dev/null || echo "(with uncommitted changes)" >>"$root/COMMIT"

# It must start from the folder alone: no library may come from outside it but glibc's.
env -u LD_LIBRARY_PATH "$root/bin/gsrq" --version >/dev/null
missing=$(for bin in "$root"/bin/*; do env -u LD_LIBRARY_PATH ldd "$bin"; done | grep 'not found' || true)
[ -z "$missing" ] || { echo "bundle.sh: unresolved libraries: $missing" >&2; exit 1; }
leaks=$(for bin in "$root"/bin/*; do env -u LD_LIBRARY_PATH ldd "$bin"; done | awk '$3 ~ /^\// {print $3}' |
  xargs -r realpath | grep -v "^$(cd "$root/lib" && pwd)/" | grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' || true)
[ -z "$leaks" ] || { echo "bundle.sh: libraries resolved outside the bundle: $leaks" >&2; exit 1; }

mkdir -p gpu-bundle
tar -C "$stage" -cJf gpu-bundle/gsrq-gpu.tar.xz.tmp gsrq-gpu
mv gpu-bundle/gsrq-gpu.tar.xz.tmp gpu-bundle/gsrq-gpu.tar.xz
size=$(stat -c %s gpu-bundle/gsrq-gpu.tar.xz)
echo "gpu-bundle/gsrq-gpu.tar.xz: $((size >> 20)) MiB packed, $(du -sm "$root" | cut -f1) MiB unpacked ($(cat "$root/COMMIT" | head -1))"
[ "$size" -lt $((64 << 20)) ] || { echo "bundle.sh: over 64 MiB" >&2; exit 1; }

# The corpus of the realistic sample (tools/gpu/train-sample.sh): Debian's python3.11-doc sources.
if [ -d /usr/share/doc/python3.11/html/_sources ]; then
  python3 tools/sample_corpus.py --out gpu-bundle/corpus
else
  echo "bundle.sh: no corpus for train-sample.sh (apt-get install python3.11-doc, then run this again)" >&2
fi
