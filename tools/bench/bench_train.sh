#!/usr/bin/env bash
# The CUDA backend against a straightforward PyTorch KM/GSKM iteration on the same generated data
# (synthetic, key-like), on the same GPU, in one run; then a whole GSRQ layer with gsrq bench-train.
# Needs a CUDA device, a CUDA build of gsrq, and PyTorch with CUDA for python3.
#   tools/bench/bench_train.sh [rows] [features] [dim] [stages] [k] [iters]
set -euo pipefail
cd "$(dirname "$0")/../.."
rows=${1:-262144} features=${2:-1024} dim=${3:-128} stages=${4:-16} k=${5:-256} iters=${6:-40}
gsrq=${GSRQ:-build/app/cli/gsrq}
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$gsrq" check-gpu >"$tmp/check.txt" || { cat "$tmp/check.txt"; exit 1; }
"$gsrq" synth kv --rows "$rows" --features "$dim" --seed 0 --out "$tmp/block.npy"
for m in km gskm; do
  "$python" tools/bench/torch_gskm.py "$tmp/block.npy" --k "$k" --iters 20 --method "$m" >"$tmp/torch_$m.json"
done
"$gsrq" --no-db bench-cluster --input "$tmp/block.npy" --k "$k" --iters 20 --backend cuda --json >"$tmp/gsrq.json"
"$gsrq" --no-db bench-train --rows "$rows" --features "$features" --dim "$dim" --stages "$stages" --k "$k" \
  --iters "$iters" --backend cuda --json >"$tmp/layer.json"
"$python" - "$tmp" <<'PY'
import json, sys, os
t = sys.argv[1]
ours = json.load(open(os.path.join(t, "gsrq.json")))
layer = json.load(open(os.path.join(t, "layer.json")))
print(f"device: {ours['device']}")
print(f"one subspace: synthetic kv {ours['rows']} x {ours['dim']}, K={ours['k']}, median of 20 iterations")
for m in ("km", "gskm"):
    torch = json.load(open(os.path.join(t, f"torch_{m}.json")))
    s = ours["methods"][m]["seconds_per_iteration"]
    p = torch["seconds_per_iteration"]
    print(f"  {m:<5} gsrq {s*1e3:8.3f} ms  torch {torch['torch_version']} {p*1e3:8.3f} ms  -> {p/s:.2f}x PyTorch")
print(f"whole layer ({layer['rows']} x {layer['features']}, D={layer['dim']}, R={layer['stages']}, K={layer['k']}, "
      f"{layer['iters']} iterations): {layer['layer_seconds']:.3f} s")
print(f"  per iteration {layer['seconds_per_iteration']*1e3:.3f} ms, {layer['achieved_flops']/1e12:.1f} TFLOP/s "
      f"= {100*layer['fraction_of_peak']:.0f}% of FP32 peak {layer['peak_fp32_flops']/1e12:.1f} TFLOP/s")
PY
