#!/usr/bin/env bash
# The Python package as a user installs it (docs/python.md): a new, empty virtual environment, then
# `pip install .` of the sources with pip's build isolation (scikit-build-core, nanobind and NumPy
# installed by pip into a throw-away build environment, as on a user's machine), and gsrq imported
# from that environment (not from the build tree) to train, encode and report its version.
#   tests/python/wheel_check.sh PYTHON WORKDIR
# PYTHON makes the virtual environment (Debian's python3 with python3-venv and python3-dev:
# tools/setup.sh --python). pip downloads the build requirements and NumPy from the index it is
# configured with, as it does for a user. The CMake build lives in WORKDIR/cmake, made anew each run
# (ccache keeps a second build short).
set -euo pipefail
py=$1
work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
base=$("$py" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
rm -rf "$work/venv" "$work/cmake"
mkdir -p "$work"
"$base" -m venv "$work/venv"
env_py=$work/venv/bin/python
if "$env_py" -c 'import numpy' 2>/dev/null; then
  echo "wheel_check: the new environment already has NumPy: it is not empty" >&2
  exit 1
fi
PIP_DISABLE_PIP_VERSION_CHECK=1 "$env_py" -m pip install -q --config-settings=build-dir="$work/cmake" "$root"
version=$(sed -n 's/^project(gsrq_studio VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
cd "$work"
GSRQ_EXPECT_VERSION="$version" GSRQ_SAMPLE="$root/resources/samples/stories260K-gpl3.safetensors" \
  GSRQ_VENV="$work/venv" "$env_py" - <<'PY'
import os
import numpy as np
import gsrq
venv = os.path.realpath(os.environ["GSRQ_VENV"])
assert os.path.realpath(gsrq.__file__).startswith(venv), gsrq.__file__   # installed, not the build tree
assert os.path.exists(os.path.join(os.path.dirname(gsrq.__file__), "_core.pyi"))  # its type stubs
assert os.path.exists(os.path.join(os.path.dirname(gsrq.__file__), "py.typed"))
assert gsrq.__version__ == os.environ["GSRQ_EXPECT_VERSION"], gsrq.__version__
x = gsrq.open_dump(os.environ["GSRQ_SAMPLE"]).rows("layers.0.key")
r = gsrq.train(x, dim=8, stages=2, k=16, iterations=5)
assert np.array_equal(r.codebooks.encode(x), r.codes)
print(f"gsrq {gsrq.__version__} from {os.path.dirname(gsrq.__file__)}: train nmse {r.metrics['nmse']:.4f}")
PY
