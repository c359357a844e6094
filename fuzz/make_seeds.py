#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora into fuzz/seeds/<target>/ (committed; rerun after a format
changes). Valid files of each format, small so that mutations stay fast, made by hand and by the
real tool (codebooks and a run store from `gsrq train` on a tiny synthetic dump), plus the
malformed inputs of the test suite's corpus (tests/tst_malformed.cpp writes them when
GSRQ_SEED_DIR is set).

  python3 fuzz/make_seeds.py --gsrq build/app/cli/gsrq --malformed build/tests/tst_malformed
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.abspath(__file__))


def safetensors(tensors, metadata=None):
    """tensors: {name: (dtype, shape, bytes)} -> the file's bytes."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def gpt2_byte_chars():
    """GPT-2's printable character of each byte (byte-level BPE vocabularies start with these 256)."""
    chars = [chr(b) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174 else None for b in range(256)]
    n = 256
    for b in range(256):
        if chars[b] is None:
            chars[b] = chr(n)
            n += 1
    return chars


def gguf_file(kv, tensors, alignment=32):
    """A GGUF v3 file: kv {key: (value type, packed value bytes)}, tensors [(name, dims, type, bytes)]."""
    def string(x):
        return struct.pack("<Q", len(x.encode())) + x.encode()
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for key, (vtype, raw) in kv.items():
        out += string(key) + struct.pack("<I", vtype) + raw
    data, offsets = b"", []
    for name, dims, ttype, raw in tensors:
        data += b"\0" * (-len(data) % alignment)
        offsets.append(len(data))
        data += raw
    for (name, dims, ttype, raw), off in zip(tensors, offsets):
        out += string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ttype, off)
    out += b"\0" * (-len(out) % alignment)
    return out + data


def gguf_seeds(rng):
    """Small GGUF models: llama metadata and one tensor of each type the engine dequantizes."""
    def s(x):
        return (8, struct.pack("<Q", len(x.encode())) + x.encode())
    kv = {"general.architecture": s("llama"), "llama.block_count": (4, struct.pack("<I", 1)),
          "llama.attention.head_count": (4, struct.pack("<I", 2)),
          "llama.attention.head_count_kv": (4, struct.pack("<I", 1)),
          "llama.embedding_length": (4, struct.pack("<I", 32)),
          "llama.rope.freq_base": (6, struct.pack("<f", 10000.0)),
          "tokenizer.ggml.tokens": (9, struct.pack("<IQ", 8, 2) + s("a")[1] + s("b")[1]),
          "tokenizer.ggml.scores": (9, struct.pack("<IQ", 6, 2) + struct.pack("<2f", 0.0, -1.0))}
    # (type, elements per block, bytes per block); fp16 scales set to small finite values below.
    types = [(0, 1, 4), (1, 1, 2), (30, 1, 2), (8, 32, 34), (2, 32, 18), (3, 32, 20), (6, 32, 22), (7, 32, 24),
             (12, 256, 144), (13, 256, 176), (14, 256, 210)]
    half = np.float16(0.01).view(np.uint16).tobytes()
    tensors = []
    for ttype, block, nbytes in types:
        n = 256 if block == 256 else 64
        raw = bytearray(rng.integers(0, 256, n // block * nbytes, dtype=np.uint8).tobytes())
        if ttype == 0:
            raw = (rng.standard_normal(n) * 0.1).astype(np.float32).tobytes()
        elif ttype == 1:
            raw = (rng.standard_normal(n) * 0.1).astype(np.float16).tobytes()
        else:
            for b in range(n // block):
                at = b * nbytes + (208 if ttype == 14 else 0)
                raw[at:at + 2] = half
        tensors.append((f"t{ttype}", [n], ttype, bytes(raw)))
    put("fuzz_gguf", "every-type.gguf", gguf_file(kv, tensors))
    # A byte-level BPE vocabulary: GPT-2's 256 byte characters, three merges and a special token.
    vocab = gpt2_byte_chars() + ["He", "ll", "Hell", "<|im_start|>"]
    merges = ["H e", "l l", "He ll"]
    def strings(xs):
        return struct.pack("<IQ", 8, len(xs)) + b"".join(s(x)[1] for x in xs)
    tok_kv = {"general.architecture": s("llama"), "tokenizer.ggml.model": s("gpt2"),
              "tokenizer.ggml.pre": s("qwen2"), "tokenizer.ggml.tokens": (9, strings(vocab)),
              "tokenizer.ggml.merges": (9, strings(merges)),
              "tokenizer.ggml.token_type": (9, struct.pack("<IQ", 5, len(vocab))
                                            + struct.pack(f"<{len(vocab)}i", *([1] * (len(vocab) - 1) + [3]))),
              "tokenizer.ggml.bos_token_id": (4, struct.pack("<I", len(vocab) - 1))}
    put("fuzz_gguf", "bpe-vocab.gguf", gguf_file(tok_kv, []))
    # A whole model the forward pass loads (tests/data/make_tiny_gguf.py writes it).
    tiny = os.path.join(ROOT, "..", "tests", "data", "tiny-llama.gguf")
    if os.path.isfile(tiny):
        put("fuzz_gguf", "tiny-llama.gguf", open(tiny, "rb").read())
    put("fuzz_gguf", "empty.gguf", gguf_file({"general.architecture": s("llama")}, []))
    put("fuzz_gguf", "q4k-2d.gguf", gguf_file(kv, [tensors[8]], alignment=32)[:-7])  # truncated


def seeds_dir(target):
    d = os.path.join(ROOT, "seeds", target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def put(target, name, raw):
    with open(os.path.join(ROOT, "seeds", target, name), "wb") as f:
        f.write(raw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gsrq", required=True, help="the gsrq executable")
    ap.add_argument("--malformed", help="tst_malformed, to write the test corpus as seeds")
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    for t in ("fuzz_safetensors", "fuzz_npy", "fuzz_shard_index", "fuzz_codebooks", "fuzz_checkpoint",
              "fuzz_tokenizer", "fuzz_codebooks_struct", "fuzz_shards_struct", "fuzz_run_store", "fuzz_gguf"):
        seeds_dir(t)

    # Dumps: keys, values, gradients, positions, RoPE frequencies; F32, F16, BF16.
    k = rng.standard_normal((6, 2, 4)).astype(np.float32)
    g = (rng.standard_normal((6, 2, 4)) * 1e-3).astype(np.float32)
    bf16 = (g.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    full = {
        "layers.0.key": ("F32", k.shape, k.tobytes()),
        "layers.0.key_grad": ("BF16", g.shape, bf16),
        "layers.0.value": ("F16", k.shape, k.astype(np.float16).tobytes()),
        "layers.0.value_grad": ("F32", g.shape, g.tobytes()),
        "positions": ("I64", (6,), np.arange(6, dtype=np.int64).tobytes()),
        "sequence_ids": ("I32", (6,), np.zeros(6, dtype=np.int32).tobytes()),
        "rope.inv_freq": ("F32", (2,), np.array([1.0, 0.01], dtype=np.float32).tobytes()),
    }
    put("fuzz_safetensors", "dump.safetensors", safetensors(full, {"model": "seed", "rope_theta": "10000"}))
    put("fuzz_safetensors", "one.safetensors", safetensors({"layers.3.value": full["layers.0.key"]}))
    k2 = k.reshape(6, 8)
    k2[1, 3] = np.nan
    put("fuzz_safetensors", "nan.safetensors", safetensors({"x": ("F32", k2.shape, k2.tobytes())}))

    for name, arr in (("f4", k.reshape(6, 8)), ("f2", k.reshape(6, 8).astype(np.float16)),
                      ("f8", k.reshape(6, 8).astype(np.float64))):
        with tempfile.TemporaryDirectory() as tmp:
            p = os.path.join(tmp, "a.npy")
            np.save(p, arr)
            put("fuzz_npy", f"{name}.npy", open(p, "rb").read())

    put("fuzz_shard_index", "index.json", json.dumps({
        "metadata": {"total_size": 96},
        "weight_map": {"layers.0.key": "a.safetensors", "layers.0.key_grad": "a.safetensors",
                       "layers.0.value": "b.safetensors"}}).encode())
    put("fuzz_shard_index", "partial.json", json.dumps({"weight_map": {"layers.0.key": "a.safetensors"}}).encode())

    # Codebooks and a run store from the real tool.
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "d.safetensors")
        x = rng.standard_normal((64, 2, 4)).astype(np.float32)
        with open(dump, "wb") as f:
            f.write(safetensors({"layers.0.key": ("F32", x.shape, x.tobytes()),
                                 "layers.0.value": ("F32", x.shape, (x * 2).tobytes())}))
        db = os.path.join(tmp, "runs.db")
        for dtype in ("f16", "f32"):
            out = os.path.join(tmp, f"cb-{dtype}.safetensors")
            subprocess.run([a.gsrq, "--db", db, "train", dump, "--dim", "4", "--stages", "2", "--k", "4",
                            "--iters", "3", "--dtype", dtype, "--out", out, "-q", "--with-codes",
                            "--attention-queries", "0"], check=True)
            put("fuzz_codebooks", f"cb-{dtype}.safetensors", open(out, "rb").read())
        subprocess.run([a.gsrq, "--db", db, "runs", "note", "1", "seed"], check=True)
        subprocess.run(["python3", "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); "
                        "c.execute('PRAGMA journal_mode=DELETE'); c.execute('VACUUM'); c.close()", db], check=True)
        put("fuzz_run_store", "runs.db", open(db, "rb").read())

    # A llama2.c checkpoint of dim 8 (header: dim, hidden, layers, heads, kv_heads, vocab, seq).
    dim, hidden, layers, heads, kvh, vocab, seq = 8, 16, 1, 2, 1, 16, 8
    kvd = dim // heads * kvh
    counts = [vocab * dim, layers * dim, layers * dim * dim, layers * dim * kvd, layers * dim * kvd,
              layers * dim * dim, layers * dim, layers * hidden * dim, layers * dim * hidden,
              layers * hidden * dim, dim]
    w = (rng.standard_normal(sum(counts)) * 0.1).astype(np.float32)
    put("fuzz_checkpoint", "tiny.bin", struct.pack("<7i", dim, hidden, layers, heads, kvh, vocab, seq) + w.tobytes())
    put("fuzz_checkpoint", "unshared.bin",
        struct.pack("<7i", dim, hidden, layers, heads, kvh, -vocab, seq) + w.tobytes()
        + (rng.standard_normal(vocab * dim) * 0.1).astype(np.float32).tobytes())

    # Tokenizers: the bundled one and a tiny one (input: vocabulary size as u16, then the file).
    tok = open(os.path.join(ROOT, "..", "resources", "models", "stories260K", "tok512.bin"), "rb").read()
    put("fuzz_tokenizer", "tok512.bin", struct.pack("<H", 512) + tok)
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(8)] + [" ", "a", "b", " a", "ab"]
    raw = struct.pack("<i", 3)
    for i, p in enumerate(pieces):
        raw += struct.pack("<fi", float(-i), len(p.encode())) + p.encode()
    put("fuzz_tokenizer", "tiny.bin", struct.pack("<H", len(pieces)) + raw)

    gguf_seeds(rng)

    # The structure-aware targets start from a few random byte strings.
    for t in ("fuzz_codebooks_struct", "fuzz_shards_struct"):
        for i in range(4):
            put(t, f"r{i}", rng.integers(0, 256, 64, dtype=np.uint8).tobytes())

    if a.malformed:
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, GSRQ_SEED_DIR=tmp, QT_QPA_PLATFORM="offscreen")
            subprocess.run([a.malformed, "eachIsAClearError"], env=env, check=True, stdout=subprocess.DEVNULL)
            for name in sorted(os.listdir(tmp)):
                target = "fuzz_npy" if name.endswith(".npy") else "fuzz_safetensors"
                shutil.copy(os.path.join(tmp, name), os.path.join(ROOT, "seeds", target, name))


if __name__ == "__main__":
    main()
