#!/usr/bin/env bash
# Speed and quality at equal bits on the CPU: for 0.5, 0.75 and 1 bits per activation (D = head_dim
# 128, K = 256, R = 8, 12, 16), trains GSRQ codebooks on the head_dim-128 sample (layer 2) for their
# attention-output error, with keys before RoPE as the paper path stores them and after RoPE as the
# lookup path does (the later run, the one the Latency page shows), and times one decode step per
# path with `gsrq bench-decode --backend cpu` at the same D, R, K (32 query heads, 8 KV heads; the
# timing does not depend on the codebooks' values, so they are synthetic). Prints one markdown table.
# Both kinds of run are recorded in the run store (--db, default gsrq's), where the Latency page's
# speed–quality table joins them.
#   tools/bench/speed_quality.sh [--db runs.db] [--ctx 4096,32768,131072] [--threads N]
set -euo pipefail
cd "$(dirname "$0")/../.."
gsrq=${GSRQ:-build/app/cli/gsrq}
python=${PYTHON:-python3}
db=() ctx=4096,32768,131072 threads=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --db) db=(--db "$2"); shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "speed_quality.sh: unknown argument $1 (--db, --ctx, --threads)" >&2; exit 2 ;;
  esac
done
sample=resources/samples/pydocs-hd128
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for bpa in 0.5 0.75 1; do
  stages=$("$python" -c "print(round($bpa * 16))")
  for rope in as-dumped post; do
    "$gsrq" "${db[@]}" train "$sample" --tensors 'layers.2.*' --dim 128 --stages "$stages" --k 256 \
      --key-rope "$rope" --json >"$tmp/train-$bpa-$rope.json"
  done
  "$gsrq" "${db[@]}" bench-decode --backend cpu --threads "$threads" --bpa "$bpa" --ctx "$ctx" --batch 1 \
    --reps 20 --json >"$tmp/decode-$bpa.json"
done
"$python" - "$tmp" "$ctx" <<'PY'
import json, os, sys
tmp, ctx = sys.argv[1], [int(c) for c in sys.argv[2].split(",")]
first = json.load(open(os.path.join(tmp, "decode-0.5.json")))["summary"]
print(f"{first['device']}, {first['threads']} thread(s), {first['isa']} kernels; measured in each run: "
      f"DRAM read {first['read_bytes_per_second'] / 1e9:.1f} GB/s (first run)")
print()
print("fp16: its share of a plain read of the same rows timed in alternation with it, and how many times "
      "faster than Eigen FP32 dense attention on the same cache; the others: the speed-up over fp16 and "
      "the roofline term that bounds them")
print()
head = " | ".join(f"{c // 1024}K tokens" for c in ctx)
print(f"| BPA | R | attention error on the sample | path | {head} |")
print("| --- | ---: | ---: | --- |" + " ---: |" * len(ctx))
for bpa in ("0.5", "0.75", "1"):
    def error(rope):
        train = json.load(open(os.path.join(tmp, f"train-{bpa}-{rope}.json")))
        return sum(a["relative_l2"] for a in train["attention"]) / len(train["attention"])
    errors = {"fp16": None, "lookup": error("post"), "paper": error("as-dumped")}
    dec = json.load(open(os.path.join(tmp, f"decode-{bpa}.json")))
    stages = dec["settings"]["stages"]
    for path in ("fp16", "lookup", "paper"):
        cells = []
        for c in ctx:
            p = next(p for p in dec["points"] if p["path"] == path and p["context"] == c)
            t = p.get("seconds_per_layer")
            if t is None:
                cells.append(p.get("skipped", "—"))
                continue
            cell = f"{t * 1e3:.2f} ms"
            if path != "fp16":
                cell += f" ({p['speedup_vs_fp16']:.2f}×, {p['roofline_bound']})"
            else:
                eigen = p.get("eigen_fp32_seconds")
                cell += (f" ({p['fraction_of_read_rows'] * 100:.0f}% of a read of its rows, "
                         + (f"{eigen / t:.1f}× Eigen FP32)" if eigen else "Eigen FP32 not run)"))
            cells.append(cell)
        quality = "—" if errors[path] is None else f"{errors[path]:.4f}"
        print(f"| {bpa} | {stages} | {quality} | {path} | " + " | ".join(cells) + " |")
PY
