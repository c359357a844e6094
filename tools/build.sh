#!/usr/bin/env bash
# Configures (once) and builds everything into build/, two jobs at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build -j "${GSRQ_JOBS:-2}"
