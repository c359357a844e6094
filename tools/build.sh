#!/usr/bin/env bash
# Configures (once, or again when given cache settings such as -DGSRQ_PYTHON=...) and builds
# everything into build/, two jobs at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build/CMakeCache.txt || $# -gt 0 ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build build -j "${GSRQ_JOBS:-2}"
