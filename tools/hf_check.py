#!/usr/bin/env python3
"""The KV dump exporter (tools/dump_kv.py) against real transformers models, family by family.

    python3 tools/hf_check.py --out DIR [--gsrq PATH] [--families llama,phi3] [--devices cpu,cuda]
                              [--dtypes f32,bf16,f16] [--big] [--quick]
    python3 tools/hf_check.py --out DIR --model FILE.gguf|DIR [--text FILE]

--model runs the same checks on a pretrained model as a user has it (a GGUF file, or a model
directory), f32 on the CPU, on real text (check_model below says how its memory stays bounded).

For each family a small model is built from its config with random weights (nothing is
downloaded) and saved with a word-level tokenizer, as a user's model directory would be; then, for
each device and model dtype, `dump_kv.py` is run on it as a user runs it and the dump is checked:

- shapes and metadata (heads, KV heads, head_dim, the family's attention facts);
- post-RoPE keys and queries, taken from the model's own attention inputs, against RoPE recomputed
  here in float64 from the pre-RoPE tensors (per layer: Gemma 3's local layers have their own base);
- key and value gradients against central finite differences of the summed loss in a float64 copy
  of the model, on the largest entry of a few rows (f32 runs on the CPU; the other dtypes are checked
  against the f32 dump of the same model instead);
- causality: the last token's key and value gradients are zero;
- `gsrq info` opens the dump and `gsrq compare` runs on a middle layer's values.

--big also writes a dump of more than 2 GB (sharded by layer) and opens it with `gsrq info`.
Results: DIR/hf-check.json (every check with its figures) and DIR/hf-check.md (a table). Exit code
0 when every check passed, 1 otherwise; a family the installed transformers lacks is reported as
skipped with the reason.
"""
import argparse
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

from gsrqtools import hf, texts
from gsrqtools.kvhooks import producers
from gsrqtools.paths import ROOT, default_gsrq

# Small configs with each family's distinguishing features. Random weights; 3 layers so that a
# "middle" layer exists and Gemma's alternating local/global pattern shows both kinds.
COMMON = dict(vocab_size=0, hidden_size=256, intermediate_size=512, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False)
FAMILIES = {
    "llama": dict(model_type="llama", head_dim=64),
    "qwen2": dict(model_type="qwen2"),  # q/k/v projections with bias
    "qwen3": dict(model_type="qwen3", head_dim=128),  # q_norm / k_norm before RoPE
    "mistral": dict(model_type="mistral", head_dim=64, sliding_window=16),
    "gemma2": dict(model_type="gemma2", head_dim=256, query_pre_attn_scalar=256, sliding_window=16,
                   attn_logit_softcapping=50.0, final_logit_softcapping=30.0, num_key_value_heads=1),
    "gemma": dict(model_type="gemma", head_dim=64),
    "gemma3_text": dict(model_type="gemma3_text", head_dim=256, query_pre_attn_scalar=256, sliding_window=16,
                        sliding_window_pattern=2, rope_local_base_freq=10000.0, rope_theta=1000000.0),
    # Multimodal Gemma 3: the same text model under model.language_model, beside a (tiny) vision tower.
    "gemma3": dict(model_type="gemma3", head_dim=256, query_pre_attn_scalar=256, sliding_window=16,
                   sliding_window_pattern=2, rope_local_base_freq=10000.0, rope_theta=1000000.0),
    "phi3": dict(model_type="phi3", num_key_value_heads=4, pad_token_id=0, partial_rotary_factor=0.5),  # fused qkv_proj
    "mixtral": dict(model_type="mixtral", head_dim=64, num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": dict(model_type="qwen2_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128,
                      shared_expert_intermediate_size=256),
    "qwen3_moe": dict(model_type="qwen3_moe", head_dim=64, num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=128, decoder_sparse_step=1),
}
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
              patch_size=14)
WORDS = ("the a cache key value query token head layer model small large quick slow bright dark river "
         "stone tree light sound word story child house garden winter summer morning evening friend "
         "happy sad runs walks sees finds keeps loses makes takes gives and but or so then when while "
         "because if . , ! ?").split()


def log(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------------------------------------
# Reading dumps (independent of the exporter's writer)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
    data = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[base + b:base + end]
        dt = e["dtype"]
        if dt == "BF16":
            arr = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = raw.view({"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}[dt])
        out[name] = arr.reshape(e["shape"])
    return out, header.get("__metadata__", {})


def read_dump(d):
    tensors, meta = {}, {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            t, m = read_safetensors(os.path.join(d, f))
            assert not set(t) & set(tensors), f"tensor in two shards: {set(t) & set(tensors)}"
            tensors.update(t)
            meta = meta or m
    return tensors, meta


def rope_numpy(x, positions, inv_freq):
    """Rotate-half RoPE in float64 over the first 2·len(inv_freq) features (the rest pass through),
    written independently of the exporter."""
    ang = positions[:, None].astype(np.float64) * inv_freq[None, :].astype(np.float64)
    cos = np.cos(np.concatenate([ang, ang], -1))[:, None, :]
    sin = np.sin(np.concatenate([ang, ang], -1))[:, None, :]
    r = 2 * len(inv_freq)
    xr = x[..., :r].astype(np.float64)
    h = r // 2
    rot = np.concatenate([-xr[..., h:], xr[..., :h]], -1)
    return np.concatenate([xr * cos + rot * sin, x[..., r:]], -1)


# ---------------------------------------------------------------------------------------------
# Models


def make_tokenizer(transformers, tokenizers):
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{w: i + 4 for i, w in enumerate(sorted(set(WORDS)))}}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                                unk_token="<unk>", pad_token="<pad>"), len(vocab)


def build(family, workdir, transformers, tokenizers, torch):
    spec = dict(FAMILIES[family])
    mtype = spec.pop("model_type")
    tok, vocab = make_tokenizer(transformers, tokenizers)
    kw = {**COMMON, **spec, "vocab_size": vocab}
    if mtype == "gemma3":
        cfg = transformers.AutoConfig.for_model(mtype, text_config={**kw, "model_type": "gemma3_text"},
                                                vision_config={**VISION, "model_type": "siglip_vision_model"},
                                                mm_tokens_per_image=4)
    else:
        cfg = transformers.AutoConfig.for_model(mtype, **kw)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    # Random weights at the usual init scale give attention close to uniform; a larger q/k scale
    # makes the softmax, and so the gradients through it, less trivial.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight", "qkv_proj.weight")):
                p.mul_(4.0)
    d = os.path.join(workdir, family)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d, model.eval(), tok


def write_text(path, words, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        f.write(" ".join(rng.choice(WORDS, size=words)))


# ---------------------------------------------------------------------------------------------
# Checks


class Report:
    def __init__(self):
        self.rows = []

    def add(self, family, device, dtype, check, ok, figure="", limit="", note=""):
        self.rows.append(dict(family=family, device=device, dtype=dtype, check=check, ok=bool(ok), figure=figure,
                              limit=limit, note=note))
        log(f"  {'ok  ' if ok else 'FAIL'} {family} {device} {dtype} {check} {figure} {note}")

    def skip(self, family, device, dtype, why):
        self.rows.append(dict(family=family, device=device, dtype=dtype, check="(skipped)", ok=None, figure="",
                              limit="", note=why))
        log(f"  skip {family} {device} {dtype}: {why}")


def run_dump(model_dir, text, out, device, dtype, samples, seq_len, extra=()):
    store = "f32" if dtype == "f32" else "bf16"
    cmd = [sys.executable, os.path.join(ROOT, "tools", "dump_kv.py"), "--model", model_dir, "--text", text,
           "--samples", str(samples), "--seq-len", str(seq_len), "--out", out, "--device", device,
           "--model-dtype", dtype, "--dtype", store, "--post-rope", "--force", "--quiet", *extra]
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r, time.time() - t


def text_config(model):
    c = model.config
    return c.get_text_config() if callable(getattr(c, "get_text_config", None)) else c


def producer_of_key(attn, heads, hd):
    """(module, offset) whose output holds the pre-RoPE keys, as the exporter reads them."""
    p = producers(attn)
    if "qkv" in p:
        return p["qkv"], heads * hd
    return p["key"], 0


class Float64Everywhere:
    """Inside it, float32 is float64: `torch.float32`, `torch.float` and `Tensor.float()`. Norms,
    routers and softmax in transformers upcast with these, which in a float64 copy of a model would
    round activations to float32, and that noise (~1e-7 of the loss) swamps a finite difference."""

    def __init__(self, torch):
        self.torch = torch

    def __enter__(self):
        t = self.torch
        self.saved = (t.float32, t.float, t.Tensor.float)
        t.float32 = t.float = t.float64
        t.Tensor.float = lambda x, *a, **k: x.to(t.float64)

    def __exit__(self, *exc):
        t = self.torch
        t.float32, t.float, t.Tensor.float = self.saved


def summed_loss(model, ids, layer, token, feature, delta, torch):
    """The summed next-token loss, computed here in float64 from the logits (transformers 5's own
    loss upcasts logits with .float(), which would make it float32), with the pre-RoPE key element
    [token, feature] of `layer` moved by delta. A per-head norm's output may hold tokens or heads
    first: the token axis is the one of length len(ids) (the checks use more tokens than heads)."""
    cfg = text_config(model)
    heads = cfg.num_attention_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    _, layers = hf.decoder(model)
    module, offset = producer_of_key(layers[layer].self_attn, heads, hd)
    T = len(ids)

    def hook(m, inputs, output):
        out = output.clone()
        if out.dim() == 4 and out.shape[2] == T and out.shape[1] != T:
            out[0, feature // hd, token, feature % hd] += delta
            return out
        flat = out.reshape(out.shape[0], out.shape[1], -1)
        flat[0, token, offset + feature] += delta
        return flat.reshape(out.shape)
    h = module.register_forward_hook(hook)
    try:
        with torch.no_grad(), Float64Everywhere(torch):
            x = torch.tensor([ids])
            logits = model(input_ids=x, use_cache=False).logits[0].to(torch.float64)
            return float(torch.nn.functional.cross_entropy(logits[:-1], x[0, 1:], reduction="sum"))
    finally:
        h.remove()


def cached_keys(cache, layer):
    """The keys (after RoPE) the model's own KV cache holds for a layer: [kv_heads, tokens, head_dim]."""
    if hasattr(cache, "layers"):          # transformers 5
        return cache.layers[layer].keys[0]
    if hasattr(cache, "key_cache"):       # 4.x DynamicCache
        return cache.key_cache[layer][0]
    return cache[layer][0][0]             # legacy tuples


def check_with_gsrq(gsrq, out, layer, dim, compare_name, add):
    """`gsrq info` opens the dump and `gsrq compare` runs on layer `layer`'s values (D = dim, K = 16);
    add(check, ok, figure, limit, note) records each."""
    r = subprocess.run([gsrq, "info", out], capture_output=True, text=True)
    add("gsrq info", r.returncode == 0 and f"layers.{layer}.value" in r.stdout, "", "", r.stderr.strip()[-200:])
    r = subprocess.run([gsrq, "--no-db", "compare", out, "--tensor", f"layers.{layer}.value", "--dim", str(dim),
                        "--k", "16", "--iters", "5", "--weights", "grad-log", "--json", "-q"],
                       capture_output=True, text=True)
    ok = r.returncode == 0
    fig = ""
    if ok:
        j = json.loads(r.stdout)
        fig = f"cosine km {j['km']['cosine']:.4f} gskm {j['gskm']['cosine']:.4f}"
    add(compare_name, ok, fig, "", r.stderr.strip()[-200:])


def check_family(family, args, rep, transformers, tokenizers, torch, gsrq, work):
    try:
        model_dir, model, tok = build(family, work, transformers, tokenizers, torch)
    except Exception as e:  # noqa: BLE001 - a family this transformers lacks is reported, not fatal
        rep.skip(family, "-", "-", f"cannot build from its config here: {type(e).__name__}: {e}")
        return
    # The tokenizer as the exporter loads it: transformers 5 picks the family's own tokenizer class
    # (Qwen2's rebuilds a byte-level BPE from the vocabulary), so its ids may differ from `tok`'s.
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    cfg = text_config(model)
    heads, kvh = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    layers = cfg.num_hidden_layers
    samples, seq_len = (2, 32) if args.quick else (4, 64)
    text = os.path.join(work, "text.txt")
    write_text(text, 4 * samples * seq_len)
    f32_dump = None
    for device in args.devices:
        if device == "cuda" and not torch.cuda.is_available():
            rep.skip(family, device, "-", "no CUDA device")
            continue
        for dtype in args.dtypes:
            out = os.path.join(work, f"{family}-{device}-{dtype}")
            r, secs = run_dump(model_dir, text, out, device, dtype, samples, seq_len)
            rep.add(family, device, dtype, "dump_kv.py exits 0", r.returncode == 0, f"{secs:.1f} s", "",
                    r.stderr.strip()[-300:] if r.returncode else "")
            if r.returncode:
                continue
            t, meta = read_dump(out)
            n = samples * seq_len
            shapes_ok = all(t[f"layers.{l}.{k}"].shape == (n, h, hd) for l in range(layers)
                            for k, h in (("key", kvh), ("value", kvh), ("query", heads), ("key_grad", kvh),
                                         ("value_grad", kvh), ("key_post", kvh), ("query_post", heads)))
            rep.add(family, device, dtype, "shapes and metadata", shapes_ok and int(meta["head_dim"]) == hd
                    and int(meta["num_kv_heads"]) == kvh and meta["model_type"] == model.config.model_type,
                    f"heads {heads}, kv {kvh}, head_dim {hd}")
            rep.add(family, device, dtype, "post-RoPE from the model's attention inputs",
                    meta.get("post_rope_source") == "attention inputs", meta.get("post_rope_source", "?"))
            # RoPE recomputed here in float64 from each layer's θ (the metadata's per-layer list, or
            # rope_theta) over the rotary width the family's config sets, against what the model's
            # attention received.
            pos = t["positions"]
            rot = int(hd * float(FAMILIES[family].get("partial_rotary_factor", 1.0)))
            thetas = meta.get("layer_rope_theta", "").split(",") if meta.get("layer_rope_theta") else []
            want = {"gemma3_text": (10000.0, 1000000.0), "gemma3": (10000.0, 1000000.0)}.get(family)
            types = meta.get("layer_types", "").split(",") if meta.get("layer_types") else []
            worst, theta_ok = 0.0, 2 * t["rope.inv_freq"].shape[0] == rot
            for l in range(layers):
                theta = float(thetas[l]) if thetas else float(meta["rope_theta"])
                if want:  # Gemma 3: local layers θ 1e4, global ones 1e6
                    theta_ok &= theta == want[types[l] == "full_attention"]
                inv = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
                for kind in ("key", "query"):
                    pre, post = t[f"layers.{l}.{kind}"].astype(np.float64), t[f"layers.{l}.{kind}_post"]
                    ref = rope_numpy(pre, pos, inv)
                    worst = max(worst, float(np.abs(post - ref).max() / max(1.0, np.abs(ref).max())))
            rep.add(family, device, dtype, "θ and rotary width per layer in the metadata", theta_ok,
                    meta.get("layer_rope_theta", meta.get("rope_theta")), f"rotary {rot}")
            # f32: float32 products of cos/sin; bf16/f16: the model applies RoPE in its own dtype (2^-8 for bf16).
            limit = 1e-5 if dtype == "f32" else 1.6e-2
            rep.add(family, device, dtype, "post-RoPE = RoPE(pre) per layer", worst <= limit, f"{worst:.2e}",
                    f"{limit:g}")
            if dtype == "f32" and device == "cpu":
                # The stored post-RoPE keys of the first sequence against the model's own KV cache
                # (a sliding-window layer keeps only its last tokens: those are compared).
                seqs0, _ = hf.tokenize(tok, text, samples, seq_len)
                with torch.no_grad():
                    out0 = model(input_ids=torch.tensor([seqs0[0]]), use_cache=True)
                    cache = out0.cache if getattr(out0, "cache", None) is not None else out0.past_key_values
                worst_c = 0.0
                for l in range(layers):
                    ck = cached_keys(cache, l).transpose(0, 1).double().numpy()  # [tokens, kv_heads, hd]
                    mine = t[f"layers.{l}.key_post"][:seq_len][-ck.shape[0]:].astype(np.float64)
                    worst_c = max(worst_c, float(np.abs(mine - ck).max() / max(1.0, np.abs(ck).max())))
                # The same float32 computation in the same process: only the order of a few products.
                rep.add(family, device, dtype, "post-RoPE keys = the model's own KV cache", worst_c <= 1e-5,
                        f"{worst_c:.2e}", "1e-5")
            g = t["layers.0.key_grad"].reshape(n, -1)
            last = [(s + 1) * seq_len - 1 for s in range(samples)]
            rep.add(family, device, dtype, "causality: last token's gradients are 0",
                    all(np.all(g[i] == 0) for i in last) and
                    all(np.all(t["layers.0.value_grad"].reshape(n, -1)[i] == 0) for i in last))
            if dtype == "f32" and device == "cpu":
                f32_dump = (t, out)
                major = int(str(transformers.__version__).split(".")[0] or 4)
                kw = {"dtype" if major >= 5 else "torch_dtype": torch.float64}
                if major >= 5 and (family.endswith("moe") or family == "mixtral"):
                    kw["experts_implementation"] = "eager"  # grouped matmuls have no float64 kernel
                m64 = transformers.AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager",
                                                                        **kw).eval()
                seqs, _ = hf.tokenize(tok, text, samples, seq_len)
                worst_fd = 0.0
                for l in range(layers):
                    gl = t[f"layers.{l}.key_grad"].reshape(n, -1)
                    for tok_i in (seq_len // 4, seq_len // 2):
                        j = int(np.argmax(np.abs(gl[tok_i])))
                        eps = 1e-4
                        fd = (summed_loss(m64, seqs[0], l, tok_i, j, eps, torch) -
                              summed_loss(m64, seqs[0], l, tok_i, j, -eps, torch)) / (2 * eps)
                        worst_fd = max(worst_fd, abs(fd - gl[tok_i, j]) / max(abs(fd), 1e-6))
                # Central differences of a model that is float64 throughout (truncation ~eps² = 1e-8)
                # against float32 backprop through 3 layers (~1e-6 seen): 1e-4 leaves room for both.
                rep.add(family, device, dtype, "key gradients = finite differences", worst_fd <= 1e-4,
                        f"{worst_fd:.2e}", "1e-4 relative")
            elif f32_dump is not None:
                ref = f32_dump[0]["layers.1.key_grad"].astype(np.float64)
                got = t["layers.1.key_grad"].astype(np.float64)
                rel = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))
                # bf16/f16 arithmetic through 3 layers: a few percent of the gradient's norm.
                rep.add(family, device, dtype, "key gradients ≈ the f32 CPU dump's", rel <= 0.1, f"{rel:.2e}",
                        "0.1 relative (norm)")
            if gsrq:
                check_with_gsrq(gsrq, out, 1, 8, "gsrq compare (values, D 8, K 16, grad-log)",
                                lambda *a: rep.add(family, device, dtype, *a))
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)


def check_big(args, rep, transformers, tokenizers, torch, gsrq, work):
    """A dump of more than 2 GB: Llama, head_dim 128, 8 KV heads, 4 layers, f16, no gradients."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok, vocab = make_tokenizer(transformers, tokenizers)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=1024, intermediate_size=2048, num_hidden_layers=4,
                                   num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=4096)
    torch.manual_seed(0)
    d = os.path.join(work, "big-llama")
    transformers.LlamaForCausalLM(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    samples, seq_len = 48, 2048  # 98,304 tokens × 4 layers × 3 × 1024 × 2 bytes = 2.4 GB
    text = os.path.join(work, "big.txt")
    write_text(text, samples * seq_len + 1000, seed=1)
    out = os.path.join(work, "big-dump")
    cmd = [sys.executable, os.path.join(ROOT, "tools", "dump_kv.py"), "--model", d, "--text", text, "--samples",
           str(samples), "--seq-len", str(seq_len), "--out", out, "--device", device, "--model-dtype",
           "f16" if device == "cuda" else "f32", "--dtype", "f16", "--no-grad", "--force", "--quiet"]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.time() - t0
    total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out)) if r.returncode == 0 else 0
    rep.add("llama (> 2 GB)", device, "f16", "dump over 2 GB, sharded by layer", r.returncode == 0 and total > 2 ** 31,
            f"{total / 2 ** 30:.2f} GiB in {secs:.0f} s", "> 2 GiB", r.stderr.strip()[-300:])
    if r.returncode == 0 and gsrq:
        r = subprocess.run([gsrq, "info", out, "--json"], capture_output=True, text=True)
        ok = r.returncode == 0
        fig = ""
        if ok:
            try:
                j = json.loads(r.stdout)
                fig = f"{len(j.get('tensors', []))} tensors"
            except ValueError:
                fig = "(not JSON)"
        rep.add("llama (> 2 GB)", device, "f16", "gsrq info opens it", ok, fig, "", r.stderr.strip()[-200:])
    shutil.rmtree(out, ignore_errors=True)


def write_reports(rep, args, versions):
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "hf-check.json"), "w") as f:
        json.dump({"versions": versions, "checks": rep.rows}, f, indent=1)
    failed = [r for r in rep.rows if r["ok"] is False]
    lines = ["# The KV dump exporter against transformers models", "",
             "Written by `tools/hf_check.py`. " + (
                 f"The pretrained model {args.model}, on {args.text}." if getattr(args, "model", None)
                 else "Models built from configs with random weights (nothing downloaded)."),
             "", "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), "",
             f"{sum(1 for r in rep.rows if r['ok'])} checks passed, {len(failed)} failed, "
             f"{sum(1 for r in rep.rows if r['ok'] is None)} skipped.", "",
             "| family | device | dtype | check | result | figure | limit | note |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rep.rows:
        res = "skipped" if r["ok"] is None else ("pass" if r["ok"] else "**FAIL**")
        note = r["note"].replace("|", "/").replace("\n", " ")
        lines.append(f"| {r['family']} | {r['device']} | {r['dtype']} | {r['check']} | {res} | {r['figure']} | "
                     f"{r['limit']} | {note} |")
    with open(os.path.join(args.out, "hf-check.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return not failed


def check_model(path, args, rep, transformers, torch, gsrq, work):
    """The exporter's checks on a pretrained model as a user has it (a GGUF file or a model directory):
    its dump of real text (--text, f32 on the CPU) against shapes and metadata, RoPE recomputed in
    float64, the model's own KV cache, causality, and float64 finite differences of the loss; then
    `gsrq info` and `gsrq compare` on it. Memory: the dump runs first in its own process; the model is
    then loaded once in FP32 for the cache check and turned into float64 in place for the finite
    differences, so the peak is the larger of the dump's and the float64 model's."""
    label = os.path.basename(os.path.normpath(path))
    samples, seq_len = (2, 64) if args.quick else (2, 128)
    out = os.path.join(work, "real-f32")
    r, secs = run_dump(path, args.text, out, "cpu", "f32", samples, seq_len)
    rep.add(label, "cpu", "f32", "dump_kv.py exits 0", r.returncode == 0, f"{secs:.1f} s", "",
            r.stderr.strip()[-300:] if r.returncode else "")
    if r.returncode:
        return
    t, meta = read_dump(out)
    a = argparse.Namespace(model=path, device="cpu", model_dtype="f32", seq_len=seq_len, no_grad=True)
    model, tok, _, _ = hf.load_model(a, seq_len=seq_len, backward=False)
    cfg = text_config(model)
    heads, kvh = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    layers = cfg.num_hidden_layers
    n = samples * seq_len
    shapes_ok = all(t[f"layers.{l}.{k}"].shape == (n, h, hd) for l in range(layers)
                    for k, h in (("key", kvh), ("value", kvh), ("query", heads), ("key_grad", kvh),
                                 ("value_grad", kvh), ("key_post", kvh), ("query_post", heads)))
    rep.add(label, "cpu", "f32", "shapes and metadata", shapes_ok and int(meta["head_dim"]) == hd
            and int(meta["num_kv_heads"]) == kvh and meta["model_type"] == model.config.model_type,
            f"{meta['model_type']}: {layers} layers, heads {heads}, kv {kvh}, head_dim {hd}")
    rep.add(label, "cpu", "f32", "post-RoPE from the model's attention inputs",
            meta.get("post_rope_source") == "attention inputs", meta.get("post_rope_source", "?"))
    pos = t["positions"]
    theta = float(meta["rope_theta"])
    want_theta = float((getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 0) or
                       getattr(cfg, "rope_theta", 0) or 0)
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    worst = 0.0
    for l in range(layers):
        for kind in ("key", "query"):
            pre, post = t[f"layers.{l}.{kind}"].astype(np.float64), t[f"layers.{l}.{kind}_post"]
            ref = rope_numpy(pre, pos, inv)
            worst = max(worst, float(np.abs(post - ref).max() / max(1.0, np.abs(ref).max())))
    rep.add(label, "cpu", "f32", "θ in the metadata is the model's", theta == want_theta, f"{theta:g}",
            f"{want_theta:g}")
    # float32 products of cos/sin at positions up to seq_len, on activations of real magnitude.
    rep.add(label, "cpu", "f32", "post-RoPE = RoPE(pre) per layer", worst <= 1e-5, f"{worst:.2e}", "1e-5")
    seqs, _ = hf.tokenize(tok, args.text, samples, seq_len)
    with torch.no_grad():
        out0 = model(input_ids=torch.tensor([seqs[0]]), use_cache=True)
        cache = out0.cache if getattr(out0, "cache", None) is not None else out0.past_key_values
    worst_c = 0.0
    for l in range(layers):
        ck = cached_keys(cache, l).transpose(0, 1).double().numpy()
        mine = t[f"layers.{l}.key_post"][:seq_len][-ck.shape[0]:].astype(np.float64)
        worst_c = max(worst_c, float(np.abs(mine - ck).max() / max(1.0, np.abs(ck).max())))
    rep.add(label, "cpu", "f32", "post-RoPE keys = the model's own KV cache", worst_c <= 1e-5, f"{worst_c:.2e}",
            "1e-5")
    g = t["layers.0.key_grad"].reshape(n, -1)
    last = [(s + 1) * seq_len - 1 for s in range(samples)]
    rep.add(label, "cpu", "f32", "causality: last token's gradients are 0",
            all(np.all(g[i] == 0) for i in last) and
            all(np.all(t["layers.0.value_grad"].reshape(n, -1)[i] == 0) for i in last))
    del out0, cache
    model = model.double()  # in place, parameter by parameter: no second copy of the weights
    worst_fd = 0.0
    checked = sorted({0, layers // 2, layers - 1})
    for l in checked:
        gl = t[f"layers.{l}.key_grad"].reshape(n, -1)
        tok_i = seq_len // 2
        j = int(np.argmax(np.abs(gl[tok_i])))
        eps = 1e-4
        fd = (summed_loss(model, seqs[0], l, tok_i, j, eps, torch) -
              summed_loss(model, seqs[0], l, tok_i, j, -eps, torch)) / (2 * eps)
        worst_fd = max(worst_fd, abs(fd - gl[tok_i, j]) / max(abs(fd), 1e-6))
    # float32 backprop through the model's whole depth against float64 central differences: the
    # float32 rounding of dozens of layers stays within 1e-3 of the largest gradient entry.
    rep.add(label, "cpu", "f32", f"key gradients = finite differences (layers {checked})", worst_fd <= 1e-3,
            f"{worst_fd:.2e}", "1e-3 relative")
    del model
    if gsrq:
        mid = layers // 2
        check_with_gsrq(gsrq, out, mid, hd, f"gsrq compare (layer {mid} values, D {hd}, K 16, grad-log)",
                        lambda *a: rep.add(label, "cpu", "f32", *a))
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for hf-check.json and hf-check.md")
    ap.add_argument("--gsrq", default=default_gsrq(),
                    help="the gsrq binary for info and compare (skipped where it is missing)")
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated; default: all")
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("--dtypes", default="f32,bf16,f16")
    ap.add_argument("--big", action="store_true", help="also a dump of more than 2 GB")
    ap.add_argument("--quick", action="store_true", help="fewer tokens per dump")
    ap.add_argument("--keep", action="store_true", help="keep the dumps (in --out/work)")
    ap.add_argument("--model", help="check a pretrained model (a GGUF file or a model directory) instead of the "
                                    "families' small random ones")
    ap.add_argument("--text", help="with --model: the text it runs on (default: tools/texts.py's devil, "
                                   "calibration part)")
    args = ap.parse_args(argv)
    args.devices = [d for d in args.devices.split(",") if d]
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    unknown = [f for f in args.families.split(",") if f not in FAMILIES]
    if unknown:
        print(f"hf_check.py: --families: unknown {', '.join(unknown)} (known: {', '.join(FAMILIES)})", file=sys.stderr)
        return 2
    if "f32" not in args.dtypes and "cpu" in args.devices:
        print("hf_check.py: --dtypes: f32 is needed for the finite-difference check", file=sys.stderr)
        return 2
    try:
        import torch
        import tokenizers
        import transformers
    except ImportError as e:
        print(f"hf_check.py: needs torch, transformers and tokenizers ({e})", file=sys.stderr)
        return 2
    gsrq = args.gsrq if os.path.isfile(args.gsrq) and os.access(args.gsrq, os.X_OK) else None
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                "cuda": torch.version.cuda or "none",
                "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
                "gsrq": gsrq or "not found (info and compare not run)"}
    log("hf_check: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    rep = Report()
    work = os.path.join(args.out, "work") if args.keep else tempfile.mkdtemp(prefix="hf-check-")
    os.makedirs(work, exist_ok=True)
    try:
        if args.model:
            if not args.text:
                args.text = texts.prepare("devil")[0]
            log(f"{args.model}:")
            try:
                check_model(args.model, args, rep, transformers, torch, gsrq, work)
            except Exception as e:  # noqa: BLE001 - a crash is a failed check, with its reason
                rep.add(os.path.basename(args.model), "-", "-", "ran to the end", False, "", "",
                        f"{type(e).__name__}: {e} {traceback.format_exc()[-400:]}")
        for family in ([] if args.model else args.families.split(",")):
            log(f"{family}:")
            try:
                check_family(family, args, rep, transformers, tokenizers, torch, gsrq, work)
            except Exception as e:  # noqa: BLE001 - one family's crash is a failed check, not the end
                rep.add(family, "-", "-", "ran to the end", False, "", "",
                        f"{type(e).__name__}: {e} {traceback.format_exc()[-400:]}")
        if args.big:
            try:
                check_big(args, rep, transformers, tokenizers, torch, gsrq, work)
            except Exception as e:  # noqa: BLE001
                rep.add("llama (> 2 GB)", "-", "-", "ran to the end", False, "", "", f"{type(e).__name__}: {e}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    ok = write_reports(rep, args, versions)
    log(f"hf_check: {'all checks passed' if ok else 'some checks FAILED'}; see {args.out}/hf-check.md")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
