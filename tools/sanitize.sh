#!/usr/bin/env bash
# Runs the test suite under sanitizers, in a build of its own (CMakePresets.json):
#   tools/sanitize.sh          AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/): every
#                              CPU suite, the CLI runs the tests start included, and the fuzz
#                              targets' replay of their seeds and regressions
#   tools/sanitize.sh tsan     ThreadSanitizer (build-tsan/): the job runner, the run store and the
#                              GUI suites, where threads meet
# Any report fails the run (halt_on_error). The GPU suites are left out: their CUDA emulator
# switches stacks by hand, which the sanitizers cannot follow; compute-sanitizer checks the kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-asan}
export GSRQ_SOURCE_DIR=$PWD
case "$kind" in
  asan)
    suites='tst_(readers|malformed|clustering|quantizer|compare|cli|train_cli|run_store|model|decode|studio)$|_replay$'
    # Leaks are checked; those of the libraries Qt loads (fontconfig's caches) are theirs.
    export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1
    export LSAN_OPTIONS=suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    ;;
  tsan)
    suites='tst_(run_store|studio)$'
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/sanitizers/tsan.supp
    ;;
  *)
    echo "sanitize.sh: unknown sanitizer '$kind' (asan, tsan)" >&2
    exit 2
    ;;
esac
if [[ ! -f build-$kind/CMakeCache.txt ]]; then
  cmake --preset "$kind"
fi
cmake --build --preset "$kind"
ctest --test-dir "build-$kind" --output-on-failure -j "${GSRQ_JOBS:-2}" -R "$suites" --timeout 900
