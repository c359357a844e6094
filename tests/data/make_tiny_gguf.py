#!/usr/bin/env python3
"""Writes tests/data/tiny-llama.gguf: a synthetic GGUF model for the test suites, made here with seeded
random weights (no pretrained weights): llama architecture, 2 layers, embedding 32, 2 query heads on
1 KV head of head_dim 16 (the CPU decode paths' smallest), FFN 64, RoPE base 500,000, RMSNorm
epsilon 1e-6; a byte-level BPE vocabulary of GPT-2's 256 byte characters, 40 merges of common English pairs and one control token
(<|endoftext|>, also BOS), pre-tokenizer "smollm". F32 weights, the FFN's in F16. About 100 KB.
Also tests/data/tiny-llama-q.gguf: the same model with its products' weights in Q8_0, Q4_0 and Q4_1
blocks (30 KB).

  python3 tests/data/make_tiny_gguf.py        (rerun only when the file's contents must change)
"""
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "fuzz"))
from make_seeds import gguf_file, gpt2_byte_chars  # noqa: E402


def main():
    rng = np.random.default_rng(2026)
    chars = gpt2_byte_chars()
    sp = chars[32]  # the space's character
    pairs = ["t h", "th e", "a n", "i n", "e r", "o n", "r e", "e s", "o r", "e n", "a t", "t o", "i s", "a r",
             "e d", "i t", "o u", "h a", "s t", "l e", f"{sp} t", f"{sp} a", f"{sp} o", f"{sp} w",
             f"{sp} s", f"{sp} i", f"{sp} c", f"{sp} b", f"{sp} m", "in g", "an d", "h e", f"{sp}t he", "o f",
             f"{sp}o f", "o m", "a l", "i c", "l l", "v e"]
    vocab = list(chars)
    for p in pairs:
        a, b = p.split(" ")
        if a + b not in vocab:
            vocab.append(a + b)
    vocab.append("<|endoftext|>")
    types = [1] * (len(vocab) - 1) + [3]

    def s(x):
        return (8, struct.pack("<Q", len(x.encode())) + x.encode())

    def strings(xs):
        return struct.pack("<IQ", 8, len(xs)) + b"".join(s(x)[1] for x in xs)

    def u32(v):
        return (4, struct.pack("<I", v))

    dim, hidden, layers, heads, kvh, hd = 32, 64, 2, 2, 1, 16
    kv = {"general.architecture": s("llama"), "general.name": s("tiny synthetic llama (tests)"),
          "llama.block_count": u32(layers), "llama.context_length": u32(512), "llama.embedding_length": u32(dim),
          "llama.feed_forward_length": u32(hidden), "llama.attention.head_count": u32(heads),
          "llama.attention.head_count_kv": u32(kvh), "llama.rope.freq_base": (6, struct.pack("<f", 500000.0)),
          "llama.attention.layer_norm_rms_epsilon": (6, struct.pack("<f", 1e-6)),
          "tokenizer.ggml.model": s("gpt2"), "tokenizer.ggml.pre": s("smollm"),
          "tokenizer.ggml.tokens": (9, strings(vocab)), "tokenizer.ggml.merges": (9, strings(pairs)),
          "tokenizer.ggml.token_type": (9, struct.pack("<IQ", 5, len(vocab)) + struct.pack(f"<{len(vocab)}i", *types)),
          "tokenizer.ggml.bos_token_id": u32(len(vocab) - 1)}

    def f32(shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    tensors = []

    def add(name, a, ggml_type=0):
        raw = a.astype(np.float16).tobytes() if ggml_type == 1 else a.tobytes()
        tensors.append((name, list(reversed(a.shape)), ggml_type, raw))

    add("token_embd.weight", f32((len(vocab), dim), 0.5))
    for layer in range(layers):
        b = f"blk.{layer}."
        add(b + "attn_norm.weight", 1 + f32((dim,), 0.1))
        add(b + "attn_q.weight", f32((dim, dim), 0.3))
        add(b + "attn_k.weight", f32((kvh * hd, dim), 0.3))
        add(b + "attn_v.weight", f32((kvh * hd, dim), 0.3))
        add(b + "attn_output.weight", f32((dim, dim), 0.2))
        add(b + "ffn_norm.weight", 1 + f32((dim,), 0.1))
        add(b + "ffn_gate.weight", f32((hidden, dim), 0.2), 1)
        add(b + "ffn_up.weight", f32((hidden, dim), 0.2), 1)
        add(b + "ffn_down.weight", f32((dim, hidden), 0.2), 1)
    add("output_norm.weight", 1 + f32((dim,), 0.1))
    with open(os.path.join(HERE, "tiny-llama.gguf"), "wb") as f:
        f.write(gguf_file(kv, tensors))

    # The same model with its products' weights in 32-value blocks (Q8_0, Q4_0, Q4_1: quants and FP16
    # scales drawn at random, valid blocks whatever their values), for the decode step that reads
    # blocks; the tied classifier is the Q8_0 embedding. Its own generator: the file above is unchanged.
    qrng = np.random.default_rng(2027)

    def half(lo, hi, n):
        return (qrng.uniform(lo, hi, n) * qrng.choice([-1, 1], n)).astype(np.float16)

    def blocks(rows, cols, ggml_type):
        n = rows * cols // 32
        if ggml_type == 8:  # Q8_0: d, 32 int8
            raw = [half(0.002, 0.02, n).view(np.uint8).reshape(n, 2), qrng.integers(0, 256, (n, 32), dtype=np.uint8)]
        elif ggml_type == 2:  # Q4_0: d, 16 bytes of nibbles
            raw = [half(0.01, 0.06, n).view(np.uint8).reshape(n, 2), qrng.integers(0, 256, (n, 16), dtype=np.uint8)]
        else:  # Q4_1: d, m, 16 bytes of nibbles
            raw = [half(0.005, 0.04, n).view(np.uint8).reshape(n, 2), half(0.01, 0.2, n).view(np.uint8).reshape(n, 2),
                   qrng.integers(0, 256, (n, 16), dtype=np.uint8)]
        return np.concatenate(raw, axis=1).tobytes()

    quantized = {"token_embd.weight": 8, "attn_q.weight": 8, "attn_k.weight": 2, "attn_v.weight": 3,
                 "attn_output.weight": 8, "ffn_gate.weight": 2, "ffn_up.weight": 3, "ffn_down.weight": 2}
    qtensors = []
    for name, dims, ggml_type, raw in tensors:
        t = quantized.get(name.split(".", 2)[-1] if name.startswith("blk.") else name)
        if t is None:
            qtensors.append((name, dims, ggml_type, raw))
        else:
            qtensors.append((name, dims, t, blocks(dims[1], dims[0], t)))
    with open(os.path.join(HERE, "tiny-llama-q.gguf"), "wb") as f:
        f.write(gguf_file(kv, qtensors))


if __name__ == "__main__":
    main()
