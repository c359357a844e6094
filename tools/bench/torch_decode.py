#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on decode shapes: the outside anchor of gsrq bench-decode.

One decode step per layer: a query of one token per sequence (batch × heads × 1 × head_dim, FP16)
against FP16 keys and values (batch × kv_heads × context × head_dim), GQA by enable_gqa where
this PyTorch has it, else by repeating the KV heads beforehand (the repeat is not timed). Random
data; CUDA events; the L2 flushed before each timed run; the median of --reps after --warmup.
Prints JSON that `gsrq bench-decode --anchor FILE` reads. With --library flashinfer it times
FlashInfer's single-request decode (`single_decode_with_kv_cache`, keys and values token-major) the
same way instead, at batch 1 only, each point's output first held to SDPA's within 1% (FP16
rounding); where the flashinfer package does not import, the JSON says why (`unavailable`) and has
no points. A separate run, as its first call may compile kernels for minutes.

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
    ap.add_argument("--library", choices=("sdpa", "flashinfer"), default="sdpa",
                    help="what is timed: PyTorch's SDPA, or FlashInfer's single-request decode (batch 1)")
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
    flashinfer = None
    if a.library == "flashinfer":
        try:
            import flashinfer
        except Exception as e:  # not installed, or built for another PyTorch or CUDA
            json.dump({"tool": "torch_decode.py", "library": "flashinfer", "device": props.name,
                       "unavailable": f"flashinfer does not import here: {type(e).__name__}: {e}"[:300],
                       "points": []}, sys.stdout, indent=1)
            print()
            return

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
                if flashinfer is not None:  # [heads, head_dim] against [ctx, kv_heads, head_dim]
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

            if flashinfer is None:
                times = timed(step)
                point = {"context": ctx, "batch": b, "seconds": statistics.median(times),
                         "min_seconds": min(times), "max_seconds": max(times)}
            elif b != 1:
                point = {"context": ctx, "batch": b, "skipped": "single-request decode: batch 1 only"}
            else:
                try:
                    ref = step()[0, :, 0, :].float()
                    got = flashinfer.single_decode_with_kv_cache(fi_q, fi_k, fi_v, kv_layout="NHD").float()
                    err = ((got - ref).norm() / ref.norm()).item()
                    if not err < 1e-2:  # FP16 outputs of the same attention: agree to FP16's rounding
                        raise ValueError(f"its output differs from SDPA's by {err:.3g} (relative)")
                    times = timed(lambda: flashinfer.single_decode_with_kv_cache(fi_q, fi_k, fi_v, kv_layout="NHD"))
                    point = {"context": ctx, "batch": b, "seconds": statistics.median(times),
                             "min_seconds": min(times), "max_seconds": max(times), "relative_error_vs_sdpa": err}
                except Exception as e:  # a shape or build it does not take: say so
                    point = {"context": ctx, "batch": b, "skipped": f"{type(e).__name__}: {e}"[:300]}
            points.append(point)
            del q, k, v, fi_q, fi_k, fi_v
            torch.cuda.empty_cache()
    library = a.library if flashinfer is None else f"flashinfer {getattr(flashinfer, '__version__', '(version unknown)')}"
    json.dump({"tool": "torch_decode.py", "library": library, "torch_version": torch.__version__, "device": props.name,
               "native_gqa": native_gqa, "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim,
               "reps": a.reps, "points": points}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
