#!/usr/bin/env bash
# tools/gpu/run-all.sh end to end against the CUDA emulator build, so a run on a GPU machine cannot
# fail on the script: the emulated gsrq and GPU suites staged as a bundle (GSRQ_BUNDLE), every step
# at --tiny shapes, then every step's exit status and the summary checked.
#   run_all_emulated.sh SOURCE_DIR GSRQ_EMULATED TST_GPU_EMULATED TST_DECODE_GPU_EMULATED WORK_DIR
# The suites only list their test functions here (ctest runs them whole as *_emulated); Nsight
# Compute's and Nsight Systems' steps run their commands through ncu_passthrough.sh and
# nsys_passthrough.sh (no profiler without a GPU); the steps
# that need NVIDIA's tools or PyTorch with CUDA (nvidia-smi, the torch baselines) may fail, and the
# summary must then hold nulls for them; every other step must pass.
set -euo pipefail
[ $# -eq 5 ] || { echo "usage: $0 SOURCE_DIR GSRQ_EMULATED TST_GPU_EMULATED TST_DECODE_GPU_EMULATED WORK_DIR" >&2; exit 2; }
src=$1 work=$5
rm -rf "$work"
bundle=$work/gsrq-gpu
mkdir -p "$bundle/bin" "$bundle/resources/samples" "$bundle/tools/bench"
ln -s "$2" "$bundle/bin/gsrq"
ln -s "$3" "$bundle/bin/tst_gpu"
ln -s "$4" "$bundle/bin/tst_decode_gpu"
ln -s "$src/resources/samples/stories260K-gpl3.safetensors" "$bundle/resources/samples/"
ln -s "$src/tools/bench/torch_gskm.py" "$src/tools/bench/torch_decode.py" "$bundle/tools/bench/"
echo "emulated build" >"$bundle/COMMIT"

GSRQ_BUNDLE=$bundle GSRQ_SUITE_ARGS=-functions PYTHON=python3 NCU=$src/tests/gpu/ncu_passthrough.sh \
  NSYS=$src/tests/gpu/nsys_passthrough.sh \
  bash "$src/tools/gpu/run-all.sh" "$work/out" --tiny --no-sanitizer --budget 1200

python3 - "$work/out" <<'PY'
import csv, json, os, sys
out = sys.argv[1]
optional = {"nvidia-smi.txt", "torch-layer-tf32.json", "torch-layer-fp32.json", "torch-decode.json",
            "flashinfer-decode.json"}
steps = list(csv.DictReader(open(os.path.join(out, "steps.tsv")), delimiter="\t"))
names = [s["step"] for s in steps]
for want in ("tst_gpu.txt", "tst_decode_gpu.txt", "train-sample-cpu.json", "train-sample-cuda.json",
             "bench-train-tf32.json", "bench-train-fp32.json", "bench-train-tf32-gemm.json", "bench-decode-0.75.json", "bench-decode-0.5.json",
             "bench-decode-1.json", "flashinfer-decode.json",
             "frontier-32-0.5.json", "frontier-32-0.75.json", "frontier-32-1.json",
             "ncu-decode.csv", "ncu-train.csv", "nsys-train.txt", "nmse-cpu.json", "nmse-cuda.json", "nmse-cuda-tf32.json",
             "gpu-summary.json"):
    assert want in names, f"run-all.sh did not run {want}: {names}"
bad = [(s["step"], s["exit"]) for s in steps if s["step"] not in optional and s["exit"] != "0"]
assert not bad, f"steps failed: {bad} (see their .err files in {out})"
summary = json.load(open(os.path.join(out, "gpu-summary.json")))
assert "emulator" in (summary["device"] or "").lower(), summary["device"]
train = summary["train"]
for key in ("layer_seconds", "fp32_layer_seconds", "nmse_layer", "nmse_cuda", "nmse_cuda_tf32", "nmse_cpu",
            "sample_nmse_cuda", "sample_nmse_cpu", "device_pass_seconds", "host_seconds", "tf32_gemm_layer_seconds",
            "fused_speedup_vs_gemm", "nmse_tf32_gemm_layer"):
    assert isinstance(train[key], float), f"summary train.{key} is {train[key]!r}"
# The TF32 layer ran the fused kernel (the emulator is a compute capability 9.0 device).
assert train["fused_passes"] and train["fused_passes"] > 0, train
# The backends train the same seeded layer: NMSE within the 0.5% they must agree to.
assert abs(train["sample_nmse_cuda"] - train["sample_nmse_cpu"]) <= 5e-3 * train["sample_nmse_cpu"], train
assert abs(train["nmse_cuda"] - train["nmse_cpu"]) <= 5e-3 * train["nmse_cpu"], train
# Where PyTorch gave nothing, its figures are null, not made up.
torch_ok = {s["step"]: s["exit"] == "0" for s in steps}
if not torch_ok["torch-layer-tf32.json"]:
    assert train["torch_layer_seconds"] is None and train["speedup_vs_torch"] is None, train
decode = summary["decode"]
assert {p["bpa"] for p in decode} == {0.5, 0.75, 1.0}, decode
assert len(decode) == 2 * 2 * 3, decode  # 2 contexts × 2 batches × 3 BPA
for p in decode:
    assert p["verified"] and p["fp16_us"] and p["lookup_us"] and p["paper_us"], p
    if not torch_ok["torch-decode.json"]:
        assert p["torch_sdpa_us"] is None, p
    if not torch_ok["flashinfer-decode.json"]:
        assert p["flashinfer_us"] is None, p
# The frontier's shapes at --tiny (D = 32 of head_dim 64; R = 2, 3, 4 for 0.5, 0.75, 1 BPA), each
# verified, and recorded into OUTDIR/runs.db, which `gsrq runs import` takes.
frontier = summary["frontier"]
assert [(p["dim"], p["stages"], p["bpa"], p["batch"]) for p in frontier] == \
    [(32, 2, 0.5, 1), (32, 3, 0.75, 1), (32, 4, 1.0, 1)], frontier
for p in frontier:
    assert p["verified"] and p["fp16_us"] and p["lookup_us"] and p["paper_us"], p
assert summary["runs_db"] == "runs.db", summary["runs_db"]
PY
db=$work/out/runs.db
[ "$("$2" --db "$db" runs list | grep -c bench-decode)" -eq 3 ] || { "$2" --db "$db" runs list >&2; echo "runs.db: not the frontier's 3 runs" >&2; exit 1; }
"$2" --db "$work/imported.db" runs import "$db" >/dev/null
[ "$("$2" --db "$work/imported.db" runs list | grep -c bench-decode)" -eq 3 ] || { echo "runs import of runs.db took not 3 runs" >&2; exit 1; }
python3 - "$work/out" <<'PY'
import csv, os, sys
steps = list(csv.DictReader(open(os.path.join(sys.argv[1], "steps.tsv")), delimiter="\t"))
print(f"run-all.sh --tiny on the emulator: {len(steps)} steps, all required ones passed; summary checked")
PY
