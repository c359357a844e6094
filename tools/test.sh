#!/usr/bin/env bash
# Installs what is missing, checks the sources' format, builds, and runs the whole test suite; then
# the CPU suites again under AddressSanitizer + UndefinedBehaviorSanitizer, and every reader fuzzed
# for 30 seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
# python3-venv for the pinned torch + transformers environments (tools/hf_env.sh), so the Hugging
# Face tests run, not skip; clang for the fuzz targets; Slurm for the scale-out test, which must run
# here, not skip (GSRQ_REQUIRE_SLURM).
bash tools/setup.sh --python --fuzz --slurm
bash tools/format.sh
py=$(bash tools/hf_env.sh 5)
py4=$(bash tools/hf_env.sh 4)
bash tools/build.sh -DGSRQ_PYTHON="$py" -DGSRQ_PYTHON_HF4="$py4" -DGSRQ_BUILD_PYTHON=ON
GSRQ_REQUIRE_SLURM=1 GSRQ_REQUIRE_HF=1 ctest --test-dir build --output-on-failure -j "${GSRQ_JOBS:-2}"
bash tools/sanitize.sh asan
bash tools/fuzz.sh "${GSRQ_FUZZ_SECONDS:-30}"
