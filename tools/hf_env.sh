#!/usr/bin/env bash
# Creates (once, then reuses) the virtual environment in which the Hugging Face tools and their tests
# run, and prints its python. Debian's own Python is externally managed, and Debian 12's PyTorch
# (1.13) is too old for transformers 5, so the pinned set comes from PyPI:
#   tools/hf_env.sh        torch + transformers 5 (tools/python/hf5.lock)
#   tools/hf_env.sh 4      the same torch with transformers 4.57 (tools/python/hf4.lock): a second,
#                          small environment that reads torch from the first one (a .pth file)
# The environments live in ${GSRQ_CACHE:-~/.cache/gsrq-studio}, outside any checkout, so a second
# clone, a second run or CI downloads nothing; a changed lock file is installed over them.
# PyPI's Linux torch wheel is the CUDA build: the first run downloads about 3 GB (5.6 GB installed).
set -euo pipefail
cd "$(dirname "$0")/.."
series=${1:-5}
case "$series" in 4|5) ;; *) echo "hf_env.sh: series $series: expected 4 or 5" >&2; exit 2 ;; esac
cache=${GSRQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gsrq-studio}
env=$cache/hf$series
lock=tools/python/hf$series.lock
base=/usr/bin/python3
[[ -x $base ]] || base=$(command -v python3)

if [[ $series == 4 ]]; then
  torch_env=$(bash tools/hf_env.sh 5)
  torch_site=$("$torch_env" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
fi
stamp=$env/.gsrq-lock
want=$(cat "$lock" tools/hf_env.sh | sha256sum | cut -c1-16)
if [[ -x $env/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
  echo "$env/bin/python"
  exit 0
fi

mkdir -p "$cache"
if [[ ! -x $env/bin/python ]]; then
  echo "hf_env.sh: creating $env" >&2
  if ! "$base" -m venv "$env" >&2; then
    rm -rf "$env"
    echo "hf_env.sh: $base cannot make a virtual environment: install python3-venv (tools/setup.sh --python)" >&2
    exit 2
  fi
fi
if [[ $series == 4 ]]; then
  site=$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$torch_site" > "$site/gsrq-torch.pth"   # after this environment's own packages on sys.path
fi
echo "hf_env.sh: installing $lock into $env" >&2
PIP_DISABLE_PIP_VERSION_CHECK=1 "$env/bin/python" -m pip install -q -r "$lock" >&2
echo "$want" > "$stamp"
echo "$env/bin/python"
