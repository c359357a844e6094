#!/usr/bin/env bash
# KM and GSKM iteration time of gsrq's CPU backend against FAISS k-means (with OpenBLAS) on the
# same synthetic Gaussian data, in one run; prints both and the ratio.
#   tools/bench/bench_cluster.sh [rows] [dim] [k] [iters]
set -euo pipefail
cd "$(dirname "$0")/../.."
rows=${1:-100000} dim=${2:-128} k=${3:-256} iters=${4:-10}
bash tools/setup.sh --bench
bash tools/build.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build/app/cli/gsrq synth gaussian --rows "$rows" --features "$dim" --seed 0 --out "$tmp/data.npy"
build/app/cli/gsrq bench-cluster --input "$tmp/data.npy" --k "$k" --iters "$iters" --json >"$tmp/gsrq.json"
/usr/bin/python3 tools/bench/faiss_kmeans.py "$tmp/data.npy" --k "$k" --iters "$iters" >"$tmp/faiss.json"
blas=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | awk '/^Value:/ {print $2}')
/usr/bin/python3 - "$tmp/gsrq.json" "$tmp/faiss.json" "$blas" <<'PY'
import json, sys
ours = json.load(open(sys.argv[1]))
faiss = json.load(open(sys.argv[2]))
f = faiss["seconds_per_iteration"]
print(f"data: synthetic gaussian {ours['rows']} x {ours['dim']}, K={ours['k']}, {faiss['iterations']} iterations")
print(f"faiss {faiss['faiss_version']} ({faiss['omp_threads']} threads, BLAS {sys.argv[3] or 'unknown'}): {f:.4f} s/iteration")
for m in ("km", "gskm"):
    s = ours["methods"][m]["seconds_per_iteration"]
    print(f"gsrq {m:<5} ({ours['device']}): {s:.4f} s/iteration  -> {f / s:.2f}x FAISS")
PY
