#!/usr/bin/env bash
# Everything the GPU side is judged by, in one command, on a machine with an NVIDIA GPU, the bundle
# of tools/gpu/bundle.sh, and python3 with PyTorch (CUDA) for the outside baselines:
#   tools/gpu/run-all.sh OUTDIR [--no-sanitizer] [--no-profile] [--quick | --tiny] [--budget SECONDS]
# Each tool's output goes unedited into OUTDIR (one file per step, its stderr beside it as .err, its
# exit status and seconds in steps.tsv); gpu-summary.json gathers the figures the benchmarks are
# judged by, null where a step could not measure one. A failing step does not stop the others. The
# frontier's decode runs are also recorded in OUTDIR/runs.db (gsrq runs import takes them).
# --budget caps the whole run: each step's limit is cut to what is left (the summary's time kept
# aside), and a step that would get under 10 s is skipped (exit "skipped" in steps.tsv). The steps
# run in the order of what they prove: correctness on the device first, then speed, then tools.
# --tiny runs every step on shapes small enough for the CUDA emulator (the test suite runs it so,
# against the emulated build, to prove the script and its command lines), and leaves out check-gpu,
# whose checks the emulated suites run. GSRQ_SUITE_ARGS: arguments for both GPU suites (QtTest's,
# e.g. the test functions to run). NCU, NSYS and COMPUTE_SANITIZER: those tools, where not on the
# PATH or in /usr/local/cuda/bin.
set -uo pipefail
cd "$(dirname "$0")/../.."
usage="usage: tools/gpu/run-all.sh OUTDIR [--no-sanitizer] [--no-profile] [--quick | --tiny] [--budget SECONDS]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd); shift
sanitizer=1 profile=1 quick=0 tiny=0 budget=0
while [ $# -gt 0 ]; do
  case $1 in
    --no-sanitizer) sanitizer=0 ;;
    --no-profile) profile=0 ;;
    --quick) quick=1 ;;
    --tiny) tiny=1 ;;
    --budget)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "run-all.sh: --budget needs a whole number of seconds" >&2; exit 2; }
      budget=$2; shift ;;
    *) echo "run-all.sh: unknown option $1" >&2; echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
deadline=0; [ "$budget" -gt 0 ] && deadline=$(( $(date +%s) + budget - 15 ))
python=${PYTHON:-python3}

# shellcheck source=unpack.sh
. tools/gpu/unpack.sh
work=$(mktemp -d -p "${TMPDIR:-/tmp}" gsrq-run.XXXXXX)
trap 'rm -rf "${bundle_tmp:-}" "$work"' EXIT
export GSRQ_TEST_SOURCE_DIR=$root GSRQ_TEST_CLI=$gsrq
printf 'step\texit\tseconds\n' >"$out/steps.tsv"
cp "$root/COMMIT" "$out/commit.txt"

# step NAME SECONDS COMMAND...: stdout to OUTDIR/NAME, stderr to OUTDIR/NAME.err, status to steps.tsv.
step() {
  local name=$1 limit=$2; shift 2
  if [ "$deadline" -gt 0 ]; then
    local left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt 10 ]; then
      echo "== $name: skipped, the budget is spent" >&2
      printf '%s\tskipped\t0\n' "$name" >>"$out/steps.tsv"
      return 0
    fi
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  echo "== $name: $*" >&2
  local t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >"$out/$name" 2>"$out/$name.err"
  local rc=$?
  local t1=$(date +%s.%N)
  awk -v n="$name" -v r=$rc -v a="$t0" -v b="$t1" 'BEGIN {printf "%s\t%d\t%.1f\n", n, r, b - a}' >>"$out/steps.tsv"
  [ $rc -eq 0 ] || { echo "   exit $rc; last lines of stderr:" >&2; tail -n 5 "$out/$name.err" >&2; }
  return 0
}

sample=$root/resources/samples/stories260K-gpl3.safetensors
# The shapes: the paper's 1-BPA layer and decode shapes, smaller with --quick, tiny with --tiny.
rows=262144 features=1024 dim=128 stages=16 k=256 iters=40 small_rows=32768
sample_args=(--dim 8 --stages 4 --k 64)
shape=(--heads 32 --kv-heads 8 --head-dim 128 --ctx 1024,8192,32768,131072 --batch 1,8)
point=(--heads 32 --kv-heads 8 --head-dim 128 --ctx 32768 --batch 1)
frontier=(--heads 32 --kv-heads 8 --head-dim 128 --ctx 32768 --batch 1,8) frontier_dims=(128 64)
[ $quick = 1 ] && rows=65536 small_rows=8192
if [ $tiny = 1 ]; then
  rows=4096 features=128 dim=64 stages=2 k=16 iters=3 small_rows=2048
  sample_args=(--layers 0 --dim 8 --stages 2 --k 16 --iters 3)
  shape=(--heads 4 --kv-heads 2 --head-dim 64 --ctx 64,256 --batch 1,2)
  point=(--heads 4 --kv-heads 2 --head-dim 64 --ctx 256 --batch 1)
  frontier=(--heads 4 --kv-heads 2 --head-dim 64 --ctx 256 --batch 1) frontier_dims=(32)
fi
suite_args=()
[ -n "${GSRQ_SUITE_ARGS:-}" ] && read -r -a suite_args <<<"$GSRQ_SUITE_ARGS"

step nvidia-smi.txt 30 nvidia-smi
[ $tiny = 1 ] || step check-gpu.json 300 "$gsrq" --no-db check-gpu --json
# (${a[@]+"${a[@]}"}: an empty array under set -u on bash before 4.4 too)
step tst_gpu.txt 300 "$root/bin/tst_gpu" ${suite_args[@]+"${suite_args[@]}"}
step tst_decode_gpu.txt 300 "$root/bin/tst_decode_gpu" ${suite_args[@]+"${suite_args[@]}"}
for b in cpu cuda; do
  step "train-sample-$b.json" 120 "$gsrq" --no-db train "$sample" "${sample_args[@]}" --weights grad-log \
    --backend $b --json -q
done
# The 1-BPA layer: FP32 and TF32, then the PyTorch baseline on the same data and weights.
layer=(--rows $rows --features $features --dim $dim --stages $stages --k $k --iters $iters --weights grad-log)
step bench-train-tf32.json 300 "$gsrq" --no-db bench-train "${layer[@]}" --backend cuda --tf32 --json \
  --save-data "$work/layer"
step bench-train-fp32.json 300 "$gsrq" --no-db bench-train "${layer[@]}" --backend cuda --json
# The named baseline of the fused kernel, in the same run: TF32 scores by cuBLAS's GEMM and the argmax.
step bench-train-tf32-gemm.json 300 "$gsrq" --no-db bench-train "${layer[@]}" --backend cuda --tf32 \
  --no-fused-argmax --json
torchlayer=("$root/tools/bench/torch_gskm.py" "$work/layer.x.npy" --layer --weights "$work/layer.w.npy" --dim $dim
  --stages $stages --k $k --iters $iters)
step torch-layer-tf32.json 300 "$python" "${torchlayer[@]}" --tf32
step torch-layer-fp32.json 300 "$python" "${torchlayer[@]}"
rm -f "$work"/layer.*.npy
# Decode: PyTorch's SDPA on the shapes, then every path of ours, verified against the CPU reference
# (against PyTorch's times where it gave them).
step torch-decode.json 300 "$python" "$root/tools/bench/torch_decode.py" "${shape[@]}"
anchor=()
"$python" -c 'import json, sys; assert json.load(open(sys.argv[1]))["points"]' "$out/torch-decode.json" 2>/dev/null &&
  anchor=(--anchor "$out/torch-decode.json")
for bpa in 0.75 0.5 1; do
  step "bench-decode-$bpa.json" 400 "$gsrq" --no-db bench-decode "${shape[@]}" --bpa $bpa ${anchor[@]+"${anchor[@]}"} --json
done
# FlashInfer's single-request decode, a second anchor at batch 1, where its package imports (its first
# call may compile kernels: a step of its own, so that SDPA's times never wait on it).
step flashinfer-decode.json 120 "$python" "$root/tools/bench/torch_decode.py" "${shape[@]}" --library flashinfer
# The speed–quality frontier's shapes (tools/bench/frontier.sh's D and R at K = 256, 0.5, 0.75 and 1
# bits per activation), recorded into OUTDIR/runs.db: `gsrq runs import OUTDIR/runs.db` puts these
# measured points on the Latency page's frontier in place of the modelled ones.
for dim in "${frontier_dims[@]}"; do
  for eighths in 4 6 8; do # BPA × 8: R = BPA · D / 8
    bpa=$(awk -v e=$eighths 'BEGIN {print e / 8}')
    step "frontier-$dim-$bpa.json" 60 "$gsrq" --db "$out/runs.db" bench-decode "${frontier[@]}" --dim "$dim" \
      --stages $((eighths * dim / 64)) --k 256 --json
  done
done
if [ $sanitizer = 1 ]; then
  cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)}
  if [ -n "$cs" ]; then
    step sanitizer-memcheck.txt 300 "$cs" --tool memcheck --error-exitcode 3 "$gsrq" --no-db check-gpu
    step sanitizer-racecheck.txt 300 "$cs" --tool racecheck --error-exitcode 3 "$gsrq" --no-db check-gpu
    # The suites' kernel tests by name: under compute-sanitizer the suites stop at their first test that
    # starts the CLI (a segmentation fault in the test process, not seen outside it).
    train_tests=(cudaMatchesCpu cudaKeepsWorkingBlockByBlock sumsAreExactRepeatableAndChunkFree
                 gskmFollowsTheCpuPathOnTheDevice lloydIterationsStayOnTheDevice)
    decode_tests=(quantizeAndPackMatchesTheCpuEncoder decodePathsMatchTheirReferences decodeOnSyntheticCacheAndReRuns)
    step sanitizer-memcheck-tst_gpu.txt 300 "$cs" --tool memcheck --error-exitcode 3 "$root/bin/tst_gpu" "${train_tests[@]}"
    step sanitizer-memcheck-tst_decode_gpu.txt 300 "$cs" --tool memcheck --error-exitcode 3 "$root/bin/tst_decode_gpu" \
      "${decode_tests[@]}"
    # Racecheck is slow (it did not finish check-gpu in 100 s): the decode kernels' reference tests alone.
    step sanitizer-racecheck-tst_decode_gpu.txt 300 "$cs" --tool racecheck --error-exitcode 3 "$root/bin/tst_decode_gpu" \
      quantizeAndPackMatchesTheCpuEncoder decodePathsMatchTheirReferences
  fi
fi
if [ $profile = 1 ]; then
  ncu=${NCU:-$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)}
  if [ -n "$ncu" ]; then
    # Every kernel of one decode point (32K tokens, batch 1, 1 BPA), each path, with its duration and
    # throughput: where a step's time goes.
    step ncu-decode.csv 200 "$ncu" --clock-control none --csv --metrics \
      gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed \
      "$gsrq" --no-db bench-decode "${point[@]}" --bpa 1 --reps 20 --warmup 1 --no-verify
    # Every kernel of two iterations of one stage of the layer, with its duration and throughput.
    step ncu-train.csv 300 "$ncu" --clock-control none --csv --metrics \
      gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed \
      "$gsrq" --no-db bench-train --rows $rows --features $dim --dim $dim --stages 1 --k $k --iters 2 \
      --weights grad-log --backend cuda --tf32
  fi
fi
# The CPU's NMSE on a smaller case of the same shape (the whole layer would take minutes on the CPU);
# last, since the CPU run is the slowest step.
small=(--rows $small_rows --features $features --dim $dim --stages $stages --k $k --iters $iters --weights grad-log)
step nmse-cpu.json 300 "$gsrq" --no-db bench-train "${small[@]}" --backend cpu --json
step nmse-cuda.json 120 "$gsrq" --no-db bench-train "${small[@]}" --backend cuda --json
step nmse-cuda-tf32.json 120 "$gsrq" --no-db bench-train "${small[@]}" --backend cuda --tf32 --json
# The time outside the passes, call by call (after the NMSE steps, which the summary needs): every
# CUDA API call of two stages of the layer under Nsight Systems (how many, their total and median
# time: the synchronizations, copies and allocations between the kernels), beside the kernels' sums.
nsys=${NSYS:-$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null || true)}
if [ $profile = 1 ] && [ -n "$nsys" ]; then
  step nsys-train.txt 120 "$nsys" profile --stats=true --force-overwrite true -o "$work/nsys-train" \
    "$gsrq" --no-db bench-train --rows $rows --features $features --dim $dim --stages 2 --k $k --iters $iters \
    --weights grad-log --backend cuda --tf32
fi
deadline=0  # the summary runs whatever the budget left
step gpu-summary.json 60 "$python" "$(dirname "$0")/summary.py" "$out"
cat "$out/steps.tsv" >&2
