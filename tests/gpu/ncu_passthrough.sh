#!/usr/bin/env bash
# Stands in for Nsight Compute in run_all_emulated.sh: drops the options run-all.sh gives ncu and
# runs the profiled command as it is, so the test proves that command line (ncu itself needs a GPU).
while [ $# -gt 0 ]; do
  case $1 in
    --csv) shift ;;
    --clock-control | --metrics) shift 2 ;;
    --*) echo "ncu_passthrough.sh: run-all.sh gave ncu an option this stand-in does not know: $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
exec "$@"
