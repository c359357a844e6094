#!/usr/bin/env bash
# Whole K-means training on real KV rows: gsrq's CPU backend (exact bounds on, and off) against FAISS
# k-means from PyPI (tools/python/faiss.lock, in a cached virtual environment), same rows, same K and
# iterations, the same threads. The rows are the head_dim-128 sample's values (every head's rows of
# 128, resources/samples/pydocs-hd128, layer 2). Each side warms up once per process, then trains from
# `seeds` seeds in turn, alternating with the other side; times are the best and the median over
# seeds, objectives their mean (one seed's initial rows decide about ±0.5% of the objective).
#   tools/bench/bench_kmeans_kv.sh [k] [iters] [seeds] [tensor]
set -euo pipefail
cd "$(dirname "$0")/../.."
k=${1:-256} iters=${2:-20} seeds=${3:-5} tensor=${4:-layers.2.value}
threads=${GSRQ_THREADS:-$(nproc)}
bash tools/setup.sh --bench --python
bash tools/build.sh
pypi=$(bash tools/bench/faiss_env.sh)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$pypi" tools/bench/kv_rows.py resources/samples/pydocs-hd128/layer_002.safetensors "$tensor" "$tmp/rows.npy"
for seed in $(seq 0 $((seeds - 1))); do
  for bounds in on off; do
    build/app/cli/gsrq --no-db bench-cluster --input "$tmp/rows.npy" --k "$k" --iters "$iters" --seed "$seed" \
      --threads "$threads" --exact-bounds "$bounds" --reseed-empty --warmup --json >"$tmp/gsrq-$bounds-$seed.json" \
      2>/dev/null
  done
  OMP_NUM_THREADS=$threads "$pypi" tools/bench/faiss_kmeans.py "$tmp/rows.npy" --k "$k" --iters "$iters" \
    --seed "$seed" --warmup >"$tmp/faiss-$seed.json"
done
/usr/bin/python3 - "$tmp" "$tensor" <<'PY'
import glob, json, statistics, sys
tmp, tensor = sys.argv[1], sys.argv[2]
def runs(prefix):
    return [json.load(open(p)) for p in sorted(glob.glob(f"{tmp}/{prefix}-*.json"))]
faiss = runs("faiss")
f_times = [r["total_seconds"] for r in faiss]
f_obj = statistics.mean(r["final_objective"] for r in faiss)
o = runs("gsrq-on")[0]
print(f"data: {tensor} of resources/samples/pydocs-hd128, {o['rows']} rows of {o['dim']}, K={o['k']}, "
      f"{faiss[0]['iterations']} iterations, {len(faiss)} seeds; gsrq on {o['device']} ({o['kernel']}), "
      f"FAISS {faiss[0]['faiss_version']} (PyPI, {faiss[0]['omp_threads']} threads)")
print(f"FAISS k-means : best {min(f_times):.4f} s, median {statistics.median(f_times):.4f} s; "
      f"mean objective {f_obj:.4f}")
for bounds in ("on", "off"):
    rs = runs(f"gsrq-{bounds}")
    t = [r["methods"]["km"]["total_seconds"] for r in rs]
    obj = statistics.mean(r["methods"]["km"]["final_objective"] for r in rs)
    skipped = statistics.mean(r["methods"]["km"]["skipped"] for r in rs)
    print(f"gsrq km, exact bounds {bounds:<3}: best {min(t):.4f} s, median {statistics.median(t):.4f} s "
          f"-> {min(f_times) / min(t):.2f}x FAISS (best), {statistics.median(f_times) / statistics.median(t):.2f}x "
          f"(median); mean objective {obj:.4f} ({100 * (obj / f_obj - 1):+.2f}% vs FAISS); "
          f"{100 * skipped:.0f}% of the scores skipped")
PY
