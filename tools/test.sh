#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --python  # PyTorch too: the KV dump exporter's tests run, not skip
bash tools/build.sh
ctest --test-dir build --output-on-failure -j "${GSRQ_JOBS:-2}"
