#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job on the bundled sample (or on the dump
# given as the first argument). With a display: the desktop app on that dump. Without one: the
# tensors of the dump, KM against GSKM on a key and a value tensor of a middle layer, then GSRQ
# codebooks for that layer with held-out rows.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh
gsrq=build/app/cli/gsrq
dump=${1:-resources/samples/stories260K-gpl3.safetensors}

# With a display, the desktop app opens the dump; without one, the command-line job below runs.
if [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" && -x build/app/studio/gsrq-studio ]]; then
  exec build/app/studio/gsrq-studio "$dump"
fi

"$gsrq" info "$dump"
echo
if [[ $# -eq 0 ]]; then
  # The sample: 2,048 real tokens, 4 KV heads × head_dim 8 = 32 features per layer.
  "$gsrq" compare "$dump" --tensor layers.2.key --dim 8 --k 64 --weights grad-log
  echo
  "$gsrq" compare "$dump" --tensor layers.2.value --dim 8 --k 64 --weights grad-log
  echo
  "$gsrq" train "$dump" --layers 2 --dim 8 --stages 4 --k 64 --weights grad-log --holdout 0.25 \
    --out build/sample-codebooks.safetensors --force
  echo
  "$gsrq" runs list --limit 3
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
