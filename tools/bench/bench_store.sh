#!/usr/bin/env bash
# What recording into the run store costs: the same GSRQ training (100 iterations, 16 stages,
# 8 subspaces) with --no-db and with a fresh store, alternating, five times each; prints the
# median times and the overhead.
#   tools/bench/bench_store.sh [rows]
set -euo pipefail
cd "$(dirname "$0")/../.."
rows=${1:-20000}
bash tools/setup.sh
bash tools/build.sh
gsrq=build/app/cli/gsrq
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$gsrq" --no-db synth gaussian --rows "$rows" --features 128 --seed 0 --out "$tmp/data.npy"
args=(train "$tmp/data.npy" --dim 16 --stages 16 --k 64 --iters 100 -q --attention-queries 0)
timeit() { local t0 t1; t0=$(date +%s%N); "$gsrq" "$@" >/dev/null; t1=$(date +%s%N); echo $(((t1 - t0) / 1000000)); }
off=() on=()
for i in 1 2 3 4 5; do
  off+=("$(timeit --no-db "${args[@]}")")
  on+=("$(timeit --db "$tmp/runs$i.db" "${args[@]}")")
done
rowsRecorded=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from iterations').fetchone()[0])" "$tmp/runs1.db")
python3 - "${off[@]}" "${on[@]}" "$rowsRecorded" <<'PY'
import statistics, sys
v = [float(x) / 1000 for x in sys.argv[1:11]]
off, on = statistics.median(v[:5]), statistics.median(v[5:])
print(f"training, 8 subspaces x 16 stages, up to 100 iterations: --no-db {off:.2f} s, recorded {on:.2f} s "
      f"(median of 5 each), overhead {100 * (on / off - 1):+.2f}%, {sys.argv[11]} iteration rows recorded")
PY
