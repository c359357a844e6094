#!/usr/bin/env bash
# Retakes docs/screenshots from the built app (build/), offscreen, on the bundled sample and a run
# store of its own. The Sweeps page shows the paper check (synthetic Gaussian data); the model page
# is shown on the sample and on a synthetic 16-layer dump (gsrq synth kv --layers 16), whose PDF
# report's pages are rendered by pdftoppm (poppler-utils); the Runs page shows the perplexity of the
# bundled model with KM-RQ and GSKM-RQ codebooks trained on the sample at 0.5, 1 and 2 bits.
#
#   tools/screenshots.sh --smollm2 [PAGE ...]
#                                    the walk on a real model instead: every page (or those named) on SmolLM2-135M's
#                                    dump from the README's first job (bash tools/run.sh), its
#                                    perplexity tables, a CPU latency sweep and a small long-context
#                                    run, into docs/screenshots/smollm2/ (docs/app.md shows them;
#                                    about 8 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
studio=build/app/studio/gsrq-studio
if [[ ${1:-} == --smollm2 ]]; then
  first=${GSRQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gsrq-studio}/tables/smollm2-devil-first
  dump=$first/calib-32x512
  if [[ ! -d $dump ]]; then
    echo "screenshots.sh: no SmolLM2 dump at $dump: run the README's first job (bash tools/run.sh) first" >&2
    exit 2
  fi
  pages=("${@:2}")
  ((${#pages[@]})) || pages=(dataset model compare train weights runs latency long-context)
  out=docs/screenshots/smollm2
  mkdir -p "$out"
  store=$(mktemp -d)/walk.db
  export QT_QPA_PLATFORM=offscreen
  shot() { "$studio" --store "${shotstore:-$store}" --screenshot "$out/$1.png" "${@:2}"; echo "wrote $out/$1.png"; }
  start=$(date +%s)
  for page in "${pages[@]}"; do
    case $page in
    dataset) shot dataset --open "$dump" --page dataset --tensor layers.15.key ;;
    model) shot model --open "$dump" --page model --run model --tensor 'layers.*.*' ;;
    compare) shot compare --open "$dump" --page compare --run compare --tensor layers.26.value ;;
    train) shot train --open "$dump" --page train --run train --tensor layers.15.key,layers.15.value ;;
    weights) shot weights --open "$dump" --page weights ;;
    runs)
      # The perplexity tables as ppl runs: the first job's, the documented 3-seed tables of
      # docs/real-models.md (512- and 2,048-token windows, in-domain and out-of-domain calibration),
      # and KIVI at 2 and 1 bits on the first job's evaluation windows (8 × 512 tokens).
      # A store of their own, which numbers its runs from 1: the page shows these and nothing else.
      shotstore=$(dirname "$store")/runs.db
      ids=()
      for table in "$first/table.json" docs/real-models/raw/smollm2-devil-*.json; do
        build/app/cli/gsrq --db "$shotstore" runs add-ppl "$table"
        ids+=($((${#ids[@]} + 1)))
      done
      model=$(python3 tools/fetch_model.py smollm2 | tail -1)
      text=$(python3 tools/texts.py devil | tail -1)
      build/app/cli/gsrq --db "$shotstore" ppl "$model" --text "$text" --seq-len 512 --sequences 8 \
        --methods fp32,kivi-2,kivi-1 -q >/dev/null
      ids+=($((${#ids[@]} + 1)))
      shot runs --open "$dump" --page runs --select "$(IFS=,; echo "${ids[*]}")"
      shotstore=""
      ;;
    latency) shot latency --page latency --run latency ;;
    long-context) shot long-context --page long-context --run tasks --tensor fp16,kivi-2,kivi-1 ;;
    *)
      echo "screenshots.sh: --smollm2 $page: not one of dataset model compare train weights runs latency long-context" >&2
      exit 2
      ;;
    esac
  done
  echo "the walk took $(($(date +%s) - start)) s"
  exit 0
fi
sample=resources/samples/stories260K-gpl3.safetensors
out=docs/screenshots
store=$(mktemp -d)/shots.db
export QT_QPA_PLATFORM=offscreen
shot() { "$studio" --store "$store" --screenshot "$out/$1.png" "${@:2}"; echo "wrote $out/$1.png"; }
shot dataset --open "$sample" --page dataset --tensor layers.2.key
shot compare --open "$sample" --page compare --run compare --tensor layers.2.value
shot sweeps --page sweeps --run paper-check
shot train --open "$sample" --page train --run train
# The GSRQ page's comparison of methods on the head_dim-128 model (its Preferences default for that
# dump), the trained methods learnt on the sample's layer 2 (about a minute on 2 cores).
shot methods --open resources/samples/pydocs-hd128 --page train --run methods \
  --tensor fp32,kivi-2,kivi-2g128,kivi-1,cq-2c8b,cq-8c8b,km-rq@1,gsrq@1,km-rq@0.75,gsrq@0.75
shot weights --open "$sample" --page weights
shot runs --page runs --select 1,3
# The Latency page after a CPU sweep (the default contexts, about a minute), with the train runs of the
# same D, R, K on the head_dim-128 sample that give its speed–quality table's attention errors (keys
# before RoPE for the paper path, after it for the lookup path).
for rope in as-dumped post; do
  build/app/cli/gsrq --db "$store" train resources/samples/pydocs-hd128 --tensors 'layers.2.*' --dim 128 \
    --stages 12 --k 256 --key-rope "$rope" -q >/dev/null
done
shot latency --page latency --run latency
shot model --open "$sample" --page model --run model
"$studio" --store "$store" --open "$sample" --page model --run model --report "$out/report.png"
echo "wrote $out/report.png (the top of File ▸ Export report's document)"
synthetic=$(dirname "$store")/synthetic-16.safetensors
build/app/cli/gsrq synth kv --layers 16 --rows 4096 --features 64 --seed 1 --out "$synthetic"
shot model-synthetic-16 --open "$synthetic" --page model --run model
"$studio" --store "$store" --open "$synthetic" --page model --run model --report "$(dirname "$store")/report-16.pdf"
rm -f "$out"/report-pdf-page-*.png
pdftoppm -r 60 -png "$(dirname "$store")/report-16.pdf" "$out/report-pdf-page"
echo "wrote $(ls "$out"/report-pdf-page-*.png | tr '\n' ' ')(the 16-layer model's PDF report, page by page)"
# Perplexity against effective bits: KM-RQ and GSKM-RQ (grad-log weights) at 0.5, 1 and 2 BPA on
# the model's own samples, beside FP32.
model=resources/models/stories260K
ids=()
for method in km gskm; do
  weights=none
  [[ $method == gskm ]] && weights=grad-log
  for rate in "16 1" "8 1" "8 2"; do
    read -r dim stages <<<"$rate"
    books=$(dirname "$store")/$method-$dim-$stages.safetensors
    build/app/cli/gsrq --db "$store" train "$sample" --dim "$dim" --stages "$stages" --k 256 --method "$method" \
      --weights "$weights" --out "$books" -q >/dev/null
    ids+=("$(build/app/cli/gsrq --db "$store" ppl "$model/stories260K.bin" --tokenizer "$model/tok512.bin" --generate \
      --seed 0 -c "$books" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["run_id"])')")
  done
done
shot perplexity --page runs --select "$(IFS=,; echo "${ids[*]}")"
