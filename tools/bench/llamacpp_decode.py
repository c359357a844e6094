#!/usr/bin/env python3
"""llama.cpp's token-by-token decode beside `gsrq generate`, on the same GGUF file, threads and
contexts, in one script.

  python3 tools/bench/llamacpp_decode.py --model smollm2 -c CODEBOOKS --context 1024,4096,8000
        [--tokens 8] [--threads 2] [--python ~/.cache/gsrq-studio/llamacpp/bin/python3]

For each context: llama.cpp (llama-cpp-python 0.3.36, built from its PyPI sources for this CPU) with
its KV cache in F16 and in q4_0 (keys and values; flash attention on, which a quantized value cache
needs), the context filled by prefilling the evaluation text's tokens (real positions), then --tokens
single-token evaluations timed (median); and `gsrq generate` with the same contexts (FP16 and the
compressed lookup path, its context a 256-token prefill repeated; see docs/real-models.md). Prints
milliseconds per token and tokens per second of each. llama.cpp computes with the weights in their
quantized blocks; the engine from dequantized FP32 weights.

llama-cpp-python is not in the pinned PyTorch environments; make its own once (about 10 minutes
of compiling on two cores):
  python3 -m venv ~/.cache/gsrq-studio/llamacpp
  CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF" ~/.cache/gsrq-studio/llamacpp/bin/pip install llama-cpp-python==0.3.36
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

# Runs inside the llama-cpp-python environment: prints {"prefill_s", "ms": [...]} for one setting.
CHILD = r"""
import json, sys, time
import llama_cpp
path, ctx, steps, threads, kv = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
kind = {"f16": llama_cpp.GGML_TYPE_F16, "q4_0": llama_cpp.GGML_TYPE_Q4_0}[kv]
llm = llama_cpp.Llama(model_path=path, n_ctx=ctx + steps + 8, n_threads=threads, n_threads_batch=threads,
                      n_batch=512, type_k=kind, type_v=kind, flash_attn=True, verbose=False)
text = open(sys.argv[6], encoding="utf-8").read()
ids = llm.tokenize(text.encode(), add_bos=False, special=False)
while len(ids) < ctx + steps:
    ids = ids + ids
t0 = time.perf_counter()
llm.eval(ids[:ctx])
prefill = time.perf_counter() - t0
ms = []
for i in range(steps):
    t0 = time.perf_counter()
    llm.eval([ids[ctx + i]])
    ms.append(1000 * (time.perf_counter() - t0))
print(json.dumps({"prefill_s": prefill, "ms": ms}))
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="a model of tools/python/models.json, or a GGUF file")
    ap.add_argument("-c", "--codebooks", required=True, help="codebooks for gsrq generate (keys after RoPE)")
    ap.add_argument("--context", default="1024,4096")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--python", default=os.path.expanduser("~/.cache/gsrq-studio/llamacpp/bin/python3"))
    ap.add_argument("--gsrq", default=os.environ.get("GSRQ_CLI", os.path.join(ROOT, "build", "app", "cli", "gsrq")))
    a = ap.parse_args(argv)
    import fetch_model
    import texts
    path = a.model
    if not os.path.isfile(path):
        try:
            path = fetch_model.model_path(a.model)
        except fetch_model.InputError as e:
            print(e, file=sys.stderr)
            return 2
    if not os.path.isfile(a.python):
        print(f"llamacpp_decode.py: no llama-cpp-python environment at {a.python} (see --help)", file=sys.stderr)
        return 2
    text = texts.prepare("devil")[1]
    contexts = [int(x) for x in a.context.split(",")]
    rows = {}
    for ctx in contexts:
        for kv in ("f16", "q4_0"):
            r = subprocess.run([a.python, "-c", CHILD, path, str(ctx), str(a.tokens), str(a.threads), kv, text],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                print(r.stderr[-2000:], file=sys.stderr)
                return 1
            j = json.loads(r.stdout.strip().splitlines()[-1])
            rows[(ctx, "llama.cpp " + kv)] = statistics.median(j["ms"])
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    r = subprocess.run([a.gsrq, "--no-db", "generate", path, "--text", text, "-c", a.codebooks, "--context", a.context,
                        "--tokens", str(a.tokens), "--threads", str(a.threads), "--json", "-q"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        return 1
    for p in json.loads(r.stdout)["points"]:
        rows[(p["context"], "gsrq " + p["path"])] = p["step_ms"]
    names = ["llama.cpp f16", "llama.cpp q4_0", "gsrq fp16", "gsrq lookup"]
    print(f"{os.path.basename(path)}: ms per token (tokens per second), median of {a.tokens}, {a.threads} threads")
    print(f"  {'context':>8} " + " ".join(f"{n:>22}" for n in names))
    for ctx in contexts:
        cells = [f"{rows[(ctx, n)]:9.2f} ({1000 / rows[(ctx, n)]:6.1f}/s)" if (ctx, n) in rows else "-" for n in names]
        print(f"  {ctx:>8} " + " ".join(f"{c:>22}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
