#!/usr/bin/env python3
"""A straightforward PyTorch KM / GSKM iteration, the baseline for gsrq's CUDA backend.

One iteration is what gsrq's is: scores X·Cᵀ (matmul), argmax of 2·x·c − ‖c‖², per-cluster sums
with index_add_, and the centroid update (KM: the mean; GSKM: the mean direction of x/‖x‖ as the
shape and the mean projection on it as the gain). FP32 throughout, on one CUDA device, timed with
CUDA events after a warm-up; prints JSON.

    python3 tools/bench/torch_gskm.py data.npy --k 256 --iters 20 [--method gskm] [--device 0]
"""
import argparse
import json
import statistics
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="2-D float32 .npy (rows × D), e.g. from `gsrq synth`")
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--method", choices=("km", "gskm"), default="gskm")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("torch_gskm.py: PyTorch is not installed")
    if not torch.cuda.is_available():
        print("torch_gskm.py: no CUDA device visible to PyTorch", file=sys.stderr)
        sys.exit(2)
    torch.backends.cuda.matmul.allow_tf32 = False  # FP32, as gsrq's default
    dev = torch.device("cuda", a.device)
    x_np = np.load(a.data)
    if x_np.ndim != 2:
        sys.exit(f"torch_gskm.py: {a.data}: expected a 2-D array, got shape {x_np.shape}")
    X = torch.from_numpy(np.ascontiguousarray(x_np, dtype=np.float32)).to(dev)
    n, d = X.shape
    g = torch.Generator().manual_seed(a.seed)
    C = X[torch.randperm(n, generator=g)[: a.k].to(dev)].clone()
    inv = 1.0 / (X.norm(dim=1) + 1e-8)
    Y = X * inv[:, None]
    if a.method == "gskm":
        # Algorithm 1's start, as gsrq's: shapes = the rows' directions, members by direction,
        # gains = their mean projection.
        S = C / C.norm(dim=1, keepdim=True).clamp_min(1e-12)
        labels = (X @ S.T).argmax(dim=1)
        W = torch.zeros(a.k, device=dev).index_add_(0, labels, torch.ones(n, device=dev))
        P = torch.zeros(a.k, device=dev).index_add_(0, labels, (X * S[labels]).sum(dim=1))
        gain = torch.where(W > 0, (P / W.clamp_min(1)).clamp_min(0), C.norm(dim=1))
        C = gain[:, None] * S

    def iteration(C):
        S = X @ C.T
        scores = 2.0 * S - (C * C).sum(dim=1)[None, :]
        labels = scores.argmax(dim=1)
        W = torch.zeros(a.k, device=dev).index_add_(0, labels, torch.ones(n, device=dev))
        Sx = torch.zeros(a.k, d, device=dev).index_add_(0, labels, X)
        live = W > 0
        if a.method == "km":
            newC = torch.where(live[:, None], Sx / W.clamp_min(1)[:, None], C)
        else:
            Sy = torch.zeros(a.k, d, device=dev).index_add_(0, labels, Y)
            shape = Sy / Sy.norm(dim=1, keepdim=True).clamp_min(1e-12)
            gain = ((Sx * shape).sum(dim=1) / W.clamp_min(1)).clamp_min(0)
            newC = torch.where(live[:, None], gain[:, None] * shape, C)
        return newC

    for _ in range(3):  # warm-up: kernels chosen, memory pooled
        C = iteration(C)
    torch.cuda.synchronize(dev)
    times = []
    for _ in range(a.iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        C = iteration(C)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    per = statistics.median(times)
    print(json.dumps({
        "tool": "torch_gskm.py",
        "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name(dev),
        "method": a.method,
        "rows": n,
        "dim": d,
        "k": a.k,
        "iterations": a.iters,
        "seconds_per_iteration": per,
        "seconds_min": min(times),
        "seconds_max": max(times),
        "gemm_flops_achieved": 2.0 * n * d * a.k / per,
    }, indent=2))


if __name__ == "__main__":
    main()
