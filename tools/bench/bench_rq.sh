#!/usr/bin/env bash
# Residual quantization, gsrq against FAISS's ResidualQuantizer on the same synthetic Gaussian
# data, same D (one subspace), R, K and iterations, in one run: training time and held-out NMSE,
# greedy against FAISS beam 1 and beam 8 against beam 8 (each stage trained on every beam's residual,
# as FAISS does, and on the best beam's only); GSKM-RQ beside them. FAISS from PyPI
# (tools/python/faiss.lock, in a cached virtual environment) and Debian's python3-faiss where it is
# installed; the runs alternate `reps` times and each keeps its fastest (the NMSE does not change).
#   tools/bench/bench_rq.sh [rows] [dim] [stages] [k] [iters] [reps]
set -euo pipefail
cd "$(dirname "$0")/../.."
rows=${1:-50000} dim=${2:-64} stages=${3:-8} k=${4:-256} iters=${5:-10} reps=${6:-2}
threads=${GSRQ_THREADS:-$(nproc)}
nbits=$(awk -v k="$k" 'BEGIN { n = 0; while (2 ^ n < k) n++; print n }')
bash tools/setup.sh --bench --python
bash tools/build.sh
pypi=$(bash tools/bench/faiss_env.sh)
debian=/usr/bin/python3
"$debian" -c 'import faiss' 2>/dev/null || debian=
gsrq=build/app/cli/gsrq
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$gsrq" --no-db synth gaussian --rows "$rows" --features "$dim" --seed 1 --out "$tmp/train.npy"
"$gsrq" --no-db synth gaussian --rows $((rows / 5)) --features "$dim" --seed 2 --out "$tmp/heldout.npy"
run_gsrq() { # method beam rep [beam-train]
  "$gsrq" --no-db train "$tmp/train.npy" --dim "$dim" --stages "$stages" --k "$k" --iters "$iters" --method "$1" \
    --beam "$2" --beam-train "${4:-all}" --threads "$threads" --eval "$tmp/heldout.npy" --json -q \
    >"$tmp/gsrq-$1-$2${4:+-$4}-$3.json"
}
for rep in $(seq "$reps"); do
  for beam in 1 8; do
    run_gsrq km "$beam" "$rep"
    for side in pypi debian; do
      py=${!side}
      [[ -n $py ]] || continue
      OMP_NUM_THREADS=$threads "$py" tools/bench/faiss_rq.py "$tmp/train.npy" "$tmp/heldout.npy" --stages "$stages" \
        --nbits "$nbits" --iters "$iters" --beam "$beam" >"$tmp/$side-$beam-$rep.json"
    done
  done
  run_gsrq km 8 "$rep" best
  run_gsrq gskm 1 "$rep"
done
/usr/bin/python3 - "$tmp" "$rows" "$dim" "$stages" "$k" "$iters" "$reps" <<'PY'
import glob, json, sys
tmp, rows, dim, stages, k, iters, reps = sys.argv[1:]
def ours(method, beam):
    ts = [json.load(open(p))["tensors"][0] for p in glob.glob(f"{tmp}/gsrq-{method}-{beam}-[0-9]*.json")]
    return min(t["train"]["seconds"] for t in ts), ts[0]["heldout"]["nmse"]
def faiss(side, beam):
    fs = [json.load(open(p)) for p in glob.glob(f"{tmp}/{side}-{beam}-*.json")]
    if not fs:
        return None
    return min(f["train_seconds"] for f in fs), fs[0]["heldout_nmse"], fs[0]["faiss_version"]
print(f"data: synthetic gaussian, {rows} training + {int(rows) // 5} held-out rows x {dim}; "
      f"R={stages}, K={k}, {iters} iterations per stage; fastest of {reps} alternating runs")
for beam in (1, 8):
    s, n = ours("km", beam)
    print(f"beam {beam}: gsrq KM-RQ train {s:.2f} s, held-out NMSE {n:.5f}")
    for side, where in (("pypi", "PyPI wheel"), ("debian", "Debian")):
        f = faiss(side, beam)
        if f:
            fs, fn, ver = f
            print(f"        FAISS {ver} ({where}) train {fs:.2f} s, held-out NMSE {fn:.5f}: gsrq {fs / s:.2f}x "
                  f"as fast, NMSE {100 * (n / fn - 1):+.2f}%")
s, n = ours("km", "8-best")
print(f"gsrq KM-RQ beam 8, stages trained on the best beam only (--beam-train best): train {s:.2f} s, "
      f"held-out NMSE {n:.5f}")
s, n = ours("gskm", 1)
print(f"gsrq GSKM-RQ greedy: train {s:.2f} s, held-out NMSE {n:.5f}")
PY
