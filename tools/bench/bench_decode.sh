#!/usr/bin/env bash
# Decode latency over the compressed cache: PyTorch's scaled_dot_product_attention on the shapes
# first (the outside anchor), then gsrq bench-decode, which verifies every path against the CPU
# reference, times it, and prints the ratio to our FP16 kernel and to PyTorch. Needs a CUDA device,
# a CUDA build of gsrq, and PyTorch with CUDA for python3.
#   tools/bench/bench_decode.sh [ctx-list] [batch-list] [bpa]
set -euo pipefail
cd "$(dirname "$0")/../.."
ctx=${1:-1024,8192,32768,65536,131072} batch=${2:-1,8,16,32} bpa=${3:-0.75}
gsrq=${GSRQ:-build/app/cli/gsrq}
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shape=(--heads 32 --kv-heads 8 --head-dim 128)
"$python" tools/bench/torch_decode.py "${shape[@]}" --ctx "$ctx" --batch "$batch" >"$tmp/torch.json"
"$gsrq" bench-decode "${shape[@]}" --ctx "$ctx" --batch "$batch" --bpa "$bpa" --anchor "$tmp/torch.json" --json \
  >"$tmp/gsrq.json"
"$python" - "$tmp" <<'PY'
import json, os, sys
t = sys.argv[1]
g = json.load(open(os.path.join(t, "gsrq.json")))
s = g["summary"]
print(f"device {s['device']}: copy {s['copy_bytes_per_second']/1e9:.0f} GB/s measured; "
      f"settings {g['settings']['dim']}/{g['settings']['stages']}/{g['settings']['k']} (D/R/K), "
      f"{g['settings']['bpa']:.3g} bits per activation, {g['settings']['codebooks']} codebooks")
print(f"{'ctx':>7} {'batch':>5} {'path':<7} {'µs/layer':>10} {'GB/s':>7} {'of copy':>7} {'vs fp16':>8} {'vs torch':>8} "
      f"{'err':>8} {'roofline':>9}")
for p in g["points"]:
    if "skipped" in p:
        print(f"{p['context']:>7} {p['batch']:>5} {p['path']:<7} skipped: {p['skipped']}")
        continue
    print(f"{p['context']:>7} {p['batch']:>5} {p['path']:<7} {p['seconds_per_layer']*1e6:>10.2f} "
          f"{p['bytes_per_second']/1e9:>7.0f} {100*p['fraction_of_copy_bandwidth']:>6.0f}% "
          f"{p.get('speedup_vs_fp16', 1.0):>7.2f}x {p.get('speedup_vs_torch', float('nan')):>7.2f}x "
          f"{p.get('rel_error', float('nan')):>8.1e} "
          f"{100*p.get('fraction_of_roofline', float('nan')):>4.0f}% {p.get('roofline_bound', ''):<6}")
PY
