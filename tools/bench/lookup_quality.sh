#!/usr/bin/env bash
# The lookup path's quality cost: it needs keys stored after RoPE, which quantize worse than keys
# before RoPE (the paper path's). Trains GSRQ codebooks for the keys of every layer both ways on
# the same dump and settings (CPU or GPU), and prints key NMSE and attention fidelity side by side.
#   tools/bench/lookup_quality.sh [DUMP] [gsrq train flags...]
# The dump's keys must be stored before RoPE (key_rope: pre) with its RoPE metadata.
set -euo pipefail
cd "$(dirname "$0")/../.."
dump=${1:-resources/samples/stories260K-gpl3.safetensors}
shift || true
flags=("$@")
[[ ${#flags[@]} -gt 0 ]] || flags=(--dim 8 --stages 4 --k 16 --iters 20)
gsrq=${GSRQ:-build/app/cli/gsrq}
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$gsrq" --no-db train "$dump" --tensors 'layers.*.key' "${flags[@]}" --key-rope as-dumped --json >"$tmp/pre.json"
"$gsrq" --no-db train "$dump" --tensors 'layers.*.key' "${flags[@]}" --key-rope post --json >"$tmp/post.json"
"$python" - "$tmp" "$dump" "${flags[*]}" <<'PY'
import json, os, sys
t, dump, flags = sys.argv[1:4]
pre, post = (json.load(open(os.path.join(t, f"{n}.json"))) for n in ("pre", "post"))
print(f"{dump}, keys, gsrq train {flags}: before RoPE (paper path) vs after RoPE (lookup path)")
print(f"{'layer':>5} {'nmse pre':>9} {'nmse post':>9} {'attn rel-L2 pre':>15} {'post':>6} {'top-8 pre':>9} {'post':>6}")
for a, b, ta, tb in zip(pre["attention"], post["attention"], pre["tensors"], post["tensors"]):
    print(f"{a['layer']:>5} {ta['train']['nmse']:>9.4f} {tb['train']['nmse']:>9.4f} {a['relative_l2']:>15.3f} "
          f"{b['relative_l2']:>6.3f} {a['top8_overlap']:>9.3f} {b['top8_overlap']:>6.3f}")
PY
