#!/usr/bin/env bash
# The Python package as a user installs it: `pip wheel` of the sources (scikit-build-core builds
# core/ and app/python through CMake, no Qt, no CUDA), the wheel installed into an empty folder, and
# gsrq imported from there (not from the build tree) to train, encode and report its version.
#   tests/python/wheel_check.sh PYTHON WORKDIR
# PYTHON needs scikit-build-core and nanobind (tools/hf_env.sh's environment): the build is not
# isolated, so nothing is downloaded.
set -euo pipefail
py=$1
work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work/dist" "$work/site"
mkdir -p "$work"
# The wheel's CMake build lives in WORKDIR (kept between runs, so a second build is incremental).
PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" -m pip wheel --no-build-isolation --no-deps -q -w "$work/dist" \
  --config-settings=build-dir="$work/cmake" "$root"
wheel=$(ls "$work"/dist/gsrq-*.whl)
echo "built $(basename "$wheel")"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" -m pip install --no-deps -q --target "$work/site" "$wheel"
version=$(sed -n 's/^project(gsrq_studio VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
cd "$work"
PYTHONPATH="$work/site" GSRQ_EXPECT_VERSION="$version" GSRQ_SAMPLE="$root/resources/samples/stories260K-gpl3.safetensors" \
  "$py" - <<'PY'
import os
import numpy as np
import gsrq
site = os.environ["PYTHONPATH"]
assert gsrq.__file__.startswith(site), gsrq.__file__          # the installed package, not the build tree
assert os.path.exists(os.path.join(os.path.dirname(gsrq.__file__), "_core.pyi"))  # its type stubs
assert os.path.exists(os.path.join(os.path.dirname(gsrq.__file__), "py.typed"))
assert gsrq.__version__ == os.environ["GSRQ_EXPECT_VERSION"], gsrq.__version__
x = gsrq.open_dump(os.environ["GSRQ_SAMPLE"]).rows("layers.0.key")
r = gsrq.train(x, dim=8, stages=2, k=16, iterations=5)
assert np.array_equal(r.codebooks.encode(x), r.codes)
print(f"gsrq {gsrq.__version__} from {os.path.dirname(gsrq.__file__)}: train nmse {r.metrics['nmse']:.4f}")
PY
