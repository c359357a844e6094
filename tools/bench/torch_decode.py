#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on decode shapes: the outside anchor of gsrq bench-decode.

One decode step per layer: a query of one token per sequence (batch × heads × 1 × head_dim, FP16)
against FP16 keys and values (batch × kv_heads × context × head_dim), GQA by enable_gqa where
this PyTorch has it, else by repeating the KV heads beforehand (the repeat is not timed). Random
data; CUDA events; the L2 flushed before each timed run; the median of --reps after --warmup.
Prints JSON that `gsrq bench-decode --anchor FILE` reads. Where the flashinfer package imports, its
single-request decode (`single_decode_with_kv_cache`, keys and values token-major) is timed the same
way at batch 1 as a second anchor (`flashinfer_seconds`); where it does not, `flashinfer` says why.

    python3 tools/bench/torch_decode.py --heads 32 --kv-heads 8 --head-dim 128 \\
        --ctx 1024,8192,32768 --batch 1,8 > torch.json
"""
import argparse
import json
import statistics
import sys


def ints(text):
    try:
        v = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of whole numbers")
    if not v or min(v) < 1:
        raise argparse.ArgumentTypeError(f"'{text}': give positive whole numbers")
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--ctx", type=ints, default=ints("1024,8192,32768,65536,131072"))
    ap.add_argument("--batch", type=ints, default=ints("1,8,16,32"))
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", type=int, default=0)
    a = ap.parse_args()
    if a.heads % a.kv_heads:
        print(f"torch_decode.py: --heads {a.heads} is not a multiple of --kv-heads {a.kv_heads}", file=sys.stderr)
        sys.exit(2)
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("torch_decode.py: PyTorch is not installed", file=sys.stderr)
        sys.exit(2)
    if not torch.cuda.is_available():
        print("torch_decode.py: no CUDA device visible to PyTorch", file=sys.stderr)
        sys.exit(2)
    dev = torch.device("cuda", a.device)
    props = torch.cuda.get_device_properties(dev)
    flush = torch.empty(max(2 * getattr(props, "L2_cache_size", 50 << 20), 64 << 20), dtype=torch.uint8, device=dev)
    group = a.heads // a.kv_heads
    try:
        F.scaled_dot_product_attention(torch.zeros(1, 2, 1, 8, device=dev, dtype=torch.float16),
                                       torch.zeros(1, 1, 4, 8, device=dev, dtype=torch.float16),
                                       torch.zeros(1, 1, 4, 8, device=dev, dtype=torch.float16), enable_gqa=True)
        native_gqa = True
    except TypeError:
        native_gqa = False
    try:
        import flashinfer
        fi_note = f"flashinfer {getattr(flashinfer, '__version__', '(version unknown)')}"
    except Exception as e:  # not installed, or built for another PyTorch or CUDA
        flashinfer = None
        fi_note = f"not importable here: {type(e).__name__}: {e}"[:300]

    def timed(fn):
        for _ in range(a.warmup):
            fn()
        times = []
        for i in range(a.reps):
            flush.fill_(i & 0xFF)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e-3)
        return times

    points = []
    gen = torch.Generator(device=dev)
    gen.manual_seed(1)
    for b in a.batch:
        for ctx in a.ctx:
            try:
                q = torch.randn(b, a.heads, 1, a.head_dim, device=dev, dtype=torch.float16, generator=gen)
                k = torch.randn(b, a.kv_heads, ctx, a.head_dim, device=dev, dtype=torch.float16, generator=gen)
                v = torch.randn(b, a.kv_heads, ctx, a.head_dim, device=dev, dtype=torch.float16, generator=gen)
                fi_q = fi_k = fi_v = None
                if flashinfer is not None and b == 1:  # [heads, head_dim] against [ctx, kv_heads, head_dim]
                    fi_q = q[0, :, 0, :].contiguous()
                    fi_k, fi_v = k[0].transpose(0, 1).contiguous(), v[0].transpose(0, 1).contiguous()
                if not native_gqa and group > 1:
                    k = k.repeat_interleave(group, dim=1)
                    v = v.repeat_interleave(group, dim=1)
            except torch.cuda.OutOfMemoryError:
                points.append({"context": ctx, "batch": b, "skipped": "out of device memory"})
                torch.cuda.empty_cache()
                continue

            def step():
                if native_gqa:
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                return F.scaled_dot_product_attention(q, k, v)

            times = timed(step)
            point = {"context": ctx, "batch": b, "seconds": statistics.median(times),
                     "min_seconds": min(times), "max_seconds": max(times)}
            if fi_q is not None:
                try:
                    ref = step()[0, :, 0, :].float()
                    got = flashinfer.single_decode_with_kv_cache(fi_q, fi_k, fi_v, kv_layout="NHD").float()
                    err = ((got - ref).norm() / ref.norm()).item()
                    if not err < 1e-2:  # FP16 outputs of the same attention: agree to FP16's rounding
                        raise ValueError(f"its output differs from SDPA's by {err:.3g} (relative)")
                    fi_times = timed(lambda: flashinfer.single_decode_with_kv_cache(fi_q, fi_k, fi_v, kv_layout="NHD"))
                    point["flashinfer_seconds"] = statistics.median(fi_times)
                    point["flashinfer_relative_error"] = err
                except Exception as e:  # a shape or build it does not take: say so, keep SDPA's point
                    point["flashinfer_skipped"] = f"{type(e).__name__}: {e}"[:300]
            points.append(point)
            del q, k, v, fi_q, fi_k, fi_v
            torch.cuda.empty_cache()
    json.dump({"tool": "torch_decode.py", "torch_version": torch.__version__, "device": props.name,
               "native_gqa": native_gqa, "flashinfer": fi_note, "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim,
               "reps": a.reps, "points": points}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
