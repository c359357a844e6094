#!/usr/bin/env bash
# KM and GSKM iteration time of gsrq's CPU backend against FAISS k-means on the same synthetic
# Gaussian data, in one run: FAISS from PyPI (tools/python/faiss.lock, the version users install
# today, in a cached virtual environment) and Debian's python3-faiss where it is installed. The
# runs alternate `reps` times and each keeps its best, so a neighbour's load on a shared machine
# does not decide the ratio; both libraries use the same threads (all cores, or GSRQ_THREADS). gsrq runs
# with exact bounds off (every score made: the assignment kernel's speed) and on (the default).
#   tools/bench/bench_cluster.sh [rows] [dim] [k] [iters] [reps]
set -euo pipefail
cd "$(dirname "$0")/../.."
rows=${1:-100000} dim=${2:-128} k=${3:-256} iters=${4:-10} reps=${5:-3}
threads=${GSRQ_THREADS:-$(nproc)}
bash tools/setup.sh --bench --python
bash tools/build.sh
pypi=$(bash tools/bench/faiss_env.sh)
debian=/usr/bin/python3
"$debian" -c 'import faiss' 2>/dev/null || debian=
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build/app/cli/gsrq --no-db synth gaussian --rows "$rows" --features "$dim" --seed 0 --out "$tmp/data.npy"
for rep in $(seq "$reps"); do
  for bounds in off on; do
    build/app/cli/gsrq --no-db bench-cluster --input "$tmp/data.npy" --k "$k" --iters "$iters" --threads "$threads" \
      --exact-bounds "$bounds" --json >"$tmp/gsrq$bounds-$rep.json" 2>/dev/null
  done
  OMP_NUM_THREADS=$threads "$pypi" tools/bench/faiss_kmeans.py "$tmp/data.npy" --k "$k" --iters "$iters" \
    >"$tmp/pypi-$rep.json"
  if [[ -n $debian ]]; then
    OMP_NUM_THREADS=$threads "$debian" tools/bench/faiss_kmeans.py "$tmp/data.npy" --k "$k" --iters "$iters" \
      >"$tmp/debian-$rep.json"
  fi
done
blas=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | awk '/^Value:/ {print $2}')
/usr/bin/python3 - "$tmp" "$reps" "$blas" <<'PY'
import glob, json, sys
tmp, reps, blas = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def runs(prefix):
    return [json.load(open(p)) for p in sorted(glob.glob(f"{tmp}/{prefix}-*.json"))]
ours = runs("gsrqoff")
o = ours[0]
print(f"data: synthetic gaussian {o['rows']} x {o['dim']}, K={o['k']}, {o['methods']['km']['iterations']} "
      f"iterations; best of {reps} alternating runs; gsrq on {o['device']}")
def listed(values):
    return ", ".join(f"{v:.4f}" for v in values)
baselines = []
for prefix, where in (("pypi", "PyPI wheel"), ("debian", f"Debian, BLAS {blas or 'unknown'}")):
    rs = runs(prefix)
    if not rs:
        continue
    best = min(r["seconds_per_iteration"] for r in rs)
    baselines.append((f"FAISS {rs[0]['faiss_version']} ({where})", best))
    print(f"FAISS {rs[0]['faiss_version']} ({where}, {rs[0]['omp_threads']} threads): {best:.4f} s/iteration "
          f"(runs: {listed(r['seconds_per_iteration'] for r in rs)})")
for bounds in ("off", "on"):
    rs = runs(f"gsrq{bounds}")
    for m in ("km", "gskm"):
        s = min(r["methods"][m]["seconds_per_iteration"] for r in rs)
        vs = "; ".join(f"{b / s:.2f}x {name}" for name, b in baselines)
        skipped = min(r["methods"][m]["skipped"] for r in rs)
        print(f"gsrq {m:<4} (exact bounds {bounds:<3}): {s:.4f} s/iteration "
              f"(runs: {listed(r['methods'][m]['seconds_per_iteration'] for r in rs)}), "
              f"{100 * skipped:.0f}% of the scores skipped -> {vs}")
PY
