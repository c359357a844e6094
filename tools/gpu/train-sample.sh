#!/usr/bin/env bash
# The realistic sample on the GPU machine: tools/train_sample.py trains a head_dim-128 Llama-style
# model on the corpus bundle.sh prepared (gpu-bundle/corpus), dumps its KV cache on held-out text and
# measures the paper's effects on it with the bundle's gsrq (tools/sample_report.py).
#   tools/gpu/train-sample.sh OUTDIR [--minutes M]
# Writes OUTDIR/sample/{model,model.bin,tokenizer.bin,dump,loss.csv,PROVENANCE.md},
# OUTDIR/sample-report.md and OUTDIR/train-sample.log.
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
  --minutes "$minutes" 2>&1 | tee "$out/train-sample.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || exit "$rc"
"${PYTHON:-python3}" tools/sample_report.py --sample "$out/sample" --dump "$out/sample/dump" \
  --train-text gpu-bundle/corpus/train.txt --gsrq "$gsrq" --work "$out/report-work" --out "$out/sample-report.md" \
  2>&1 | tee -a "$out/train-sample.log"
exit "${PIPESTATUS[0]}"
