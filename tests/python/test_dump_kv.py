"""tools/dump_kv.py end to end: a tiny randomly initialised model is built in the test (no
download), dumped, and the dump is checked: shapes, the RoPE relation between the keys before and
after RoPE, the gradients against a finite difference, and that `gsrq info` opens it.

Two models: a Hugging Face LlamaForCausalLM from a LlamaConfig (GQA, 2 layers; needs transformers),
and a small Llama-style torch module with the same module names (needs torch only), so that the
exporter's hooks, gradients and shard writing are checked where transformers is not installed.
Each is skipped, with its reason, where what it needs is missing. tools/hf_ppl.py runs on the
stand-in with codebooks `gsrq train` made from the stand-in's own dump.
"""
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
torch = pytest.importorskip("torch", reason="PyTorch is not installed: the exporter cannot run")
import dump_kv  # noqa: E402
import hf_check  # noqa: E402

GSRQ = os.environ.get("GSRQ_CLI", os.path.join(ROOT, "build", "app", "cli", "gsrq"))
TEXT = ("Once upon a time there was a little cache that wanted to be small. " * 40).strip()


# The dump reader and the float64 RoPE of tools/hf_check.py: both independent of the exporter.
read_dump = hf_check.read_dump
rope_numpy = hf_check.rope_numpy


def summed_loss(model, ids, layer, token, feature, delta):
    """The summed next-token loss with key[token, feature] of `layer` moved by delta (the same
    perturbation tools/hf_check.py applies to transformers models)."""
    return hf_check.summed_loss(model, ids, layer, token, feature, delta, torch)


def check_dump(out, model, seqs, heads, kv_heads, head_dim, layers, seq_len):
    tensors, meta = read_dump(out)
    n = len(seqs) * seq_len
    assert meta["format"] == "gsrq-kv-dump" and meta["key_rope"] == "pre" and meta["rope_pairing"] == "half"
    assert int(meta["num_kv_heads"]) == kv_heads and int(meta["head_dim"]) == head_dim
    for l in range(layers):
        for kind, h in (("key", kv_heads), ("value", kv_heads), ("query", heads), ("key_grad", kv_heads),
                        ("value_grad", kv_heads), ("key_post", kv_heads), ("query_post", heads)):
            assert tensors[f"layers.{l}.{kind}"].shape == (n, h, head_dim), kind
    pos, inv = tensors["positions"], tensors["rope.inv_freq"]
    assert list(pos[:seq_len]) == list(range(seq_len)) and list(pos[seq_len:2 * seq_len]) == list(range(seq_len))
    assert list(tensors["sequence_ids"][::seq_len]) == list(range(len(seqs)))
    # RoPE: post = rotate(pre) at each row's position. Both are float32 of the same values, the
    # reference in float64: 1e-5 of the key's scale covers float32 rounding of cos/sin products.
    for l in range(layers):
        for kind in ("key", "query"):
            pre = tensors[f"layers.{l}.{kind}"].astype(np.float64)
            post = tensors[f"layers.{l}.{kind}_post"].astype(np.float64)
            ref = rope_numpy(pre, pos, inv)
            assert np.abs(post - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max()), (l, kind)
    # Gradient of the summed loss against a central difference in float64 on one element of one
    # key and one value: truncation O(eps²) and float32 storage keep it within 1e-3 relative.
    m64 = model.double()
    for l in range(layers):
        g = tensors[f"layers.{l}.key_grad"].reshape(n, -1)
        t = seq_len // 2
        j = int(np.argmax(np.abs(g[t])))  # the largest entry of that row: far from zero
        eps = 1e-4
        fd = (summed_loss(m64, seqs[0], l, t, j, eps) - summed_loss(m64, seqs[0], l, t, j, -eps)) / (2 * eps)
        assert abs(fd - g[t, j]) <= 1e-3 * abs(fd) + 1e-7, (l, fd, g[t, j])
    # Causality: the last token's key and value affect no prediction, so their gradients are zero.
    assert np.all(tensors["layers.0.key_grad"][seq_len - 1] == 0)
    # The app opens the directory as one dump.
    if os.path.exists(GSRQ):
        r = subprocess.run([GSRQ, "info", out], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert "layers.0.key" in r.stdout and "layers.1.value_grad" in r.stdout
        r = subprocess.run([GSRQ, "--no-db", "compare", out, "--tensor", "layers.1.key", "--dim", str(head_dim),
                            "--k", "8", "--iters", "3", "--weights", "grad-log", "--json", "-q"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    else:
        pytest.skip(f"gsrq not built at {GSRQ}: the dump was checked, gsrq info was not run")


# ---------------------------------------------------------------------------------------------
# A small Llama-style model in plain torch, with the module names the exporter hooks.


def rope_torch(x, positions, inv_freq):
    """The stand-ins' RoPE, in x's own dtype: the float64 copy used for finite differences must not
    round through float32 (its noise, ~1e-8 of the loss over a step of 1e-4, would swamp the check)."""
    ang = positions[:, None].to(x.dtype) * inv_freq[None, :].to(x.dtype)
    emb = torch.cat((ang, ang), dim=-1)
    r = emb.shape[-1]
    xr = x[..., :r]
    out = xr * emb.cos()[:, None, :] + dump_kv.rotate_half(xr) * emb.sin()[:, None, :]
    return torch.cat((out, x[..., r:]), dim=-1)


class MiniAttention(torch.nn.Module):
    def __init__(self, d, heads, kv_heads, hd, inv_freq):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, hd
        self.q_proj = torch.nn.Linear(d, heads * hd, bias=False)
        self.k_proj = torch.nn.Linear(d, kv_heads * hd, bias=False)
        self.v_proj = torch.nn.Linear(d, kv_heads * hd, bias=False)
        self.o_proj = torch.nn.Linear(heads * hd, d, bias=False)
        self.inv_freq = inv_freq

    def project(self, x):
        B, T, _ = x.shape
        return (self.q_proj(x).view(B, T, self.heads, self.hd), self.k_proj(x).view(B, T, self.kv_heads, self.hd),
                self.v_proj(x).view(B, T, self.kv_heads, self.hd))

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.project(x)
        pos = torch.arange(T)
        q, k = (rope_torch(t[0], pos, self.inv_freq)[None] for t in (q, k))
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) / self.hd ** 0.5
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        return self.o_proj(torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v).reshape(B, T, -1))


class MiniFusedAttention(MiniAttention):
    """Phi-3's layout: one qkv_proj whose outputs are q, then k, then v."""

    def __init__(self, d, heads, kv_heads, hd, inv_freq):
        super().__init__(d, heads, kv_heads, hd, inv_freq)
        del self.q_proj, self.k_proj, self.v_proj
        self.qkv_proj = torch.nn.Linear(d, (heads + 2 * kv_heads) * hd, bias=False)

    def project(self, x):
        B, T, _ = x.shape
        qkv = self.qkv_proj(x)
        nq, nk = self.heads * self.hd, self.kv_heads * self.hd
        return (qkv[..., :nq].reshape(B, T, self.heads, self.hd),
                qkv[..., nq:nq + nk].reshape(B, T, self.kv_heads, self.hd),
                qkv[..., nq + nk:].reshape(B, T, self.kv_heads, self.hd))


class MiniLlama(torch.nn.Module):
    def __init__(self, vocab=128, d=32, heads=4, kv_heads=2, hd=8, layers=2, fused=False, rotary=1.0):
        super().__init__()
        self.config = types.SimpleNamespace(model_type="phi3" if fused else "llama", num_attention_heads=heads,
                                            num_key_value_heads=kv_heads, hidden_size=d, head_dim=hd,
                                            rope_theta=10000.0, partial_rotary_factor=rotary)
        rot = int(hd * rotary)
        inv = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
        self.model = torch.nn.Module()
        self.model.embed = torch.nn.Embedding(vocab, d)
        self.model.layers = torch.nn.ModuleList()
        for _ in range(layers):
            blk = torch.nn.Module()
            blk.self_attn = (MiniFusedAttention if fused else MiniAttention)(d, heads, kv_heads, hd, inv)
            blk.mlp = torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.SiLU(), torch.nn.Linear(2 * d, d))
            self.model.layers.append(blk)
        self.model.rotary_emb = types.SimpleNamespace(inv_freq=inv, attention_scaling=1.0)
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids, labels=None, use_cache=False):
        h = self.model.embed(input_ids)
        for blk in self.model.layers:
            h = h + blk.self_attn(h)
            h = h + blk.mlp(h)
        logits = self.lm_head(h)
        loss = None if labels is None else torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:])
        return types.SimpleNamespace(loss=loss, logits=logits)


class CharTokenizer:
    bos_token_id = 1

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [2 + ord(c) % 120 for c in text]}


def run_tool(args, loaded):
    return dump_kv.main(args, loaded=loaded)


def test_standin_model_dump(tmp_path):
    torch.manual_seed(0)
    model = MiniLlama().eval()
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    out = str(tmp_path / "dump")
    loaded = (model, CharTokenizer(), "cpu", "f32")
    rc = run_tool(["--model", "mini", "--text", str(text), "--samples", "2", "--seq-len", "24", "--out", out,
                   "--dtype", "f32", "--post-rope", "--quiet"], loaded)
    assert rc == 0
    assert sorted(os.listdir(out)) == ["common.safetensors", "layer_000.safetensors", "layer_001.safetensors"]
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".dump_kv-")], "staging directory left behind"
    seqs, _ = dump_kv.tokenize(CharTokenizer(), str(text), 2, 24)
    check_dump(out, model, seqs, 4, 2, 8, 2, 24)


def test_standin_fused_qkv_partial_rotary(tmp_path):
    """Phi-3's fused qkv_proj cut into q, k and v (and its gradient likewise), with RoPE over half of
    each head: the same checks as the separate projections pass."""
    torch.manual_seed(1)
    model = MiniLlama(fused=True, rotary=0.5).eval()
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    out = str(tmp_path / "dump")
    rc = run_tool(["--model", "mini-phi", "--text", str(text), "--samples", "2", "--seq-len", "24", "--out", out,
                   "--dtype", "f32", "--post-rope", "--quiet"], (model, CharTokenizer(), "cpu", "f32"))
    assert rc == 0
    tensors, meta = read_dump(out)
    assert meta["model_type"] == "phi3" and int(meta["rotary_dim"]) == 4
    assert meta["post_rope_source"] == "recomputed from rope.inv_freq"  # not a transformers model
    assert tensors["rope.inv_freq"].shape == (2,)
    # The unrotated half of each head is the same before and after RoPE.
    assert np.array_equal(tensors["layers.0.key"][..., 4:], tensors["layers.0.key_post"][..., 4:])
    seqs, _ = dump_kv.tokenize(CharTokenizer(), str(text), 2, 24)
    check_dump(out, model, seqs, 4, 2, 8, 2, 24)


def test_standin_refusals(tmp_path, capsys):
    model = MiniLlama().eval()
    loaded = (model, CharTokenizer(), "cpu", "f32")
    short = tmp_path / "short.txt"
    short.write_text("too short")
    out = str(tmp_path / "dump")
    assert run_tool(["--model", "mini", "--text", str(short), "--samples", "2", "--seq-len", "24", "--out", out],
                    loaded) == 2
    assert "--text" in capsys.readouterr().err and not os.path.exists(out)
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    # --dry-run: shapes and bytes, nothing written
    assert run_tool(["--model", "mini", "--text", str(text), "--samples", "2", "--seq-len", "24", "--out", out,
                     "--dry-run"], loaded) == 0
    printed = capsys.readouterr().out
    assert "layers.1.key_grad" in printed and "[48, 2, 8]" in printed and not os.path.exists(out)
    os.mkdir(out)
    assert run_tool(["--model", "mini", "--text", str(text), "--samples", "1", "--seq-len", "8", "--out", out],
                    loaded) == 2
    assert "--force" in capsys.readouterr().err
    assert run_tool(["--model", "mini", "--text", str(text), "--samples", "1", "--seq-len", "8", "--out", out,
                     "--layers", "5"], loaded) == 2
    assert "--layers" in capsys.readouterr().err
    other = MiniLlama().eval()
    other.config.model_type = "gpt2"
    assert run_tool(["--model", "other", "--text", str(text), "--samples", "1", "--seq-len", "8", "--out",
                     str(tmp_path / "o")], (other, CharTokenizer(), "cpu", "f32")) == 2
    assert "not a supported family" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# A Hugging Face LlamaForCausalLM, loaded by the tool from a directory as a user's model would be.


def hf_model_dir(tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    tokenizers = pytest.importorskip("tokenizers", reason="tokenizers is not installed")
    words = sorted(set(TEXT.replace(".", " .").split()))
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                               unk_token="<unk>")
    cfg = transformers.LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    d = tmp_path / "tiny-llama"
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return str(d), model, tok


def test_hf_llama_dump(tmp_path):
    d, model, tok = hf_model_dir(tmp_path)
    text = tmp_path / "text.txt"
    text.write_text(TEXT.replace(".", " ."))
    out = str(tmp_path / "dump")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "dump_kv.py"), "--model", d, "--text", str(text),
                        "--samples", "2", "--seq-len", "16", "--out", out, "--device", "cpu", "--dtype", "f32",
                        "--post-rope"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    seqs, _ = dump_kv.tokenize(tok, str(text), 2, 16)
    check_dump(out, model, seqs, 4, 2, 8, 2, 16)


def test_hf_other_family_refused(tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    cfg = transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50)
    d = tmp_path / "gpt2"
    transformers.GPT2LMHeadModel(cfg).save_pretrained(d)
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "dump_kv.py"), "--model", str(d), "--text",
                        str(text), "--samples", "1", "--seq-len", "8", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "not a supported family" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------
# tools/hf_ppl.py on the stand-in: codebooks trained by gsrq on the stand-in's own dump.


def test_hf_ppl_with_codebooks_of_the_dump(tmp_path, capsys):
    if not os.path.exists(GSRQ):
        pytest.skip(f"gsrq not built at {GSRQ}: no codebooks to evaluate")
    import hf_ppl
    torch.manual_seed(2)
    model = MiniLlama().eval()
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    out = str(tmp_path / "dump")
    loaded = (model, CharTokenizer(), "cpu", "f32")
    args = ["--model", "mini", "--text", str(text), "--samples", "2", "--seq-len", "32", "--out", out, "--dtype", "f32",
            "--quiet", "--no-grad"]
    assert run_tool(args, loaded) == 0
    books = {}
    # K = 64 = every row of the dump (2 × 32 tokens): each row is its own codeword, so the
    # reconstruction of the same sequences is exact (F32 codewords). K = 2: coarse.
    for name, k in (("exact", "64"), ("coarse", "2")):
        books[name] = str(tmp_path / f"{name}.safetensors")
        r = subprocess.run([GSRQ, "--no-db", "train", out, "--dim", "8", "--stages", "1", "--k", k, "--out",
                            books[name], "-q"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    rc = hf_ppl.main(["--model", "mini", "--text", str(text), "--sequences", "2", "--seq-len", "32", "-c", books["exact"],
                      "-c", books["coarse"], "--json"], loaded=loaded)
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    fp32, exact, coarse = (r["perplexity"] for r in rows)
    assert abs(exact - fp32) <= 1e-5 * fp32, (exact, fp32)  # the same floats: rounding of the hooks' copies only
    assert abs(coarse - fp32) > 1e-3 * fp32, (coarse, fp32)  # two codewords per subspace change the predictions
    # Codebooks of another width are refused, naming the reason; exit code 2.
    wide = MiniLlama(kv_heads=4).eval()
    rc = hf_ppl.main(["--model", "mini", "--text", str(text), "--sequences", "1", "--seq-len", "8", "-c",
                      books["exact"]], loaded=(wide, CharTokenizer(), "cpu", "f32"))
    assert rc == 2 and "kv_heads × head_dim" in capsys.readouterr().err
    # Strided channel groups (gsrq train --method vqllm) are applied in their file's order: with a
    # codeword per row the reconstruction is exact again (a wrong order would scramble the features),
    # and two codewords change the predictions.
    strided = {}
    for name, k in (("exact", "64"), ("coarse", "2")):
        strided[name] = str(tmp_path / f"strided-{name}.safetensors")
        r = subprocess.run([GSRQ, "--no-db", "train", out, "--method", "vqllm", "--dim", "4", "--stages", "1", "--k", k,
                            "--out", strided[name], "-q"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    rc = hf_ppl.main(["--model", "mini", "--text", str(text), "--sequences", "2", "--seq-len", "32", "-c",
                      strided["exact"], "-c", strided["coarse"], "--json"], loaded=loaded)
    assert rc == 0
    fp32, exact, coarse = (r["perplexity"] for r in json.loads(capsys.readouterr().out)["results"])
    assert abs(exact - fp32) <= 1e-5 * fp32, (exact, fp32)
    assert abs(coarse - fp32) > 1e-3 * fp32, (coarse, fp32)
