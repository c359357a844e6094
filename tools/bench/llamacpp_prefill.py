#!/usr/bin/env python3
"""Prefill tokens per second of llama.cpp and of the engine (`gsrq generate`) on the same GGUF file,
threads and text, in one script, with each process's peak resident memory beside the file's size.

  python3 tools/bench/llamacpp_prefill.py --model smollm2 --tokens 512,4096 [--threads 2]
        [--weights blocks,blocks-q8] [--reps 3] [--python ~/.cache/gsrq-studio/llamacpp/bin/python3]

For each prefill length N: llama.cpp (llama-cpp-python 0.3.36, built as tools/bench/llamacpp_decode.py
says) evaluates the evaluation text's first N tokens into a fresh F16 cache (n_batch 512, flash
attention on), timed; then `gsrq generate --paths fp16 --prefill N --context N --tokens 1` with each
--weights as its --prefill-weights (the forward pass over the N tokens in chunks of 512, logits of
the last token only; its JSON's prefill_seconds). Prints tokens per second of each, the ratio
gsrq / llama.cpp (above 1: the engine is faster), and each process's peak resident memory (wait4's
rusage: the model loaded, the caches and the prefill's buffers) beside the engine's memory ceiling:
the GGUF file, plus the caches it keeps at N tokens (the forward pass's keys and values in FP32 and
the decode cache's in FP16, from `gsrq info`'s layers, KV heads and head size), plus 20%.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from gsrqtools import models, texts
from gsrqtools.paths import default_gsrq, llamacpp_python

CHILD = r"""
import json, resource, sys, time
import llama_cpp
path, n, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
llm = llama_cpp.Llama(model_path=path, n_ctx=n + 8, n_threads=threads, n_threads_batch=threads, n_batch=512,
                      n_ubatch=512, flash_attn=True, verbose=False)
ids = llm.tokenize(open(sys.argv[4], encoding="utf-8").read().encode(), add_bos=False, special=False)
while len(ids) < n:
    ids = ids + ids
t0 = time.perf_counter()
llm.eval(ids[:n])
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def run(cmd, env=None):
    """(exit code, stdout, stderr, peak resident set in KiB) of one child process (wait4's rusage)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return p.returncode, out.read(), err.read(), usage.ru_maxrss


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="a model of tools/python/models.json, or a GGUF file")
    ap.add_argument("--tokens", default="512,4096", help="prefill lengths")
    ap.add_argument("--weights", default="blocks,blocks-q8", help="gsrq generate's --prefill-weights, each a run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1, help="runs of each side, the best kept (a shared machine varies)")
    ap.add_argument("--python", default=llamacpp_python())
    ap.add_argument("--gsrq", default=default_gsrq())
    a = ap.parse_args(argv)
    path = models.report(models.resolve, a.model)
    if path is None:
        return 2
    if not os.path.isfile(a.python):
        print(f"llamacpp_prefill.py: no llama-cpp-python environment at {a.python} "
              "(tools/bench/llamacpp_decode.py --help says how to make it)", file=sys.stderr)
        return 2
    try:
        lengths = sorted(int(x) for x in a.tokens.split(","))
    except ValueError:
        print(f"llamacpp_prefill.py: --tokens {a.tokens}: a list of integers", file=sys.stderr)
        return 2
    weights = [w for w in a.weights.split(",") if w]
    if a.reps < 1:
        print(f"llamacpp_prefill.py: --reps {a.reps}: at least 1", file=sys.stderr)
        return 2
    if any(n < 2 for n in lengths) or any(w not in ("blocks", "blocks-q8", "fp32") for w in weights):
        print("llamacpp_prefill.py: --tokens at least 2; --weights takes blocks, blocks-q8 and fp32", file=sys.stderr)
        return 2
    text = texts.prepare("devil")[1]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    code, out, err, _ = run([a.gsrq, "info", path, "--json"])
    if code != 0:
        print(err[-2000:], file=sys.stderr)
        return 1
    info = json.loads(out)
    kv = info["layers"] * info["kv_heads"] * info["head_dim"]  # values per token, keys or values

    def ceiling(n):
        """The file plus the caches at n tokens (FP32 forward cache, FP16 decode cache of n + 2), plus 20%."""
        return 1.2 * (info["bytes"] + n * kv * 2 * 4 + (n + 2) * kv * 2 * 2)

    print(f"{os.path.basename(path)} ({os.path.getsize(path) / 2**20:.0f} MiB): prefill tokens per second, "
          f"{a.threads} threads, best of {a.reps}; peak resident memory of each run")
    def best(cmd, env, rate):
        """The best of --reps runs: (tokens per second, peak resident KiB), or None after a failure."""
        runs = []
        for _ in range(a.reps):
            code, out, err, peak = run(cmd, env)
            if code != 0:
                print(err[-2000:], file=sys.stderr)
                return None
            runs.append((rate(out), peak))
        return max(runs)

    for n in lengths:
        base = best([a.python, "-c", CHILD, path, str(n), str(a.threads), text], None,
                    lambda out: n / json.loads(out.strip().splitlines()[-1])["seconds"])
        if base is None:
            return 1
        line = f"  {n:>6} tokens: llama.cpp {base[0]:7.1f}/s ({base[1] / 2**20:.2f} GiB)"
        for w in weights:
            got = best([a.gsrq, "--no-db", "generate", path, "--text", text, "--paths", "fp16", "--prefill", str(n),
                        "--context", str(n), "--tokens", "1", "--threads", str(a.threads), "--prefill-weights", w, "--json",
                        "-q"], env, lambda out: json.loads(out)["prefill_tokens_per_second"])
            if got is None:
                return 1
            peak = got[1] * 1024
            line += (f"; gsrq {w} {got[0]:7.1f}/s, ×{got[0] / base[0]:.2f} ({got[1] / 2**20:.2f} GiB, "
                     f"{'within' if peak <= ceiling(n) else 'over'} the ceiling {ceiling(n) / 2**30:.2f} GiB)")
        print(line, flush=True)
    print("×: gsrq's tokens per second over llama.cpp's (above 1: the engine is faster); in brackets each "
          "process's peak resident set")
    return 0


if __name__ == "__main__":
    sys.exit(main())
