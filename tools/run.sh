#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job on the bundled sample (or on the dump
# given as the first argument). With a display: the desktop app on that dump. Without one: the
# tensors of the dump, KM against GSKM on a key and a value tensor of a middle layer, then GSRQ
# codebooks for that layer with held-out rows, their perplexity, and the paper's comparison of methods.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh
gsrq=build/app/cli/gsrq
dump=${1:-resources/samples/pydocs-hd128}

# With a display, the desktop app opens the dump; without one, the command-line job below runs.
if [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" && -x build/app/studio/gsrq-studio ]]; then
  exec build/app/studio/gsrq-studio "$dump"
fi

"$gsrq" info "$dump"
echo
if [[ $# -eq 0 ]]; then
  # The sample (docs/sample-hd128.md): a Llama with head_dim 128 trained here, 6,144 held-out tokens
  # of its layer 2, 2 KV heads × 128 = 256 features. KM against GSKM on whole heads (D = 128), then
  # GSRQ codebooks at 0.5 bits per activation (8 stages × 256 codewords) for keys and values, with
  # a quarter of the rows held out, and the perplexity they cost the model (on the first sequences of
  # its held-out text, whose layer-2 keys and values are the dump's: tools/sample_report.py trains
  # every layer's codebooks on training text instead, docs/sample-hd128.md).
  model=resources/models/pydocs-hd128
  "$gsrq" compare "$dump" --tensor layers.2.key --dim 128 --k 256 --weights grad-log
  echo
  "$gsrq" compare "$dump" --tensor layers.2.value --dim 128 --k 256 --weights grad-log
  echo
  "$gsrq" train "$dump" --dim 128 --stages 8 --k 256 --weights grad-log --holdout 0.25 \
    --out build/sample-codebooks.safetensors --force
  echo
  "$gsrq" ppl "$model/model.bin" --tokenizer "$model/tokenizer.bin" --text "$model/heldout.txt" \
    --seq-len 512 --sequences 4 -c build/sample-codebooks.safetensors
  echo
  # The paper's comparison on this model (docs/baselines.md): KIVI, CQ, KM-RQ and GSRQ at matched
  # bits, layer 2's cache compressed, the trained methods learnt on the sample's layer 2.
  "$gsrq" ppl "$model/model.bin" --tokenizer "$model/tokenizer.bin" --text "$model/heldout.txt" \
    --seq-len 512 --sequences 4 --layers 2 --train-dump "$dump" \
    --methods fp32,kivi-2,kivi-1,cq-2c8b,cq-8c8b,km-rq@1,gsrq@1,gsrq@0.75
  echo
  "$gsrq" runs list --limit 4
else
  # A dump of one tensor (a .npy, say) is compared as it is. A model's dump: a middle layer's key
  # and value, as for the sample (D and K from the flags, else the whole rows and K = 256).
  mapfile -t picked < <("$gsrq" info "$dump" --json | /usr/bin/python3 -c '
import json, re, sys
names = [t["name"] for t in json.load(sys.stdin)["tensors"]]
layers = sorted({int(m.group(1)) for n in names if (m := re.fullmatch(r"layers\.(\d+)\.(key|value)", n))})
if layers:
    mid = layers[len(layers) // 2]
    print("\n".join(n for n in (f"layers.{mid}.key", f"layers.{mid}.value") if n in names))
')
  if ((${#picked[@]} == 0)); then
    "$gsrq" compare "$dump" "${@:2}"
  else
    for tensor in "${picked[@]}"; do
      "$gsrq" compare "$dump" --tensor "$tensor" "${@:2}"
      echo
    done
  fi
fi
