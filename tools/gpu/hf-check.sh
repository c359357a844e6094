#!/usr/bin/env bash
# The KV dump exporter against transformers models on the GPU machine (PyTorch with CUDA and
# transformers there; no network, nothing downloaded): every family of tools/hf_check.py on the CPU
# and CUDA in f32, bf16 and f16, and a dump of more than 2 GB, each opened with the bundle's gsrq.
#   tools/gpu/hf-check.sh OUTDIR [--quick]
# Writes OUTDIR/hf-check.{md,json} and OUTDIR/hf-check.log; exit status that of hf_check.py.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: tools/gpu/hf-check.sh OUTDIR [--quick]" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd); shift
extra=(--big)
for a in "$@"; do
  case $a in
    --quick) extra=(--quick) ;;
    *) echo "hf-check.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
# shellcheck source=unpack.sh
. tools/gpu/unpack.sh
timeout --kill-after=10 540 "${PYTHON:-python3}" tools/hf_check.py --out "$out" --gsrq "$gsrq" "${extra[@]}" \
  2>&1 | tee "$out/hf-check.log"
exit "${PIPESTATUS[0]}"
