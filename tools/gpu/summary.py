#!/usr/bin/env python3
"""gpu-summary.json from the files tools/gpu/run-all.sh wrote into OUTDIR (printed on stdout).

Every figure is read from a tool's own output; one that a step did not produce is null."""
import datetime
import json
import os
import sys


def load(out, name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def us(paths, path):
    """A decode point's time per layer in µs, of {path name: point}; None where it has none."""
    s = get(paths, path, "seconds_per_layer")
    return s * 1e6 if s else None


def sample_nmse(doc):
    """The mean NMSE over the sample's tensors of one gsrq train --json."""
    tensors = get(doc, "tensors") or []
    v = [get(t, "train", "nmse") for t in tensors]
    v = [x for x in v if isinstance(x, (int, float))]
    return sum(v) / len(v) if v else None


def main():
    out = sys.argv[1]
    check = load(out, "check-gpu.json")
    tf32 = load(out, "bench-train-tf32.json")
    fp32 = load(out, "bench-train-fp32.json")
    tf32_gemm = load(out, "bench-train-tf32-gemm.json")
    torch_tf32 = load(out, "torch-layer-tf32.json")
    torch_fp32 = load(out, "torch-layer-fp32.json")
    commit = "unknown"
    if os.path.exists(os.path.join(out, "commit.txt")):
        commit = " ".join(open(os.path.join(out, "commit.txt")).read().split())
    # The run as the benchmark counts it: TF32 (allowed for both), each against PyTorch in the same mode.
    ours, theirs = (tf32, torch_tf32) if get(tf32, "layer_seconds") else (fp32, torch_fp32)
    layer_s = get(ours, "layer_seconds")
    torch_s = get(theirs, "layer_seconds")
    train = {
        "case": None if ours is None else {k: ours.get(k) for k in
                                           ("rows", "features", "dim", "stages", "k", "iters", "method", "weights",
                                            "device")},
        "layer_seconds": layer_s,
        "torch_layer_seconds": torch_s,
        "speedup_vs_torch": torch_s / layer_s if layer_s and torch_s else None,
        "fp32_layer_seconds": get(fp32, "layer_seconds"),
        # TF32 with the fused score-and-argmax kernel against cuBLAS's GEMM and the argmax (same run).
        "fused_passes": get(tf32, "fused_passes"),
        "tf32_gemm_layer_seconds": get(tf32_gemm, "layer_seconds"),
        "fused_speedup_vs_gemm": (get(tf32_gemm, "layer_seconds") / get(tf32, "layer_seconds")
                                  if get(tf32, "layer_seconds") and get(tf32_gemm, "layer_seconds") else None),
        "nmse_tf32_gemm_layer": get(tf32_gemm, "nmse"),
        "torch_fp32_layer_seconds": get(torch_fp32, "layer_seconds"),
        "assign_fraction_of_peak": get(ours, "fraction_of_peak"),
        "device_pass_seconds": get(ours, "device_pass_seconds"),
        "host_seconds": get(ours, "host_seconds"),
        "host_seconds_by_call": get(ours, "host_seconds_by_call"),
        "seconds_per_iteration": get(ours, "seconds_per_iteration"),
        "passes_timed": get(ours, "passes_timed"),
        "most_clusterings_per_pass": get(ours, "most_clusterings_per_pass"),
        "nmse_layer": get(ours, "nmse"),
        "nmse_torch_layer": get(theirs, "nmse"),
        "nmse_cuda": get(load(out, "nmse-cuda.json"), "nmse"),
        "nmse_cuda_tf32": get(load(out, "nmse-cuda-tf32.json"), "nmse"),
        "nmse_cpu": get(load(out, "nmse-cpu.json"), "nmse"),
        "nmse_case": (None if get(load(out, "nmse-cpu.json"), "rows") is None else
                      f"{get(load(out, 'nmse-cpu.json'), 'rows')} rows of the same shape and settings"
                      " (the CPU on the whole layer takes minutes)"),
        "sample_nmse_cuda": sample_nmse(load(out, "train-sample-cuda.json")),
        "sample_nmse_cpu": sample_nmse(load(out, "train-sample-cpu.json")),
    }
    decode = []
    # FlashInfer's single-request decode, the second anchor (torch_decode.py --library flashinfer).
    flashinfer_doc = load(out, "flashinfer-decode.json")
    flashinfer = {(p["context"], p["batch"]): p["seconds"]
                  for p in (flashinfer_doc or {}).get("points", []) if p.get("seconds")}
    for bpa_name in ("0.5", "0.75", "1"):
        doc = load(out, f"bench-decode-{bpa_name}.json")
        if doc is None:
            continue
        copy = get(doc, "summary", "copy_bytes_per_second")
        rows = {}
        for p in doc.get("points", []):
            key = (p["context"], p["batch"])
            rows.setdefault(key, {})[p["path"]] = p
        for (ctx, batch), paths in sorted(rows.items()):
            fp16 = paths.get("fp16", {})
            torch_s = next((p.get("torch_sdpa_seconds") for p in paths.values() if p.get("torch_sdpa_seconds")), None)
            verified = all(p.get("verified", False) for p in paths.values() if "skipped" not in p)
            decode.append({
                "ctx": ctx, "batch": batch, "bpa": float(get(doc, "settings", "bpa") or bpa_name),
                "fp16_us": us(paths, "fp16"),
                "fp16_latency_model_us": (fp16["latency_model_seconds"] * 1e6
                                          if fp16.get("latency_model_seconds") else None),
                "lookup_latency_model_us": (get(paths, "lookup", "latency_model_seconds") * 1e6
                                            if get(paths, "lookup", "latency_model_seconds") else None),
                "paper_latency_model_us": (get(paths, "paper", "latency_model_seconds") * 1e6
                                           if get(paths, "paper", "latency_model_seconds") else None),
                "fp16_splits": fp16.get("splits"), "lookup_splits": get(paths, "lookup", "splits"),
                "fp16_bandwidth_fraction": (fp16.get("bytes_per_second") / copy
                                            if fp16.get("bytes_per_second") and copy else None),
                "paper_us": us(paths, "paper"), "lookup_us": us(paths, "lookup"),
                "torch_sdpa_us": torch_s * 1e6 if torch_s else None,
                "flashinfer_us": flashinfer[(ctx, batch)] * 1e6 if (ctx, batch) in flashinfer else None,
                "verified": verified,
            })
    # The frontier's shapes (frontier-D-BPA.json), one entry per D, BPA and batch.
    frontier = []
    names = sorted(n for n in os.listdir(out) if n.startswith("frontier-") and n.endswith(".json"))
    for name in names:
        doc = load(out, name)
        if doc is None:
            continue
        settings = doc.get("settings", {})
        by_batch = {}
        for p in doc.get("points", []):
            by_batch.setdefault(p["batch"], {})[p["path"]] = p
        for batch, paths in sorted(by_batch.items()):
            frontier.append({
                "dim": settings.get("dim"), "stages": settings.get("stages"), "k": settings.get("k"),
                "bpa": settings.get("bpa"), "ctx": next(iter(paths.values()))["context"], "batch": batch,
                "fp16_us": us(paths, "fp16"), "paper_us": us(paths, "paper"), "lookup_us": us(paths, "lookup"),
                "verified": all(p.get("verified", False) for p in paths.values() if "skipped" not in p),
            })
    summary = {
        "device": get(check, "device", "name") or get(ours, "device"),
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "check_gpu": None if check is None else get(check, "verdict"),
        "train": train,
        "decode": decode,
        "frontier": frontier,
        "flashinfer": (None if flashinfer_doc is None else
                       flashinfer_doc.get("unavailable") or flashinfer_doc.get("library")),
        "runs_db": "runs.db" if os.path.exists(os.path.join(out, "runs.db")) else None,
        "copy_bytes_per_second": get(load(out, "bench-decode-0.75.json"), "summary", "copy_bytes_per_second"),
        "append_seconds": get(load(out, "bench-decode-0.75.json"), "summary", "append_seconds"),
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
