#!/usr/bin/env bash
# Retakes docs/screenshots from the built app (build/), offscreen, on the bundled sample and a run
# store of its own. The Sweeps page shows the paper check (synthetic Gaussian data).
set -euo pipefail
cd "$(dirname "$0")/.."
studio=build/app/studio/gsrq-studio
sample=resources/samples/stories260K-gpl3.safetensors
out=docs/screenshots
store=$(mktemp -d)/shots.db
export QT_QPA_PLATFORM=offscreen
shot() { "$studio" --store "$store" --screenshot "$out/$1.png" "${@:2}"; echo "wrote $out/$1.png"; }
shot dataset --open "$sample" --page dataset --tensor layers.2.key
shot compare --open "$sample" --page compare --run compare --tensor layers.2.value
shot sweeps --page sweeps --run paper-check
shot train --open "$sample" --page train --run train
shot weights --open "$sample" --page weights
shot runs --page runs --select 1,3
shot latency --page latency
