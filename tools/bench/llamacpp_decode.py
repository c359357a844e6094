#!/usr/bin/env python3
"""llama.cpp's token-by-token decode beside `gsrq generate`, on the same GGUF file, threads and
contexts, in one script.

  python3 tools/bench/llamacpp_decode.py --model smollm2 [-c CODEBOOKS] --context 1024,4096,8000
        [--tokens 8] [--threads 2] [--python ~/.cache/gsrq-studio/llamacpp/bin/python3]

For each context: llama.cpp (llama-cpp-python 0.3.36, built from its PyPI sources for this CPU) with
its KV cache in F16 and in q4_0 (--kv; keys and values; flash attention on, which a quantized value
cache needs), the context filled by prefilling the evaluation text's tokens (real positions; one
prefill per cache type, filled on from one context to the next), then --tokens single-token
evaluations timed (median); and `gsrq generate` with the same contexts (FP16 and the compressed
lookup path, its context a --prefill-token prefill repeated; see docs/real-models.md), its products
from the GGUF blocks or the FP32 matrices (--weights).

--fill repeat fills llama.cpp's cache as gsrq's is filled, for contexts whose prefill two cores
cannot finish in minutes (its q4_0 cache's CPU prefill converts every value row once per query):
--prefill tokens of the text are prefilled, the sequence's state (llama_state_seq_get_data) is read,
its cells are repeated to the context with positions 0, 1, ..., and loaded back
(llama_state_seq_set_data). A step's time does not depend on the cached values, only on how many
there are and their type. Prints milliseconds per token and tokens per
second of each, and gsrq's attention share. Both read the weights in their quantized blocks (with
--weights blocks); llama.cpp also rounds the activations to 8 bits for its integer dot products.

llama-cpp-python is not in the pinned PyTorch environments; make its own once (about 10 minutes
of compiling on two cores):
  python3 -m venv ~/.cache/gsrq-studio/llamacpp
  CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF" ~/.cache/gsrq-studio/llamacpp/bin/pip install llama-cpp-python==0.3.36
On a CPU that reports AMX (Intel Sapphire Rapids and later) GGML_NATIVE builds llama.cpp's AMX
kernels, which stop with "Illegal instruction" where the process is not granted the tile state
(llama.cpp does not ask for it); there, name its other instruction sets instead:
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
    -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF
    -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF" .../pip install llama-cpp-python==0.3.36
"""
import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys

from gsrqtools import models, texts
from gsrqtools.paths import default_gsrq, llamacpp_python

# Runs inside the llama-cpp-python environment (after repeat_state's source): prints {"prefill_s":
# [...], "ms": [[...], ...]} for one cache type. By prefill, one prefill serves every context: filled to
# the first, its steps timed, then filled on to the next (the timed tokens stay in the cache and count
# toward it). By repeat, each context is loaded afresh from the prefilled cells, repeated to its length.
CHILD = r"""
import ctypes, json, sys, time
import llama_cpp
path, contexts, steps, threads, kv = sys.argv[1], [int(c) for c in sys.argv[2].split(",")], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
fill, unit = sys.argv[7], int(sys.argv[8])
kind = {"f16": llama_cpp.GGML_TYPE_F16, "q4_0": llama_cpp.GGML_TYPE_Q4_0}[kv]
llm = llama_cpp.Llama(model_path=path, n_ctx=max(contexts) + steps + 8, n_threads=threads, n_threads_batch=threads,
                      n_batch=512, type_k=kind, type_v=kind, flash_attn=True, verbose=False)
text = open(sys.argv[6], encoding="utf-8").read()
ids = llm.tokenize(text.encode(), add_bos=False, special=False)
while len(ids) < max(contexts) + steps:
    ids = ids + ids

if fill == "repeat":
    llm.eval(ids[:unit])
    size = llama_cpp.llama_state_seq_get_size(llm.ctx, 0)
    buf = (ctypes.c_uint8 * size)()
    got = llama_cpp.llama_state_seq_get_data(llm.ctx, buf, size, 0)
    state = bytes(buf)[:got]
out = {"prefill_s": [], "ms": []}
for ctx in contexts:
    t0 = time.perf_counter()
    if fill == "repeat":
        try:
            blob = repeat_state(state, unit, ctx)
        except ValueError as e:
            sys.exit(f"llama.cpp's sequence state: {e}; --fill prefill does not read it")
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
        if llama_cpp.llama_state_seq_set_data(llm.ctx, (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob), len(blob), 0) != len(blob):
            sys.exit(f"llama.cpp did not load the repeated state of {ctx} cells")
        llm.n_tokens = ctx
        del blob
    else:
        llm.eval(ids[llm.n_tokens:ctx])
    out["prefill_s"].append(time.perf_counter() - t0)
    ms = []
    for i in range(steps):
        t0 = time.perf_counter()
        llm.eval([ids[llm.n_tokens]])
        ms.append(1000 * (time.perf_counter() - t0))
    out["ms"].append(ms)
print(json.dumps(out))
"""


def repeat_state(state, unit, length):
    """A llama.cpp sequence state of `unit` cells (llama_state_seq_get_data) with its cells repeated
    to `length`, at positions 0 .. length − 1. The layout (llama-cpp-python 0.3.36's llama.cpp): an
    8-byte header, the same for any cell count (kept as read); streams and cells (uint32 each); per
    cell its position (int32), sequence count (uint32) and sequence ids (int32 each); whether V is
    stored transposed and the layers (uint32 each); then per layer K's type (int32), row bytes (uint64)
    and one row a cell, and V's alike. Raises ValueError where the state is not that layout."""
    import struct
    if len(state) < 16:
        raise ValueError(f"{len(state)} bytes, shorter than its header")
    streams, cells = struct.unpack_from("<II", state, 8)
    if streams != 1 or cells != unit:
        raise ValueError(f"{streams} streams and {cells} cells, not 1 and {unit}")
    off, metas = 16, []
    for _ in range(cells):
        if off + 8 > len(state):
            raise ValueError("it ends inside its cells")
        _, nseq = struct.unpack_from("<iI", state, off)
        metas.append(state[off + 4:off + 8 + 4 * nseq])
        off += 8 + 4 * nseq
    if off + 8 > len(state):
        raise ValueError("it ends before its layers")
    v_trans, layers = struct.unpack_from("<II", state, off)
    off += 8
    if v_trans:
        raise ValueError("values stored transposed (flash attention off)")
    parts = [state[:8], struct.pack("<II", 1, length)]
    parts += [struct.pack("<i", i) + metas[i % unit] for i in range(length)]
    parts.append(struct.pack("<II", v_trans, layers))
    whole, rest = divmod(length, unit)
    for _ in range(2 * layers):
        if off + 12 > len(state):
            raise ValueError("it ends inside a layer's header")
        _, row = struct.unpack_from("<iQ", state, off)
        rows = state[off + 12:off + 12 + row * cells]
        if len(rows) != row * cells:
            raise ValueError("it ends inside a layer's rows")
        parts.append(state[off:off + 12] + rows * whole + rows[:row * rest])
        off += 12 + row * cells
    if off != len(state):
        raise ValueError(f"{len(state) - off} bytes left over")
    return b"".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="a model of tools/python/models.json, or a GGUF file")
    ap.add_argument("-c", "--codebooks", help="codebooks for gsrq generate's lookup path (keys after RoPE); "
                    "without, its FP16 path alone")
    ap.add_argument("--context", default="1024,4096")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--kv", default="f16,q4_0", help="llama.cpp's cache types (f16, q4_0)")
    ap.add_argument("--weights", default="blocks",
                    help="gsrq generate's weights: blocks, blocks-q8, fp32, or several (blocks,blocks-q8)")
    ap.add_argument("--fill", default="prefill", choices=("prefill", "repeat"),
                    help="llama.cpp's context: prefilled with the text, or --prefill tokens of it repeated")
    ap.add_argument("--prefill", type=int, default=256,
                    help="tokens gsrq generate (and --fill repeat) prefill before repeating them")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--python", default=llamacpp_python())
    ap.add_argument("--gsrq", default=default_gsrq())
    a = ap.parse_args(argv)
    path = models.report(models.resolve, a.model)
    if path is None:
        return 2
    if not os.path.isfile(a.python):
        print(f"llamacpp_decode.py: no llama-cpp-python environment at {a.python} (see --help)", file=sys.stderr)
        return 2
    text = texts.prepare("devil")[1]
    contexts = sorted(int(x) for x in a.context.split(","))
    kvs = [k for k in a.kv.split(",") if k]
    weights = [w for w in a.weights.split(",") if w]
    if a.prefill < 2 or (a.fill == "repeat" and a.prefill > contexts[0]):
        print(f"llamacpp_decode.py: --prefill {a.prefill}: at least 2 and at most the smallest context",
              file=sys.stderr)
        return 2
    if any(k not in ("f16", "q4_0") for k in kvs) or any(w not in ("blocks", "blocks-q8", "fp32") for w in weights):
        print("llamacpp_decode.py: --kv takes f16 and q4_0, --weights blocks, blocks-q8 and fp32", file=sys.stderr)
        return 2
    rows, prefill = {}, {}
    for kv in kvs:
        r = subprocess.run([a.python, "-c", inspect.getsource(repeat_state) + CHILD, path, ",".join(map(str, contexts)), str(a.tokens), str(a.threads),
                            kv, text, a.fill, str(a.prefill)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            print(r.stderr[-2000:], file=sys.stderr)
            return 1
        j = json.loads(r.stdout.strip().splitlines()[-1])
        for ctx, ms in zip(contexts, j["ms"]):
            rows[(ctx, "llama.cpp " + kv)] = statistics.median(ms)
        prefill["llama.cpp " + kv] = sum(j["prefill_s"])
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    shares = {}
    for w in weights:
        books = ["-c", a.codebooks] if a.codebooks else ["--paths", "fp16"]
        r = subprocess.run([a.gsrq, "--no-db", "generate", path, "--text", text, *books, "--context",
                            ",".join(map(str, contexts)), "--tokens", str(a.tokens), "--prefill", str(a.prefill), "--threads", str(a.threads),
                            "--weights", w, "--json", "-q"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 1
        tag = "" if len(weights) == 1 else f" ({w})"
        for p in json.loads(r.stdout)["points"]:
            rows[(p["context"], f"gsrq {p['path']}{tag}")] = p["step_ms"]
            shares[(p["context"], f"gsrq {p['path']}{tag}")] = p["attention_share"]
    names = [f"llama.cpp {k}" for k in kvs] + [n for n in dict.fromkeys(n for (_, n) in rows) if n.startswith("gsrq")]
    print(f"{os.path.basename(path)}: ms per token (tokens per second), median of {a.tokens}, {a.threads} threads; "
          "gsrq's attention share in brackets")
    print(f"  {'context':>8} " + " ".join(f"{n:>26}" for n in names))
    for ctx in contexts:
        cells = []
        for n in names:
            if (ctx, n) not in rows:
                cells.append("-")
                continue
            c = f"{rows[(ctx, n)]:.2f} ({1000 / rows[(ctx, n)]:.1f}/s)"
            if (ctx, n) in shares:
                c += f" [{100 * shares[(ctx, n)]:.0f}%]"
            cells.append(c)
        print(f"  {ctx:>8} " + " ".join(f"{c:>26}" for c in cells))
    how = "prefill" if a.fill == "prefill" else f"fill ({a.prefill} tokens prefilled, their cells repeated)"
    print(f"llama.cpp {how}: " + ", ".join(f"{k} {v:.0f} s" for k, v in prefill.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
