#!/usr/bin/env python3
"""A straightforward PyTorch KM / GSKM iteration, the baseline for gsrq's CUDA backend.

One iteration is what gsrq's is: scores X·Cᵀ (matmul), argmax of 2·x·c − ‖c‖², per-cluster sums
with index_add_, and the centroid update (KM: the mean; GSKM: the mean direction of x/‖x‖ as the
shape and the mean projection on it as the gain). FP32 throughout, on one CUDA device, timed with
CUDA events after a warm-up; prints JSON.

    python3 tools/bench/torch_gskm.py data.npy --k 256 --iters 20 [--method gskm] [--device 0]

With --layer, a whole GSRQ layer as `gsrq bench-train` trains it, batched the way PyTorch does it
best: every subspace of a stage at once (bmm over the S = F/D subspaces), R residual stages, at most
--iters iterations per stage (a stage ends when no label of any subspace changes; a converged
subspace stays fixed, so this is each subspace's own stopping point), rows weighted by --weights.
Timed whole with CUDA events after a one-stage warm-up; --tf32 allows TF32 for the products.

    python3 tools/bench/torch_gskm.py data.x.npy --layer --weights data.w.npy --dim 128 --stages 16 \
        --k 256 --iters 40 [--tf32]
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
    ap.add_argument("--layer", action="store_true", help="train a whole layer (see above)")
    ap.add_argument("--weights", help="--layer: per-row weights, a .npy of N (or N x 1) floats")
    ap.add_argument("--dim", type=int, default=128, help="--layer: subspace width D")
    ap.add_argument("--stages", type=int, default=16, help="--layer: residual stages R")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 for the products")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("torch_gskm.py: PyTorch is not installed")
    if not torch.cuda.is_available():
        print("torch_gskm.py: no CUDA device visible to PyTorch", file=sys.stderr)
        sys.exit(2)
    torch.backends.cuda.matmul.allow_tf32 = a.tf32  # FP32 unless asked, as gsrq's default
    dev = torch.device("cuda", a.device)
    x_np = np.load(a.data)
    if x_np.ndim != 2:
        sys.exit(f"torch_gskm.py: {a.data}: expected a 2-D array, got shape {x_np.shape}")
    if a.layer:
        return layer(a, torch, dev, x_np)
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


def layer(a, torch, dev, x_np):
    n, f = x_np.shape
    if f % a.dim:
        sys.exit(f"torch_gskm.py: --dim {a.dim} does not divide the {f} features")
    s_count, d, k = f // a.dim, a.dim, a.k
    X = torch.from_numpy(np.ascontiguousarray(x_np, dtype=np.float32)).to(dev)
    if a.weights:
        w = torch.from_numpy(np.ascontiguousarray(np.load(a.weights), dtype=np.float32).reshape(-1)).to(dev)
        if w.numel() != n:
            sys.exit(f"torch_gskm.py: {a.weights}: {w.numel()} weights for {n} rows")
    else:
        w = torch.ones(n, device=dev)
    offsets = (torch.arange(s_count, device=dev) * k)[:, None]  # subspace s's clusters at s·K

    def stage(R, gen):
        """One residual stage over every subspace: R is S × N × D; returns the codewords' rows."""
        rows = torch.randperm(n, generator=gen)[:k].to(dev)
        C = R[:, rows, :].clone()  # S × K × D: each subspace starts from the same sampled rows
        norms = R.norm(dim=2).clamp_min(1e-8)  # S × N
        Y = R / norms[..., None]
        wy = (w[None, :, None] * Y).reshape(s_count * n, d)
        wx = (w[None, :, None] * R).reshape(s_count * n, d)
        wflat = w.repeat(s_count)

        def sums(labels):
            idx = (labels + offsets).reshape(-1)
            W = torch.zeros(s_count * k, device=dev).index_add_(0, idx, wflat).view(s_count, k)
            Sx = torch.zeros(s_count * k, d, device=dev).index_add_(0, idx, wx).view(s_count, k, d)
            Sy = torch.zeros(s_count * k, d, device=dev).index_add_(0, idx, wy).view(s_count, k, d)
            return W, Sx, Sy

        if a.method == "gskm":  # Algorithm 1's start: shapes from the rows, members by direction
            S0 = C / C.norm(dim=2, keepdim=True).clamp_min(1e-12)
            labels = torch.bmm(R, S0.transpose(1, 2)).argmax(dim=2)
            W, Sx, _ = sums(labels)
            gain = ((Sx * S0).sum(dim=2) / W.clamp_min(1e-30)).clamp_min(0)
            C = torch.where(W[..., None] > 0, gain[..., None] * S0, C)
        labels = torch.full((s_count, n), -1, dtype=torch.long, device=dev)
        for _ in range(a.iters):
            scores = torch.baddbmm((C * C).sum(dim=2)[:, None, :], R, C.transpose(1, 2), beta=-1.0, alpha=2.0)
            new = scores.argmax(dim=2)
            changed = bool((new != labels).any())
            labels = new
            W, Sx, Sy = sums(labels)
            live = W[..., None] > 0
            if a.method == "km":
                C = torch.where(live, Sx / W.clamp_min(1e-30)[..., None], C)
            else:
                shape = Sy / Sy.norm(dim=2, keepdim=True).clamp_min(1e-12)
                gain = ((Sx * shape).sum(dim=2) / W.clamp_min(1e-30)).clamp_min(0)
                C = torch.where(live, gain[..., None] * shape, C)
            if not changed:
                break
        return torch.gather(C, 1, labels[..., None].expand(-1, -1, d))  # S × N × D

    def train(stages, gen):
        R = X.view(n, s_count, d).permute(1, 0, 2).contiguous()
        for _ in range(stages):
            R -= stage(R, gen)
        return R

    train(1, torch.Generator().manual_seed(a.seed + 1))  # warm-up: kernels chosen, memory pooled
    torch.cuda.synchronize(dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    R = train(a.stages, torch.Generator().manual_seed(a.seed))
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    err = float((R.double() ** 2).sum())
    total = float((X.double() ** 2).sum())
    print(json.dumps({
        "tool": "torch_gskm.py",
        "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name(dev),
        "mode": "layer",
        "method": a.method,
        "tf32": a.tf32,
        "rows": n,
        "features": f,
        "dim": d,
        "stages": a.stages,
        "k": k,
        "max_iterations": a.iters,
        "weighted": bool(a.weights),
        "layer_seconds": seconds,
        "nmse": err / total if total > 0 else 0.0,
    }, indent=2))


if __name__ == "__main__":
    main()
