#!/usr/bin/env bash
# Creates (once, then reuses) the virtual environment with PyPI's FAISS (tools/python/faiss.lock)
# and prints its python. It lives in ${GSRQ_CACHE:-~/.cache/gsrq-studio}/faiss, outside any
# checkout, so a second run downloads nothing; a changed lock file is installed over it.
set -euo pipefail
cd "$(dirname "$0")/../.."
cache=${GSRQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gsrq-studio}
env=$cache/faiss
lock=tools/python/faiss.lock
base=/usr/bin/python3
[[ -x $base ]] || base=$(command -v python3)
stamp=$env/.gsrq-lock
want=$(cat "$lock" tools/bench/faiss_env.sh | sha256sum | cut -c1-16)
if [[ -x $env/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
  echo "$env/bin/python"
  exit 0
fi
mkdir -p "$cache"
if [[ ! -x $env/bin/python ]]; then
  echo "faiss_env.sh: creating $env" >&2
  if ! "$base" -m venv "$env" >&2; then
    rm -rf "$env"
    echo "faiss_env.sh: $base cannot make a virtual environment: install python3-venv (tools/setup.sh --python)" >&2
    exit 2
  fi
fi
echo "faiss_env.sh: installing $lock into $env" >&2
PIP_DISABLE_PIP_VERSION_CHECK=1 "$env/bin/python" -m pip install -q -r "$lock" >&2
echo "$want" >"$stamp"
echo "$env/bin/python"
