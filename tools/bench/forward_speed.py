#!/usr/bin/env python3
"""The engine's FP32 forward pass on a GGUF model against PyTorch's, on the same machine, the same
threads and the same token sequences, in one script.

  python3 tools/bench/forward_speed.py --model smollm2 [--seq-len 512] [--sequences 2] [--threads 2]

Both dequantize the GGUF weights to FP32 (bit for bit the same values); the sequences are the devil
text's evaluation part tokenized by the model's tokenizer (tools/hf_ppl.py --save-token-ids). Times
the forward passes only (not loading): PyTorch's `model(ids)` under torch.no_grad() with
torch.set_num_threads(THREADS), and `gsrq ppl --token-ids` (its JSON's fp32_seconds) with
OMP_NUM_THREADS=THREADS; each the best of --reps runs. Prints both and the ratio gsrq / PyTorch
(below 1: the engine is faster), and the two perplexities (they agree to ~1e-5).
Needs torch, transformers, gguf (tools/hf_env.sh) and a built gsrq.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from gsrqtools import hf, models, texts
from gsrqtools.paths import ROOT, default_gsrq


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="a model of tools/python/models.json, or a GGUF file")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--sequences", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gsrq", default=default_gsrq())
    a = ap.parse_args(argv)
    import torch
    path = models.report(models.resolve, a.model)
    if path is None:
        return 2
    torch.set_num_threads(a.threads)
    ns = argparse.Namespace(model=path, device="cpu", model_dtype="f32", seq_len=a.seq_len, no_grad=True)
    loaded = hf.load_model(ns, seq_len=a.seq_len, backward=False)
    model = loaded[0]
    with tempfile.TemporaryDirectory() as tmp:
        ids = os.path.join(tmp, "ids.txt")
        out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "hf_ppl.py"), "--model", path, "--text",
                              texts.prepare("devil")[1], "--seq-len", str(a.seq_len), "--sequences",
                              str(a.sequences), "--save-token-ids", ids, "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
        torch_ppl = json.loads(out.stdout)["results"][0]["perplexity"]
        seqs = [[int(x) for x in line.split()] for line in open(ids)]
        torch_s = []
        with torch.no_grad():
            for _ in range(a.reps):
                t0 = time.perf_counter()
                for q in seqs:
                    model(torch.tensor([q]))
                torch_s.append(time.perf_counter() - t0)
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
        ours, ours_ppl = [], None
        for _ in range(a.reps):
            r = subprocess.run([a.gsrq, "--no-db", "ppl", path, "--token-ids", ids, "--json", "-q"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            if r.returncode != 0:
                print(r.stderr, file=sys.stderr)
                return 1
            j = json.loads(r.stdout)
            ours.append(j["fp32_seconds"])
            ours_ppl = j["results"][0]["perplexity"]
    print(f"{os.path.basename(path)}: {len(seqs)} × {a.seq_len} tokens, {a.threads} threads, best of {a.reps}")
    print(f"  PyTorch {torch.__version__} forward: {min(torch_s):.3f} s   perplexity {torch_ppl:.4f}")
    print(f"  gsrq forward:              {min(ours):.3f} s   perplexity {ours_ppl:.4f}")
    print(f"  ratio gsrq / PyTorch: {min(ours) / min(torch_s):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
