"""`gsrq ppl` against an independent float64 NumPy implementation of the llama2.c model, its
tokenizer and the text re-flow, written from the format's description (docs/formats.md), not from
the C++ code: the same token count and the same perplexity on real text."""
import json
import os
import re
import struct
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GSRQ = os.environ.get("GSRQ_CLI", os.path.join(ROOT, "build", "app", "cli", "gsrq"))
MODEL = os.path.join(ROOT, "resources", "models", "stories260K", "stories260K.bin")
TOKENIZER = os.path.join(ROOT, "resources", "models", "stories260K", "tok512.bin")
LICENCE = "/usr/share/common-licenses/Apache-2.0"  # Debian's base-files: on every Debian machine


def load_model(path):
    raw = open(path, "rb").read()
    dim, hidden, layers, heads, kv_heads, vocab, max_seq = struct.unpack("<7i", raw[:28])
    f = np.frombuffer(raw[28:], dtype="<f4").astype(np.float64)
    hd = dim // heads
    kv = kv_heads * hd
    at = 0

    def take(*shape):
        nonlocal at
        n = int(np.prod(shape))
        out = f[at:at + n].reshape(shape)
        at += n
        return out
    w = dict(emb=take(vocab, dim), an=take(layers, dim), wq=take(layers, dim, dim), wk=take(layers, kv, dim),
             wv=take(layers, kv, dim), wo=take(layers, dim, dim), fn=take(layers, dim), w1=take(layers, hidden, dim),
             w2=take(layers, dim, hidden), w3=take(layers, hidden, dim), final=take(dim))
    return w, dict(dim=dim, layers=layers, heads=heads, kv_heads=kv_heads, hd=hd, vocab=vocab)


def rope(x, hd):
    """x: [T, n·hd]; interleaved pairs (x[2i], x[2i+1]) of each head, angle pos·10000^(−2i/hd)."""
    T = x.shape[0]
    x = x.reshape(T, -1, hd // 2, 2)
    ang = np.arange(T)[:, None] * 10000.0 ** (-np.arange(0, hd, 2) / hd)[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0], x[..., 1]
    return np.stack([a * c - b * s, a * s + b * c], -1).reshape(T, -1)


def logits(w, cfg, ids):
    def norm(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * g
    T, hd = len(ids), cfg["hd"]
    x = w["emb"][ids]
    for l in range(cfg["layers"]):
        h = norm(x, w["an"][l])
        q, k, v = rope(h @ w["wq"][l].T, hd), rope(h @ w["wk"][l].T, hd), h @ w["wv"][l].T
        out = np.zeros_like(q)
        for j in range(cfg["heads"]):
            kh = j // (cfg["heads"] // cfg["kv_heads"])
            s = q[:, j * hd:(j + 1) * hd] @ k[:, kh * hd:(kh + 1) * hd].T / np.sqrt(hd)
            s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            out[:, j * hd:(j + 1) * hd] = p @ v[:, kh * hd:(kh + 1) * hd]
        x = x + out @ w["wo"][l].T
        h = norm(x, w["fn"][l])
        a = h @ w["w1"][l].T
        x = x + ((a / (1 + np.exp(-a))) * (h @ w["w3"][l].T)) @ w["w2"][l].T
    return norm(x, w["final"]) @ w["emb"].T


def load_tokenizer(path, vocab):
    raw = open(path, "rb").read()
    at = 4
    pieces, scores = [], []
    for _ in range(vocab):
        score, n = struct.unpack("<fi", raw[at:at + 8])
        pieces.append(raw[at + 8:at + 8 + n])
        scores.append(score)
        at += 8 + n
    return pieces, scores


def encode(text, pieces, scores):
    index = {}
    for i, p in enumerate(pieces):
        index.setdefault(p, i)
    ids = []
    for ch in " " + text:  # the dummy prefix
        b = ch.encode()
        ids += [index[b]] if b in index else [3 + x for x in b]
    while True:
        best, at = None, -1
        for i in range(len(ids) - 1):
            j = index.get(pieces[ids[i]] + pieces[ids[i + 1]])
            if j is not None and (best is None or scores[j] > scores[best]):
                best, at = j, i
        if best is None:
            return ids
        ids[at:at + 2] = [best]


def reflow(text):
    paras = re.split(r"\n\s*\n", text)
    return "\n".join(" ".join(p.split()) for p in paras if p.strip())


@pytest.fixture(scope="module")
def cli():
    if not os.path.exists(GSRQ):
        pytest.skip(f"gsrq not built at {GSRQ}")
    return GSRQ


def test_text_perplexity_matches(tmp_path, cli):
    if not os.path.exists(LICENCE):
        pytest.skip(f"{LICENCE} is missing: not a Debian machine")
    text = tmp_path / "text.txt"
    text.write_text(open(LICENCE).read()[:2500])
    w, cfg = load_model(MODEL)
    pieces, scores = load_tokenizer(TOKENIZER, cfg["vocab"])
    ids = encode(reflow(text.read_text()), pieces, scores)
    T, S = 64, 4
    nll, n = 0.0, 0
    for s in range(S):
        seq = [1] + ids[s * (T - 1):(s + 1) * (T - 1)]
        z = logits(w, cfg, np.array(seq))
        z = z - z.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        nll -= sum(logp[t, seq[t + 1]] for t in range(T - 1))
        n += T - 1
    ref = float(np.exp(nll / n))
    r = subprocess.run([cli, "--no-db", "ppl", MODEL, "--tokenizer", TOKENIZER, "--text", str(text), "--seq-len",
                        str(T), "--sequences", str(S), "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["text_tokens"] == len(ids)  # the same tokenization
    got = j["results"][0]["perplexity"]
    # float32 against float64 through 5 layers: the logits agree to ~1e-5, the perplexity to 1e-4.
    assert abs(got - ref) <= 1e-4 * ref, (got, ref)
