#!/usr/bin/env bash
# Installs what GSRQ Studio needs to build and test on Debian 12 (bookworm), skipping what is present.
#   tools/setup.sh           build + test dependencies (poppler-utils: the report test renders its PDF)
#   tools/setup.sh --bench   also the benchmark-only ones (FAISS with OpenBLAS)
#   tools/setup.sh --python  also python3-venv, for the pinned PyPI environment of torch and
#                            transformers (tools/hf_env.sh) in which the Hugging Face tools and
#                            tests run (Debian 12's PyTorch, 1.13, is too old for transformers 5),
#                            and python3-dev, the headers the Python package (app/python) builds with,
#                            and the held-out texts of tools/texts.py (dict-devil, debian-reference-en)
#   tools/setup.sh --fuzz    also clang with libFuzzer and LLVM's OpenMP runtime (tools/fuzz.sh,
#                            tools/sanitize.sh)
#   tools/setup.sh --slurm   also Slurm and munge, for the single-node cluster of
#                            tools/slurm/local-cluster.sh (their services are not enabled)
set -euo pipefail

pkgs=(build-essential cmake ninja-build ccache pkg-config
      libeigen3-dev nlohmann-json3-dev libsqlite3-dev libssl-dev libcli11-dev libpcre2-dev
      qt6-base-dev qt6-qpa-plugins qt6-charts-dev qt6-svg-dev libqt6opengl6-dev python3-numpy python3-pytest
      clang-format-14 poppler-utils)
for arg in "$@"; do
  case "$arg" in
    --bench) pkgs+=(python3-faiss libopenblas0-pthread) ;;
    --python) pkgs+=(python3-venv python3-dev dict-devil debian-reference-en) ;;
    --fuzz) pkgs+=(clang-14 libclang-rt-14-dev libomp-14-dev) ;;
    --slurm) pkgs+=(slurm-wlm munge) ;;
    *) echo "setup: unknown option $arg (--bench, --python, --fuzz, --slurm)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "setup: all dependencies present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then as_root=(); else as_root=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
