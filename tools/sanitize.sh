#!/usr/bin/env bash
# Runs the test suite under sanitizers, in a build of its own (CMakePresets.json):
#   tools/sanitize.sh          AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/, clang):
#                              the engine's and the CLI's suites, the gsrq processes they start
#                              included, and the fuzz targets' replay of their seeds and regressions
#                              (the desktop app's suite is left to tsan, and the statistical suites
#                              tst_quantizer, tst_model and tst_long_context, millions of float
#                              operations each, to `tools/sanitize.sh asan-all`: together they would take the test
#                              command past its time budget)
#   tools/sanitize.sh asan-all  the same with tst_quantizer, tst_model and tst_long_context
#   tools/sanitize.sh tsan     ThreadSanitizer (build-tsan/): the job runner, the run store and the
#                              GUI suites, where threads meet
# Any report fails the run (halt_on_error). The GPU suites are left out: their CUDA emulator
# switches stacks by hand, which the sanitizers cannot follow; compute-sanitizer checks the kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-asan}
preset=$kind
case "$kind" in
  asan | asan-all)
    preset=asan
    suites='tst_(readers|malformed|clustering|compare|cli|train_cli|run_store|decode|cpu_decode|plan|baselines|statistics|quant_products)$|_replay$'
    # Leaks are checked; those of the libraries Qt loads (fontconfig's caches) are theirs.
    export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1
    export LSAN_OPTIONS=suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    if [[ $kind == asan-all ]]; then
      suites="$suites|tst_(quantizer|model|long_context)\$"
      export QTEST_FUNCTION_TIMEOUT=1800000 # a statistical test function runs minutes under ASan
    fi
    ;;
  tsan)
    suites='tst_(run_store|studio)$'
    # GCC's ThreadSanitizer (its runtime follows QProcess's vfork-style clone, which clang 14's
    # CHECK-fails on) with LLVM's OpenMP runtime in place of libgomp (the tsan preset links it; it
    # speaks libgomp's ABI): its Archer tool tells ThreadSanitizer where each parallel region forks
    # and joins. With libgomp, uninstrumented, every region's partial sums read as a false race.
    archer=/usr/lib/llvm-14/lib/libarcher.so
    if [[ ! -f $archer || ! -f /usr/lib/llvm-14/lib/libomp.so ]]; then
      echo "sanitize.sh: LLVM's OpenMP runtime and $archer are needed; tools/setup.sh --fuzz installs them" >&2
      exit 2
    fi
    export OMP_TOOL_LIBRARIES=$archer
    export ARCHER_OPTIONS=verbose=0 # verbose=1 would print to the CLI children's stdout (their JSON)
    # die_after_fork=0: a test process with threads starts children (QProcess), which is legal;
    # ignore_noninstrumented_modules=1: what libomp and Qt do inside themselves is theirs (Archer asks it).
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:die_after_fork=0:ignore_noninstrumented_modules=1:suppressions=$PWD/tests/sanitizers/tsan.supp
    export QTEST_FUNCTION_TIMEOUT=1800000 # a training runs several times slower under ThreadSanitizer
    ;;
  *)
    echo "sanitize.sh: unknown sanitizer '$kind' (asan, asan-all, tsan)" >&2
    exit 2
    ;;
esac
if [[ ! -f build-$preset/CMakeCache.txt ]]; then
  cmake --preset "$preset"
fi
cmake --build --preset "$preset"
if [[ $kind == asan-all ]]; then
  cmake --build "build-$preset" -j "${GSRQ_JOBS:-2}" --target tst_quantizer tst_model tst_long_context
fi
ctest --test-dir "build-$preset" --output-on-failure -j "${GSRQ_JOBS:-2}" -R "$suites"
