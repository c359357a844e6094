#!/usr/bin/env bash
# Stands in for Nsight Systems in run_all_emulated.sh: drops `profile` and the options run-all.sh gives
# nsys and runs the profiled command as it is, so the test proves that command line (nsys's CUDA
# trace needs a GPU).
[ "${1:-}" = profile ] || { echo "nsys_passthrough.sh: run-all.sh did not ask nsys to profile: ${1:-}" >&2; exit 2; }
shift
while [ $# -gt 0 ]; do
  case $1 in
    --stats=*) shift ;;
    --force-overwrite | -o) shift 2 ;;
    -*) echo "nsys_passthrough.sh: run-all.sh gave nsys an option this stand-in does not know: $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
exec "$@"
