#!/usr/bin/env bash
# The realistic sample on the GPU machine: tools/train_sample.py trains a head_dim-128 Llama-style
# model on the corpus bundle.sh prepared (gpu-bundle/corpus), dumps its KV cache on held-out text and
# measures the paper's effects on it with the bundle's gsrq.
#   tools/gpu/train-sample.sh OUTDIR [--minutes M]
# Writes OUTDIR/sample/{model,dump,loss.csv,PROVENANCE.md,effects.json} and OUTDIR/train-sample.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: tools/gpu/train-sample.sh OUTDIR [--minutes M]" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd); shift
minutes=4
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    *) echo "train-sample.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -f gpu-bundle/corpus/train.txt ] || { echo "train-sample.sh: no gpu-bundle/corpus; run tools/gpu/bundle.sh" >&2; exit 2; }
# shellcheck source=unpack.sh
. tools/gpu/unpack.sh
cp gpu-bundle/corpus/PROVENANCE.md "$out/corpus-PROVENANCE.md"
timeout --kill-after=10 570 "${PYTHON:-python3}" tools/train_sample.py --corpus gpu-bundle/corpus --out "$out/sample" \
  --minutes "$minutes" --gsrq "$gsrq" 2>&1 | tee "$out/train-sample.log"
exit "${PIPESTATUS[0]}"
