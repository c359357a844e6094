#!/usr/bin/env bash
# Builds the Debian package: Release, the portable x86-64-v3 baseline instead of -march=native,
# CUDA for Ampere, Ada and Hopper (+ PTX) where nvcc is found, into build-package/; prints the .deb.
#   sudo apt-get install ./build-package/gsrq-studio_*.deb     # then: gsrq --help, gsrq-studio
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset package >/dev/null
cmake --build --preset package
(cd build-package && cpack -G DEB >/dev/null)
ls -1 "$PWD"/build-package/gsrq-studio_*.deb
