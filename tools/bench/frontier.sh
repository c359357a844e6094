#!/usr/bin/env bash
# The decode speed–quality frontier on a GPU model: for D = 64 and 128 and the R that give 0.5, 0.75
# and 1 bits per activation (K = 256), trains GSRQ codebooks on the head_dim-128 sample (layer 2) for
# their attention-output error, with keys before RoPE as the paper path stores them and after RoPE as
# the lookup path does, and takes each path's time per decode step from `gsrq bench-decode
# --model-device` (the counted-bytes roofline on the named GPU; no GPU needed, nothing timed) at the
# same D, R, K (32 query heads, 8 KV heads, head_dim 128). Prints one markdown table. Both kinds of
# run are recorded in the run store (--db, default gsrq's), where the Latency page's frontier chart
# joins them (and draws a GPU's measured runs of the same shapes instead, once there are some).
#   tools/bench/frontier.sh [--db runs.db] [--model-device h200] [--ctx 32768] [--batch 1,8] [--iters 25]
set -euo pipefail
cd "$(dirname "$0")/../.."
gsrq=${GSRQ:-build/app/cli/gsrq}
python=${PYTHON:-python3}
db=() device=h200 ctx=32768 batch=1,8 iters=25
while [[ $# -gt 0 ]]; do
  case $1 in
    --db) db=(--db "$2"); shift 2 ;;
    --model-device) device=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    *) echo "frontier.sh: unknown argument $1 (--db, --model-device, --ctx, --batch, --iters)" >&2; exit 2 ;;
  esac
done
sample=resources/samples/pydocs-hd128
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for dim in 128 64; do
  for bpa in 0.5 0.75 1; do
    stages=$("$python" -c "print(round($bpa * $dim / 8))")
    for rope in as-dumped post; do
      "$gsrq" ${db[@]+"${db[@]}"} train "$sample" --tensors 'layers.2.*' --dim "$dim" --stages "$stages" --k 256 \
        --iters "$iters" --key-rope "$rope" --json -q >"$tmp/train-$dim-$bpa-$rope.json"
    done
    "$gsrq" ${db[@]+"${db[@]}"} bench-decode --model-device "$device" --dim "$dim" --stages "$stages" --k 256 \
      --ctx "$ctx" --batch "$batch" --json >"$tmp/decode-$dim-$bpa.json"
  done
done
"$python" - "$tmp" "$ctx" "$batch" <<'PY'
import json, os, sys
tmp, ctx, batches = sys.argv[1], int(sys.argv[2].split(",")[0]), [int(b) for b in sys.argv[3].split(",")]
first = json.load(open(os.path.join(tmp, "decode-128-0.5.json")))["summary"]["model"]
print(f"Model of the {first['device']} (no timing): {first['hbm_source']}; shared memory "
      f"{first['shared_bytes_per_second'] / 1e12:.1f} TB/s; L2 {first['l2_bytes_per_second'] / 1e12:.1f} TB/s "
      f"({first['l2_source']}); FP32 {first['fp32_flops'] / 1e12:.1f} TFLOP/s. "
      f"{ctx // 1024}K tokens, 32 query heads on 8 KV heads × 128, per layer and decode step.")
print()
head = " | ".join(f"{path} batch {b}" for path in ("paper", "lookup") for b in batches)
print(f"| D | R | BPA | attention error, paper (keys before RoPE) | lookup (after RoPE) | {head} |")
print("| ---: | ---: | ---: | ---: | ---: |" + " ---: |" * (2 * len(batches)))
fp16 = {}
for dim in ("128", "64"):
    for bpa in ("0.5", "0.75", "1"):
        def error(rope):
            train = json.load(open(os.path.join(tmp, f"train-{dim}-{bpa}-{rope}.json")))
            return sum(a["relative_l2"] for a in train["attention"]) / len(train["attention"])
        dec = json.load(open(os.path.join(tmp, f"decode-{dim}-{bpa}.json")))
        cells = []
        for path in ("paper", "lookup"):
            for b in batches:
                p = next(p for p in dec["points"] if p["path"] == path and p["context"] == ctx and p["batch"] == b)
                f = next(p for p in dec["points"] if p["path"] == "fp16" and p["context"] == ctx and p["batch"] == b)
                fp16[b] = f["seconds_per_layer"]
                if "seconds_per_layer" not in p:
                    cells.append(p.get("skipped", "—"))
                    continue
                extra = "" if path == "lookup" or p.get("paper_values") == "per-codeword weights" else ", codeword sums"
                cells.append(f"{p['seconds_per_layer'] * 1e6:.0f} µs ({p['speedup_vs_fp16']:.2f}×, "
                             f"{p['roofline_bound']}{extra})")
        print(f"| {dim} | {dec['settings']['stages']} | {bpa} | {error('as-dumped'):.4f} | {error('post'):.4f} | "
              + " | ".join(cells) + " |")
print()
print("FP16 split-K at the same point: " + ", ".join(f"batch {b}: {fp16[b] * 1e6:.0f} µs" for b in batches)
      + " (model); in brackets each path's speed-up over it and the term that bounds it.")
PY
