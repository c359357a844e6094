#!/usr/bin/env bash
# Fuzzes every reader: builds the libFuzzer targets of fuzz/ (the asan preset: clang, ASan + UBSan,
# in build-asan/), then runs each for SECONDS (default 60), two at a time, from its seed corpus, its
# regression inputs and its dictionary. Fails when any target finds anything: a crash, an escaped
# exception, undefined behaviour, a leak, a hang (an input taking over 1 s) or an out-of-memory (RSS
# over 2 GB, or any one allocation over 1 GB: a header claiming a huge tensor must be refused before
# anything is allocated).
#   tools/fuzz.sh [SECONDS] [TARGET...]
#   GSRQ_FUZZ_RUNS=N   stop each target after N executions instead (SECONDS still caps the time)
#   GSRQ_FUZZ_JOBS=N   targets at once (default 2, one per core here)
#   GSRQ_FUZZ_MAX_LEN=BYTES   inputs up to BYTES long from the start (e.g. 1048576: a hang on a
#                      1 MB input is a finding too); by default up to 8 KB (tokenizers 16 KB,
#                      checkpoints 64 KB, run stores 128 KB), short inputs first
# Findings go to build-asan/fuzz-runs/findings/TARGET/, logs to build-asan/fuzz-runs/logs/; the
# corpus a run grows is kept in build-asan/fuzz-runs/corpus/TARGET/ for the next one. Reproduce a
# finding with   build-asan/fuzz/TARGET FILE   and keep it in fuzz/regressions/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
if ! [[ $seconds =~ ^[0-9]+$ ]]; then
  echo "fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2
  exit 2
fi
all=(fuzz_safetensors fuzz_npy fuzz_shard_index fuzz_codebooks fuzz_checkpoint fuzz_tokenizer
     fuzz_codebooks_struct fuzz_shards_struct fuzz_run_store fuzz_gguf)
targets=("${@:-${all[@]}}")
for t in "${targets[@]}"; do
  if [[ ! -f fuzz/$t.cpp ]]; then
    echo "fuzz.sh: no target '$t' (targets: ${all[*]})" >&2
    exit 2
  fi
done

if ! command -v clang++-14 > /dev/null; then
  echo "fuzz.sh: clang++-14 is missing; tools/setup.sh --fuzz installs it" >&2
  exit 2
fi
build=${GSRQ_FUZZ_BUILD:-build-asan}
if [[ $build == build-asan && ! -f build-asan/CMakeCache.txt ]]; then
  cmake --preset asan
fi
cmake --build "$build" -j "${GSRQ_JOBS:-2}" --target "${targets[@]}"
work=$build/fuzz-runs

declare -A dict=([fuzz_safetensors]=safetensors [fuzz_npy]=npy [fuzz_shard_index]=shard_index
                 [fuzz_codebooks]=codebooks [fuzz_shards_struct]=shard_index [fuzz_codebooks_struct]=codebooks)
declare -A maxlen=([fuzz_run_store]=131072 [fuzz_checkpoint]=65536 [fuzz_tokenizer]=16384 [fuzz_gguf]=16384)

run_one() {
  local t=$1
  local corpus=$work/corpus/$t findings=$work/findings/$t
  mkdir -p "$corpus" "$findings" "$work/logs"
  local args=(-max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 -malloc_limit_mb=1024
              -max_len="${maxlen[$t]:-8192}" -use_value_profile=1 -print_final_stats=1
              -artifact_prefix="$findings/")
  [[ -n ${GSRQ_FUZZ_RUNS:-} ]] && args+=(-runs="$GSRQ_FUZZ_RUNS")
  [[ -n ${GSRQ_FUZZ_MAX_LEN:-} ]] && args+=(-max_len="$GSRQ_FUZZ_MAX_LEN" -len_control=0)
  [[ -n ${dict[$t]:-} ]] && args+=(-dict="fuzz/dict/${dict[$t]}.dict")
  local inputs=("$corpus" fuzz/seeds/"$t")
  [[ -d fuzz/regressions/$t ]] && inputs+=(fuzz/regressions/"$t")
  if UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$build/fuzz/$t" "${args[@]}" "${inputs[@]}" \
       >"$work/logs/$t.log" 2>&1; then
    echo "$t: $(grep -m1 -o 'number_of_executed_units: [0-9]*' "$work/logs/$t.log" | cut -d' ' -f2) executions, no finding"
  else
    echo "$t: FINDING, see $work/logs/$t.log and $findings/"
    return 1
  fi
}

status=0
running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if ((running >= ${GSRQ_FUZZ_JOBS:-2})); then
    wait -n || status=1
    running=$((running - 1))
  fi
done
while ((running > 0)); do
  wait -n || status=1
  running=$((running - 1))
done
exit $status
