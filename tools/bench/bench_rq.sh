#!/usr/bin/env bash
# Residual quantization, gsrq against FAISS's ResidualQuantizer on the same synthetic Gaussian
# data, same D (one subspace), R, K and iterations, in one run: training time and held-out NMSE,
# greedy against FAISS beam 1 and beam 8 against beam 8; GSKM-RQ beside them.
#   tools/bench/bench_rq.sh [rows] [dim] [stages] [k] [iters]
set -euo pipefail
cd "$(dirname "$0")/../.."
rows=${1:-50000} dim=${2:-64} stages=${3:-8} k=${4:-256} iters=${5:-10}
nbits=$(awk -v k="$k" 'BEGIN { n = 0; while (2 ^ n < k) n++; print n }')
bash tools/setup.sh --bench
bash tools/build.sh
gsrq=build/app/cli/gsrq
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$gsrq" synth gaussian --rows "$rows" --features "$dim" --seed 1 --out "$tmp/train.npy"
"$gsrq" synth gaussian --rows $((rows / 5)) --features "$dim" --seed 2 --out "$tmp/heldout.npy"
run_gsrq() { # method beam
  "$gsrq" train "$tmp/train.npy" --dim "$dim" --stages "$stages" --k "$k" --iters "$iters" --method "$1" \
    --beam "$2" --eval "$tmp/heldout.npy" --json -q >"$tmp/gsrq-$1-$2.json"
}
run_gsrq km 1
run_gsrq km 8
run_gsrq gskm 1
for beam in 1 8; do
  /usr/bin/python3 tools/bench/faiss_rq.py "$tmp/train.npy" "$tmp/heldout.npy" --stages "$stages" \
    --nbits "$nbits" --iters "$iters" --beam "$beam" >"$tmp/faiss-$beam.json"
done
/usr/bin/python3 - "$tmp" "$rows" "$dim" "$stages" "$k" "$iters" <<'PY'
import json, sys
tmp, rows, dim, stages, k, iters = sys.argv[1:]
def ours(method, beam):
    t = json.load(open(f"{tmp}/gsrq-{method}-{beam}.json"))["tensors"][0]
    return t["train"]["seconds"], t["heldout"]["nmse"]
def faiss(beam):
    f = json.load(open(f"{tmp}/faiss-{beam}.json"))
    return f["train_seconds"], f["heldout_nmse"], f["faiss_version"]
print(f"data: synthetic gaussian, {rows} training + {int(rows) // 5} held-out rows x {dim}; "
      f"R={stages}, K={k}, {iters} iterations per stage")
for beam in (1, 8):
    fs, fn, ver = faiss(beam)
    s, n = ours("km", beam)
    print(f"beam {beam}: FAISS {ver} RQ train {fs:.2f} s, held-out NMSE {fn:.5f} | "
          f"gsrq KM-RQ train {s:.2f} s ({fs / s:.2f}x FAISS), held-out NMSE {n:.5f} ({100 * (n / fn - 1):+.2f}% vs FAISS)")
s, n = ours("gskm", 1)
print(f"gsrq GSKM-RQ greedy: train {s:.2f} s, held-out NMSE {n:.5f}")
PY
