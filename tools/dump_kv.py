#!/usr/bin/env python3
"""Dump keys, values, queries and loss gradients of a Hugging Face causal LM for GSRQ Studio.

    python3 tools/dump_kv.py --model meta-llama/Meta-Llama-3-8B --text wiki.train.txt \\
        --samples 128 --seq-len 2048 --out llama3-8b-kv/ [--layers 0-31] [--dtype bf16] [--no-grad]
    gsrq info llama3-8b-kv/

Supported: decoder-only attention with q_proj / k_proj / v_proj or a fused qkv_proj: Llama 2/3,
Mistral, Mixtral, Qwen2/3 (and their MoE), Gemma 1/2/3 and Phi-3.
Per layer L it records, for every token of `--samples` sequences of `--seq-len` tokens:
  layers.L.key, layers.L.value   [tokens, kv_heads, head_dim]   keys before RoPE, values
  layers.L.query                 [tokens, heads, head_dim]      queries before RoPE
  layers.L.key_grad, value_grad  [tokens, kv_heads, head_dim]   d(summed next-token loss)/d(key, value)
  layers.L.key_post, query_post  (with --post-rope)             the same after RoPE
and once: positions, sequence_ids [tokens] and rope.inv_freq [rotary_dim/2]. "Before RoPE" is the
projection output (the q, k or v slice of a fused projection), or for models that normalise q and k
per head (Qwen3, Gemma 3) the normalised output that RoPE rotates. "After RoPE" is what the model's
attention received, captured from its attention function where transformers lets one be registered
(so per-layer frequencies, as Gemma 3's local and global layers have, are the model's own), else
recomputed from inv_freq. The metadata records what attention needs beyond q, k and v: sliding
windows, per-layer attention types, logit soft-capping and the query scale. Output: a directory of safetensors shards (common.safetensors, then one
layer_LLL.safetensors per layer) that `gsrq` opens as one dump. Activations go to disk sequence by
sequence and each shard is streamed from there, so memory stays at one sequence's activations.

--model is a transformers model directory, a hub id, or a GGUF file (or a directory holding one, as
tools/fetch_model.py leaves it): transformers dequantizes a GGUF model's weights to --model-dtype, and
a model whose weights and backward pass would not fit in the memory available (estimated from the
GGUF's tensor table before loading) is refused with both figures.
Needs torch and transformers (the user's environment; gguf and accelerate for GGUF models); nothing
is downloaded unless --model is a hub id that is not cached. Exit codes: 0 done, 2 bad input (named), 1 other failures, 128 + N when
stopped by signal N (SIGTERM, SIGHUP, SIGINT: after the sequence in progress); on any failure nothing
is left at --out. The work happens in a staging directory beside --out (.NAME.dump_kv), removed on
every exit unless --resume was given, in which case a stop or crash keeps it and the same command
with --resume continues from the last finished sequence (the result is byte-identical to an
uninterrupted run). Staging that a killed run left is reused with --resume, removed without it.
Before the first sequence the bytes the dump needs at its peak are compared with the free space.
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys
import time

TOOL_VERSION = "1.2"
SUPPORTED = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "gemma", "gemma2",
             "gemma3_text", "gemma3", "phi3")
CAPTURE = "gsrq_capture"  # the attention function registered to see the model's post-RoPE q and k
DTYPES = {"f32": ("F32", 4), "f16": ("F16", 2), "bf16": ("BF16", 2)}


class InputError(Exception):
    """Bad input: exit code 2."""


# ---------------------------------------------------------------------------------------------
# Command line


def parse_layers(text, num_layers):
    if not text:
        return list(range(num_layers))
    out = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = (int(v) for v in part.split("-", 1))
                out.update(range(a, b + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise InputError(f"--layers {text}: expected a list like 0-3,7")
    bad = [l for l in sorted(out) if l < 0 or l >= num_layers]
    if bad or not out:
        raise InputError(f"--layers {text}: the model has layers 0..{num_layers - 1}")
    return sorted(out)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="local directory or hub id of a Llama-family causal LM")
    ap.add_argument("--text", required=True, help="calibration text file (UTF-8)")
    ap.add_argument("--samples", type=int, default=16, help="sequences to run")
    ap.add_argument("--seq-len", type=int, default=2048, help="tokens per sequence (the first is BOS when the tokenizer has one)")
    ap.add_argument("--out", required=True, help="output directory (must not exist unless --force)")
    ap.add_argument("--layers", default="", help="layers to record, e.g. 0-31 or 0,4,8 (default: all)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16",
                    help="dtype of the stored tensors (bf16 keeps tiny gradients that f16 would flush to zero)")
    ap.add_argument("--model-dtype", choices=("auto", "f32", "bf16", "f16"), default="auto",
                    help="dtype to run the model in (auto: bf16 on CUDA, f32 on the CPU)")
    ap.add_argument("--device", default="auto", help="cuda, cuda:N, cpu (auto: cuda when available)")
    ap.add_argument("--no-grad", action="store_true", help="skip the backward pass (no key_grad / value_grad)")
    ap.add_argument("--post-rope", action="store_true", help="also store keys and queries after RoPE")
    ap.add_argument("--dry-run", action="store_true", help="print the tensors and bytes it would write, then stop")
    ap.add_argument("--force", action="store_true", help="replace an existing --out")
    ap.add_argument("--resume", action="store_true",
                    help="continue a stopped or killed dump of the same --out and settings from its last finished "
                         "sequence; a stop keeps what a later --resume needs")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    a = ap.parse_args(argv)
    if a.samples < 1:
        raise InputError(f"--samples {a.samples}: must be at least 1")
    if a.seq_len < 2:
        raise InputError(f"--seq-len {a.seq_len}: must be at least 2 (the loss needs a next token)")
    if not os.path.isfile(a.text):
        raise InputError(f"--text {a.text}: no such file")
    return a


# ---------------------------------------------------------------------------------------------
# Streaming safetensors writer: the header is known before the data (every shape is), so each
# tensor is copied from its spool file in blocks and no tensor is ever whole in memory.


def write_safetensors(path, entries, metadata):
    """entries: list of (name, dtype_tag, shape, source) in file order; source is bytes or the path
    of a raw little-endian file holding exactly the tensor's bytes."""
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    offset = 0
    sizes = []
    for name, tag, shape, src in entries:
        n = os.path.getsize(src) if isinstance(src, str) else len(src)
        itemsize = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4}[tag]
        if n != math.prod(shape) * itemsize:
            raise RuntimeError(f"{path}: {name} holds {n} bytes, its shape {shape} needs {math.prod(shape) * itemsize}")
        header[name] = {"dtype": tag, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
        sizes.append(n)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # 8-byte aligned data section
    # Written beside `path` and renamed into place: an interrupted export leaves no half file.
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        _write_safetensors_body(tmp, blob, entries, sizes)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return offset + 8 + len(blob)


def _write_safetensors_body(path, blob, entries, sizes):
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for (_, _, _, src), n in zip(entries, sizes):
            if isinstance(src, str):
                with open(src, "rb") as s:
                    shutil.copyfileobj(s, f, 16 << 20)
            else:
                f.write(src)
        f.flush()
        os.fsync(f.fileno())


# ---------------------------------------------------------------------------------------------
# The model side


def torch_dtype(torch, tag):
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[tag]


class Recorder:
    """Forward hooks on each recorded layer's query/key/value producers, keeping their outputs
    (with retain_grad when gradients are wanted) for one forward/backward pass. A fused projection
    (Phi-3's qkv_proj) is recorded whole and cut into q, k and v by `tensors`, its gradient too.

    No layout is assumed for a per-head norm's output: depending on the family and the release it is
    [batch, tokens, heads, head_dim] (Qwen3) or [batch, heads, tokens, head_dim] (Gemma 3 under
    transformers 5, which normalises after the transpose). The token count comes from the value
    projection ([batch, tokens, features] in every family); where tokens = heads the norm's input is
    matched against the projection's output to tell them apart."""

    def __init__(self, layers_modules, layer_ids, want_grad, heads, kv_heads, head_dim):
        self.want_grad = want_grad
        self.outputs = {}
        self.inputs = {}
        self.handles = []
        self.head_dim = head_dim
        self.split = (heads * head_dim, kv_heads * head_dim)
        for lid in layer_ids:
            attn = layers_modules[lid].self_attn
            prods = producers(attn)
            for kind, module in prods.items():
                self.handles.append(module.register_forward_hook(self._hook(lid, kind)))
            if "qkv" not in prods:
                for kind, name in (("query", "q_proj"), ("key", "k_proj")):
                    if prods[kind] is not getattr(attn, name):  # a norm after the projection
                        self.handles.append(getattr(attn, name).register_forward_hook(self._hook(lid, kind + "_proj")))

    def _hook(self, lid, kind):
        def hook(module, inputs, output):
            if self.want_grad and kind in ("key", "value", "qkv") and output.requires_grad:
                output.retain_grad()
            self.outputs[(lid, kind)] = output
            if inputs:
                self.inputs[(lid, kind)] = inputs[0]
        return hook

    def _tokens_first(self, lid, kind, t):
        """t as [1, tokens, ...]: a 4-D norm output is transposed when its heads come first."""
        if t.dim() != 4:
            return t
        tokens = self.outputs[(lid, "value" if (lid, "value") in self.outputs else "qkv")].shape[1]
        a, b = t.shape[1], t.shape[2]
        if a == tokens and b != tokens:
            return t
        if b == tokens and a != tokens:
            return t.transpose(1, 2)
        proj, inp = self.outputs.get((lid, kind + "_proj")), self.inputs.get((lid, kind))
        if proj is not None and inp is not None and inp.shape == t.shape:
            view = proj.reshape(proj.shape[0], tokens, -1, self.head_dim)
            if torch_equal(inp, view):
                return t
            if torch_equal(inp, view.transpose(1, 2)):
                return t.transpose(1, 2)
        raise RuntimeError(f"layer {lid}: cannot tell whether the {kind} norm's output {tuple(t.shape)} holds "
                           f"tokens or heads first")

    def tensors(self, lid):
        """(q, k, v, k_grad, v_grad) of layer lid, each [1, tokens, ...]; the gradients are None
        without --grad."""
        fused = self.outputs.get((lid, "qkv"))
        if fused is None:
            q, k, v = (self.outputs[(lid, kind)] for kind in ("query", "key", "value"))
            kg = self._tokens_first(lid, "key", k.grad) if k.grad is not None else None
            return (self._tokens_first(lid, "query", q), self._tokens_first(lid, "key", k), v, kg, v.grad)
        nq, nk = self.split
        q, k, v = fused[..., :nq], fused[..., nq:nq + nk], fused[..., nq + nk:nq + 2 * nk]
        g = fused.grad
        kg = g[..., nq:nq + nk] if g is not None else None
        vg = g[..., nq + nk:nq + 2 * nk] if g is not None else None
        return q, k, v, kg, vg

    def clear(self):
        self.outputs.clear()
        self.inputs.clear()

    def remove(self):
        for h in self.handles:
            h.remove()


class ActivationGradients:
    """Gradients of the loss with respect to activations only. The dump needs dL/dK and dL/dV, not
    the weights' gradients: with every parameter frozen and the embedding output made a leaf that
    requires grad, the backward pass computes one product per weight instead of two and keeps no
    weight-sized gradient buffers (6 GiB for a 1.5B model in f32). The activations' gradients are the
    same either way. The parameters' flags are restored on remove(), for a caller that shares the model."""

    def __init__(self, model):
        # A model without transformers' get_input_embeddings() keeps its weights' gradients: the
        # activations' are the same, only slower to get.
        self.handle, self.params = None, []
        get = getattr(model, "get_input_embeddings", None)
        emb = get() if callable(get) else None
        if emb is None:
            return
        self.handle = emb.register_forward_hook(lambda module, inputs, output: output.requires_grad_())
        self.params = [(p, p.requires_grad) for p in model.parameters()]
        for p, _ in self.params:
            p.requires_grad_(False)

    def remove(self):
        if self.handle is not None:
            self.handle.remove()
        for p, flag in self.params:
            p.requires_grad_(flag)


def torch_equal(a, b):
    return a.shape == b.shape and bool((a == b).all())


def producers(attn):
    """The modules whose outputs are q, k (before RoPE) and v. Qwen3- and Gemma 3-style attention
    normalises q and k per head after the projection (q_norm / k_norm) and rotates the normalised
    vectors; Phi-3 computes q, k and v in one projection (qkv_proj)."""
    if hasattr(attn, "qkv_proj") and not hasattr(attn, "k_proj"):
        return {"qkv": attn.qkv_proj}
    for name in ("q_proj", "k_proj", "v_proj"):
        if not hasattr(attn, name):
            raise InputError(f"attention module {type(attn).__name__} has no {name}: not a supported family")
    q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
    return {
        "query": q_norm if q_norm is not None else attn.q_proj,
        "key": k_norm if k_norm is not None else attn.k_proj,
        "value": attn.v_proj,
    }


class AttentionCapture:
    """The model's own post-RoPE q and k, from an attention function registered with transformers
    (AttentionInterface, transformers ≥ 4.48) that records its inputs and calls the implementation
    the model had. Unavailable (older transformers, or a model that is not a transformers model):
    `active` is False and the exporter recomputes RoPE from inv_freq."""

    def __init__(self, model, layer_ids):
        self.seen = {}
        self.active = False
        self.model = model
        self.layer_ids = set(layer_ids)
        try:
            from transformers import AttentionInterface
            from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        except ImportError:
            return
        cfg = getattr(model, "config", None)
        impl = getattr(cfg, "_attn_implementation", None)
        if cfg is None or impl is None:
            return
        if impl == "eager":
            base = None  # each model's eager_attention_forward; found on the module's own file below
        else:
            base = ALL_ATTENTION_FUNCTIONS.get(impl)
            if base is None:
                return
        capture = self

        def attend(module, query, key, value, attention_mask, **kwargs):
            lid = getattr(module, "layer_idx", None)
            if lid in capture.layer_ids:
                # [B, heads, T, hd] -> [T, heads, hd] of the first (only) sequence
                capture.seen[(lid, "query")] = query.detach()[0].transpose(0, 1)
                capture.seen[(lid, "key")] = key.detach()[0].transpose(0, 1)
            fn = base
            if fn is None:
                fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward")
            return fn(module, query, key, value, attention_mask, **kwargs)

        try:
            AttentionInterface.register(CAPTURE, attend)
            # transformers ≥ 4.53 builds masks per implementation name: the capture takes the mask
            # of the implementation it wraps.
            try:
                from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
                mask = ALL_MASK_ATTENTION_FUNCTIONS.get(impl)
                if mask is not None:
                    AttentionMaskInterface.register(CAPTURE, mask)
            except ImportError:
                pass
        except Exception:  # noqa: BLE001 - any failure leaves the recomputation in place
            return
        self.previous = impl
        self._set(CAPTURE)
        self.active = True

    def _set(self, impl):
        for m in self.model.modules():
            c = getattr(m, "config", None)
            if c is not None and hasattr(c, "_attn_implementation"):
                c._attn_implementation = impl

    def take(self, lid, kind):
        return self.seen.pop((lid, kind), None)

    def remove(self):
        if self.active:
            self._set(self.previous)
            self.active = False


def rotate_half(x):
    h = x.shape[-1] // 2
    return __import__("torch").cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_post(x, positions, inv_freq, scaling=1.0):
    """x: [T, heads, head_dim] before RoPE -> after, with Hugging Face's rotate-half pairing over the
    first 2·len(inv_freq) features (all of them unless the model rotates part of each head)."""
    import torch
    ang = positions[:, None].to(torch.float32) * inv_freq[None, :].to(torch.float32)  # [T, rot/2]
    emb = torch.cat((ang, ang), dim=-1)
    cos = (emb.cos() * scaling)[:, None, :]
    sin = (emb.sin() * scaling)[:, None, :]
    xf = x.to(torch.float32)
    rot = emb.shape[-1]
    out = xf[..., :rot] * cos + rotate_half(xf[..., :rot]) * sin
    return out if rot == xf.shape[-1] else torch.cat((out, xf[..., rot:]), dim=-1)


def text_config(cfg):
    """The language model's config: a multimodal model's (Gemma 3) text part, else cfg itself."""
    get = getattr(cfg, "get_text_config", None)
    return get() if callable(get) else cfg


def decoder(model):
    """(the module that holds the decoder layers and the rotary embedding, its layers)."""
    for path in ("model", "model.language_model", "language_model.model", "language_model"):
        inner = model
        for part in path.split("."):
            inner = getattr(inner, part, None)
        layers = getattr(inner, "layers", None)
        if layers is not None and len(layers) and hasattr(layers[0], "self_attn"):
            return inner, layers
    raise InputError(f"--model: {type(model).__name__} has no decoder layers with self_attn: not a "
                     f"Llama-family causal LM")


def rope_thetas(cfg, layer_types):
    """θ per layer from the config: `rope_parameters` (transformers 5: flat, or keyed by layer
    type as Gemma 3's is) or `rope_theta` / `rope_local_base_freq` (4.x)."""
    params = getattr(cfg, "rope_parameters", None) or {}
    default = params.get("rope_theta") if isinstance(params.get("rope_theta"), (int, float)) else None
    default = default or getattr(cfg, "rope_theta", None) or 10000.0
    out = []
    for lt in layer_types:
        sub = params.get(lt) if isinstance(params.get(lt), dict) else None
        if sub and sub.get("rope_theta") is not None:
            out.append(float(sub["rope_theta"]))
        elif lt == "sliding_attention" and getattr(cfg, "rope_local_base_freq", None) is not None:
            out.append(float(cfg.rope_local_base_freq))
        else:
            out.append(float(default))
    return out


def describe(model):
    """Head counts, head_dim, RoPE per layer and the decoder layers of a supported model.

    The rotary frequencies are the model's own (its rotary module's inv_freq, which carries any
    frequency scaling and a partial rotary width), per layer: Gemma 3 keeps one set per layer type
    (`full_attention_inv_freq`, `sliding_attention_inv_freq` in transformers 5; `rotary_emb` and
    `rotary_emb_local` in 4.x)."""
    import torch
    cfg = text_config(model.config)
    mtype = getattr(model.config, "model_type", "?")
    if mtype not in SUPPORTED:
        raise InputError(f"--model: model_type '{mtype}' is not a supported family ({', '.join(SUPPORTED)})")
    inner, layers = decoder(model)
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    layer_types = list(getattr(cfg, "layer_types", None) or ["full_attention"] * len(layers))
    thetas = rope_thetas(cfg, layer_types)
    # One rotary module for the model (transformers ≥ 4.45), or one per attention module (older).
    rotary = getattr(inner, "rotary_emb", None)
    if rotary is None:
        rotary = getattr(getattr(layers[0], "self_attn", None), "rotary_emb", None)
    local = getattr(inner, "rotary_emb_local", None)
    per_type = {}
    for lt in sorted(set(layer_types)):
        inv = getattr(rotary, f"{lt}_inv_freq", None) if rotary is not None else None
        scale = getattr(rotary, f"{lt}_attention_scaling", None) if rotary is not None else None
        if inv is None and lt == "sliding_attention" and local is not None:
            inv, scale = getattr(local, "inv_freq", None), getattr(local, "attention_scaling", None)
        if inv is None and rotary is not None:
            inv, scale = getattr(rotary, "inv_freq", None), getattr(rotary, "attention_scaling", None)
        if inv is None:  # no rotary module to read: θ and the config's rotary width
            factor = float(getattr(cfg, "partial_rotary_factor", None) or
                           (getattr(cfg, "rope_parameters", None) or {}).get("partial_rotary_factor", 1.0) or 1.0)
            rot = int(head_dim * factor)
            theta = thetas[layer_types.index(lt)]
            inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
        per_type[lt] = (inv.detach().float().cpu(), float(scale if scale is not None else 1.0))
    widths = {v[0].numel() for v in per_type.values()}
    if len(widths) != 1:
        raise InputError(f"--model: its layer types rotate different widths ({sorted(2 * w for w in widths)})")
    first = layer_types.index("full_attention") if "full_attention" in layer_types else 0
    # What attention needs besides q, k and v, as the config states it (absent: not used).
    extra = {}
    for key in ("sliding_window", "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar",
                "rope_local_base_freq", "num_local_experts", "num_experts", "num_experts_per_tok"):
        v = getattr(cfg, key, None)
        if v is not None and not isinstance(v, bool):
            extra[key] = v
    if getattr(cfg, "layer_types", None):
        extra["layer_types"] = ",".join(str(t) for t in layer_types)
    if len(set(thetas)) > 1:
        extra["layer_rope_theta"] = ",".join(f"{t:g}" for t in thetas)
    scalar = getattr(cfg, "query_pre_attn_scalar", None)
    extra["attention_scale"] = (float(scalar) ** -0.5) if scalar else head_dim ** -0.5
    return {
        "model_type": mtype, "layers": layers, "num_layers": len(layers), "heads": heads,
        "kv_heads": kv_heads, "head_dim": head_dim, "inv_freq": per_type[layer_types[first]][0],
        "rope_theta": thetas[first], "rope_scaling": per_type[layer_types[first]][1],
        "rotary_dim": 2 * widths.pop(), "extra": extra, "layer_types": layer_types, "rope_per_type": per_type,
    }


def gguf_location(model):
    """(directory, file name) when --model is a GGUF file, or a directory with one .gguf file and no
    config.json (as tools/fetch_model.py leaves a model); None for a transformers model directory or
    hub id. Several .gguf files in one directory: name one."""
    if os.path.isfile(model):
        if not model.endswith(".gguf"):
            raise InputError(f"--model {model}: a file, but not a .gguf one (give a GGUF file or a model directory)")
        return os.path.dirname(os.path.abspath(model)), os.path.basename(model)
    if os.path.isdir(model) and not os.path.isfile(os.path.join(model, "config.json")):
        ggufs = sorted(f for f in os.listdir(model) if f.endswith(".gguf"))
        if len(ggufs) == 1:
            return os.path.abspath(model), ggufs[0]
        if len(ggufs) > 1:
            raise InputError(f"--model {model}: holds {len(ggufs)} GGUF files ({', '.join(ggufs)}): name one")
    return None


def gguf_parameters(path):
    """The GGUF file's parameter count, from its tensor table (nothing dequantized)."""
    try:
        import gguf
    except ImportError as e:
        raise InputError(f"--model {path}: reading a GGUF model needs the gguf package in this Python ({e}; "
                         "tools/hf_env.sh installs it)")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file, named
        raise InputError(f"--model {path}: not a readable GGUF file ({type(e).__name__}: {first_line(e)})")
    return sum(int(t.n_elements) for t in reader.tensors)


def available_memory():
    """Bytes the kernel says a new process can use without swapping (MemAvailable), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def memory_estimate(params, cfg, seq_len, backward, model_bytes=4):
    """Peak bytes of loading a model of `params` parameters in FP32 (transformers holds the dequantized
    state dict and the model at once: 2 copies) and running one sequence, with the activations a
    backward pass keeps (per layer about seq_len · hidden · (34 + 5 · heads · seq_len / hidden) values,
    Korthikanti et al. 2022, in the model's dtype) when `backward`. An estimate, stated as one."""
    weights = params * model_bytes
    tc = text_config(cfg)
    hidden, heads = int(tc.hidden_size), int(tc.num_attention_heads)
    layers = int(tc.num_hidden_layers)
    act = seq_len * hidden * (34 + 5 * heads * seq_len / hidden) * model_bytes / 2 * layers
    return int(2 * weights + (act if backward else act / layers)), int(weights)


def load_model(a, seq_len=None, backward=None):
    """(model, tokenizer, device, model dtype) of --model: a transformers model directory, a hub id, or
    a GGUF file (transformers dequantizes it to the model dtype; needs gguf and accelerate). A GGUF
    model that would not fit in memory (weights plus backward, estimated before loading) is refused
    with both numbers."""
    try:
        import torch
        import transformers
    except ImportError as e:
        raise InputError(f"dump_kv.py needs torch and transformers in this Python ({e})")
    device = a.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    mdt = a.model_dtype if a.model_dtype != "auto" else ("bf16" if device.startswith("cuda") else "f32")
    gg = gguf_location(a.model)
    local = a.model.startswith(("/", ".", "~")) or os.path.exists(a.model)
    if local and gg is None and not os.path.isdir(a.model):
        raise InputError(f"--model {a.model}: no such directory or GGUF file")
    where, extra = (gg[0], {"gguf_file": gg[1]}) if gg else (a.model, {})
    try:
        cfg = transformers.AutoConfig.from_pretrained(where, **extra)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise InputError(f"--model {a.model}: cannot read its config ({first_line(e)})")
    if getattr(cfg, "model_type", None) not in SUPPORTED:
        raise InputError(f"--model {a.model}: model_type '{getattr(cfg, 'model_type', '?')}' is not a supported "
                         f"family ({', '.join(SUPPORTED)})")
    if gg:
        params = gguf_parameters(os.path.join(*gg))
        seq = seq_len if seq_len is not None else getattr(a, "seq_len", 512)
        grad = backward if backward is not None else not getattr(a, "no_grad", True)
        # transformers dequantizes in host memory whatever the device; the activations are the
        # host's only when the model runs on the CPU.
        need, weights = memory_estimate(params, cfg, seq, grad and device == "cpu",
                                        DTYPES[mdt][1] if mdt in DTYPES else 4)
        if device != "cpu":
            need = 2 * weights
        have = available_memory()
        if have is not None and need > have:
            raise InputError(f"--model {a.model}: needs about {need / 2**30:.1f} GiB ({params / 1e9:.2f} B parameters: "
                             f"{weights / 2**30:.1f} GiB of {mdt} weights, twice while loading, plus "
                             f"{'the backward pass of ' if grad else ''}one {seq}-token sequence); this machine has "
                             f"{have / 2**30:.1f} GiB available")
    try:
        tok = transformers.AutoTokenizer.from_pretrained(where, **extra)
    except Exception as e:  # noqa: BLE001 - any tokenizer failure is the model directory's
        raise InputError(f"--model {a.model}: no usable tokenizer ({first_line(e)})")
    # transformers 5 names the argument dtype; 4.x calls it torch_dtype (and would pass an unknown
    # dtype= on to the config, silently loading FP32).
    major = int(str(getattr(transformers, "__version__", "4")).split(".")[0] or 4)
    kw = {"dtype" if major >= 5 else "torch_dtype": torch_dtype(torch, mdt), **extra}
    # Logit soft-capping (Gemma 2) is implemented by the eager attention only.
    if getattr(text_config(cfg), "attn_logit_softcapping", None):
        kw["attn_implementation"] = "eager"
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(where, **kw)
    except Exception as e:  # noqa: BLE001 - a truncated or mismatched weights file, named
        raise InputError(f"--model {a.model}: cannot load its weights ({type(e).__name__}: {first_line(e)})")
    if gg:
        # The weights are dequantized, plain tensors of the model dtype: nothing of the GGUF
        # quantizer is left in the forward pass, so the model is an ordinary one from here on.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    elif os.path.isdir(a.model):
        check_stored_dtypes(a.model, model)
    model.to(device)
    model.eval()
    return model, tok, device, mdt


def check_stored_dtypes(model_dir, model):
    """transformers casts an integer tensor into a floating-point parameter without a word, which
    would make every activation of the dump meaningless: refuse, naming the file and tensor."""
    floats = {n for n, t in model.state_dict().items() if t.is_floating_point()}
    for f in sorted(os.listdir(model_dir)):
        if not f.endswith(".safetensors"):
            continue
        path = os.path.join(model_dir, f)
        try:
            with open(path, "rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                header = json.loads(fh.read(n))
        except (OSError, ValueError, struct.error):
            continue  # transformers has read it already; its own errors were reported
        for name, e in header.items():
            if name in floats and isinstance(e, dict) and e.get("dtype") in ("I8", "I16", "I32", "I64", "U8", "BOOL"):
                raise InputError(f"--model {model_dir}: {f} stores {name} as {e['dtype']}, where the model has "
                                 f"floating-point weights")


def first_line(e):
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def tokenize(tok, text_path, samples, seq_len, prepare=None):
    """samples × seq_len token ids: each sequence is BOS (when the tokenizer has one) and the next
    text tokens, cut from one pass over the text (after prepare(text), when given)."""
    try:
        with open(text_path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise InputError(f"--text {text_path}: not UTF-8 text (byte {e.start} is 0x{e.object[e.start]:02x})")
    if prepare is not None:
        text = prepare(text)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    bos = getattr(tok, "bos_token_id", None)
    body = seq_len - (1 if bos is not None else 0)
    need = samples * body
    if len(ids) < need:
        raise InputError(f"--text {text_path}: {len(ids):,} tokens, but --samples {samples} × --seq-len {seq_len} "
                         f"needs {need:,}{' (plus BOS each)' if bos is not None else ''}")
    seqs = []
    for s in range(samples):
        chunk = ids[s * body:(s + 1) * body]
        seqs.append(([bos] if bos is not None else []) + chunk)
    return seqs, len(ids)


class Progress:
    """A bar redrawn in place on a terminal; elsewhere (a batch job's log) a line at most every
    30 seconds and at the end, so a cluster job's output stays readable."""

    def __init__(self, total, quiet):
        self.total, self.quiet, self.done, self.start = total, quiet, 0, time.time()
        self.tty = sys.stderr.isatty()
        self.last_line = self.start

    def step(self, what):
        self.done += 1
        if self.quiet:
            return
        now = time.time()
        frac = self.done / self.total
        eta = (now - self.start) / self.done * (self.total - self.done)
        if self.tty:
            bar = "#" * int(30 * frac)
            sys.stderr.write(f"\r[{bar:<30}] {self.done}/{self.total} {what}  eta {eta:5.0f}s")
            if self.done == self.total:
                sys.stderr.write("\n")
        elif now - self.last_line >= 30 or self.done == self.total:
            self.last_line = now
            sys.stderr.write(f"{self.done}/{self.total} {what}, eta {eta:.0f} s\n")
        sys.stderr.flush()


# ---------------------------------------------------------------------------------------------
# The dump


def plan(info, layer_ids, a, tokens):
    """(shard file, [(tensor name, shape)]) for every shard, in writing order."""
    kvh, h, hd = info["kv_heads"], info["heads"], info["head_dim"]
    common = [("positions", (tokens,)), ("sequence_ids", (tokens,)), ("rope.inv_freq", (info["rotary_dim"] // 2,))]
    for lt in per_type_freqs(info):
        common.append((f"rope.inv_freq.{lt}", (info["rotary_dim"] // 2,)))
    shards = [("common.safetensors", common)]
    for lid in layer_ids:
        t = [(f"layers.{lid}.key", (tokens, kvh, hd)), (f"layers.{lid}.value", (tokens, kvh, hd)),
             (f"layers.{lid}.query", (tokens, h, hd))]
        if not a.no_grad:
            t += [(f"layers.{lid}.key_grad", (tokens, kvh, hd)), (f"layers.{lid}.value_grad", (tokens, kvh, hd))]
        if a.post_rope:
            t += [(f"layers.{lid}.key_post", (tokens, kvh, hd)), (f"layers.{lid}.query_post", (tokens, h, hd))]
        shards.append((f"layer_{lid:03d}.safetensors", t))
    return shards


def per_type_freqs(info):
    """Layer types whose frequencies are stored beside rope.inv_freq (rope.inv_freq.TYPE): all of them
    when the types rotate differently (Gemma 3's local and global layers), else none."""
    per = info["rope_per_type"]
    first = next(iter(per.values()))[0]
    if all(bool((v[0] == first).all()) for v in per.values()):
        return []
    return sorted(per)


def tensor_bytes(name, shape, store_size):
    return math.prod(shape) * (8 if name in ("positions", "sequence_ids") else 4 if name.startswith("rope.inv_freq")
                               else store_size)


class Stopped(Exception):
    """A signal asked the exporter to stop (after the sequence in progress)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


class StopSignals:
    """SIGTERM (Slurm's time limit and preemption), SIGHUP and SIGINT ask for a stop: the sequence in
    progress finishes, then the exporter cleans up and exits 128 + the signal's number. A second
    SIGINT (Ctrl-C twice) stops at once."""

    SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")

    def __init__(self):
        self.signum = None
        self.saved = {}

    def __enter__(self):
        import signal
        for name in self.SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None:
                try:
                    self.saved[sig] = signal.signal(sig, self._handle)
                except ValueError:  # not the main thread: signals stay as they were
                    pass
        return self

    def _handle(self, signum, frame):
        import signal
        if self.signum == signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def check(self):
        if self.signum is not None:
            raise Stopped(self.signum)

    def __exit__(self, *exc):
        import signal
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


def staging_path(out):
    """The staging directory of a dump: beside --out (same file system, so the finished dump is
    renamed into place), one per --out, so that a later run finds what an earlier one left."""
    parent = os.path.dirname(os.path.abspath(out)) or "."
    return os.path.join(parent, f".{os.path.basename(os.path.abspath(out))}.dump_kv")


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path, obj):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def claim_staging(stage, a, fingerprint):
    """Takes the staging directory for this run: {"done": sequences finished, "loss_sum", "shards":
    shard files finished}. What another process left is refused while that process lives; once it
    is gone, reused with --resume when it was made with the same settings, else removed (with a
    message either way)."""
    state = {"done": 0, "loss_sum": 0.0, "shards": []}
    if os.path.isdir(stage):
        owner = read_json(os.path.join(stage, "owner.json")) or {}
        pid, host = owner.get("pid"), owner.get("host")
        if isinstance(pid, int) and host == socket_host() and pid != os.getpid() and pid_alive(pid):
            raise InputError(f"--out {a.out}: another dump_kv.py (pid {pid}) is writing it (staging {stage})")
        left = read_json(os.path.join(stage, "progress.json"))
        if a.resume and left and owner.get("fingerprint") == fingerprint:
            state = left
            print(f"dump_kv.py: resuming from {stage}: {state['done']} of {a.samples} sequences done"
                  + (f", {len(state['shards'])} shard files written" if state["shards"] else ""), file=sys.stderr)
        else:
            why = ("it was made with other settings" if a.resume and left else
                   "nothing in it can be resumed" if a.resume else "no --resume")
            print(f"dump_kv.py: removing the staging {stage} left by an earlier run (pid {pid}): {why}",
                  file=sys.stderr)
            shutil.rmtree(stage)
    os.makedirs(os.path.join(stage, "spool"), exist_ok=True)
    os.makedirs(os.path.join(stage, "out"), exist_ok=True)
    write_json(os.path.join(stage, "owner.json"), {"pid": os.getpid(), "host": socket_host(),
                                                   "fingerprint": fingerprint})
    return state


def socket_host():
    import socket
    return socket.gethostname()


def run(a, loaded=None):
    """loaded: (model, tokenizer, device, model dtype) already in memory, instead of --model."""
    model, tok, device, mdt = loaded or load_model(a)
    import torch
    info = describe(model)
    layer_ids = parse_layers(a.layers, info["num_layers"])
    tokens = a.samples * a.seq_len
    tag, size = DTYPES[a.dtype]
    shards = plan(info, layer_ids, a, tokens)
    total = sum(tensor_bytes(n, s, size) for _, ts in shards for n, s in ts)
    if a.dry_run or not a.quiet:
        print(f"{a.model}: {info['model_type']}, {info['num_layers']} layers, {info['heads']} heads, "
              f"{info['kv_heads']} KV heads, head_dim {info['head_dim']}; {a.samples} × {a.seq_len} tokens "
              f"on {device} in {mdt}")
    if a.dry_run:
        for fname, ts in shards:
            for n, s in ts:
                print(f"  {fname:<22} {n:<28} {str(list(s)):<22} {tensor_bytes(n, s, size):>14,} bytes")
        print(f"total {total:,} bytes in {len(shards)} files (nothing written: --dry-run)")
        return 0

    if os.path.exists(a.out) and not a.force:
        raise InputError(f"--out {a.out} exists; pass --force to replace it")
    parent = os.path.dirname(os.path.abspath(a.out)) or "."
    if not os.path.isdir(parent):
        raise InputError(f"--out {a.out}: the directory {parent} does not exist")
    fingerprint = json.dumps({"model": os.path.abspath(a.model) if os.path.exists(a.model) else a.model,
                              "text": os.path.abspath(a.text), "text_bytes": os.path.getsize(a.text),
                              "samples": a.samples, "seq_len": a.seq_len, "layers": layer_ids, "dtype": a.dtype,
                              "model_dtype": mdt, "grad": not a.no_grad, "post_rope": a.post_rope,
                              "tool_version": TOOL_VERSION}, sort_keys=True)
    stage = staging_path(a.out)
    keep = False  # the staging stays only when a stop leaves something to --resume
    with StopSignals() as stop:
        try:
            state = claim_staging(stage, a, fingerprint)
            keep = a.resume
            spool, out_dir = os.path.join(stage, "spool"), os.path.join(stage, "out")
            # Per sequence, each spool file grows by its tensor's bytes for seq_len rows.
            per_seq = {n: tensor_bytes(n, s, size) // a.samples for fname, ts in shards[1:] for n, s in ts}
            # The peak: the whole spool, plus the largest shard while it is copied out of it.
            written = sum(per_seq[n] * state["done"] for n in per_seq)
            need = total + max(sum(tensor_bytes(n, s, size) for n, s in ts) for _, ts in shards) - written
            free = shutil.disk_usage(stage).free
            if need > free:
                raise InputError(f"--out {a.out}: the dump needs {need:,} more bytes at its peak (spool and "
                                 f"shards), {parent} has {free:,} free")
            seqs, text_tokens = tokenize(tok, a.text, a.samples, a.seq_len)
            loss_sum = run_sequences(a, model, device, info, layer_ids, seqs, state, spool, per_seq, stop, stage)
            metadata = {
                "format": "gsrq-kv-dump", "format_version": 1, "model": a.model, "model_type": info["model_type"],
                "num_layers": info["num_layers"], "layers": ",".join(map(str, layer_ids)),
                "num_heads": info["heads"], "num_kv_heads": info["kv_heads"], "head_dim": info["head_dim"],
                "key_rope": "pre", "rope_theta": info["rope_theta"], "rope_pairing": "half",
                "rope_attention_scaling": info["rope_scaling"], "dtype": a.dtype, "model_dtype": mdt,
                "text": os.path.basename(a.text), "text_tokens": text_tokens, "tokens": tokens,
                "samples": a.samples, "seq_len": a.seq_len, "gradients": "none" if a.no_grad else
                "d(summed next-token cross-entropy)/d(projection output)",
                "mean_loss": loss_sum / (a.samples * (a.seq_len - 1)),
                "tool": "dump_kv.py", "tool_version": TOOL_VERSION, "rotary_dim": info["rotary_dim"],
                "post_rope_source": state.get("post_rope_source", "none"), **info["extra"],
            }
            pos = torch.arange(a.seq_len, dtype=torch.int64).repeat(a.samples).numpy().tobytes()
            sid = torch.arange(a.samples, dtype=torch.int64).repeat_interleave(a.seq_len).numpy().tobytes()
            inv = info["inv_freq"].to(torch.float32).numpy().tobytes()
            for fname, ts in shards:
                if fname in state["shards"]:
                    continue
                stop.check()
                entries = []
                for n, s in ts:
                    if n == "positions":
                        entries.append((n, "I64", s, pos))
                    elif n == "sequence_ids":
                        entries.append((n, "I64", s, sid))
                    elif n == "rope.inv_freq":
                        entries.append((n, "F32", s, inv))
                    elif n.startswith("rope.inv_freq."):
                        entries.append((n, "F32", s, info["rope_per_type"][n[len("rope.inv_freq."):]][0]
                                        .to(torch.float32).numpy().tobytes()))
                    else:
                        entries.append((n, tag, s, os.path.join(spool, n)))
                write_safetensors(os.path.join(out_dir, fname), entries, metadata)
                state["shards"].append(fname)
                write_json(os.path.join(stage, "progress.json"), state)
                for n, _, _, src in entries:
                    if isinstance(src, str):
                        os.remove(src)  # the spool shrinks as shards are written
            written = sum(os.path.getsize(os.path.join(out_dir, f)) for f, _ in shards)
            if os.path.exists(a.out):
                shutil.rmtree(a.out)
            os.rename(out_dir, a.out)
            keep = False
            if not a.quiet:
                print(f"wrote {a.out}: {len(shards)} files, {written:,} bytes; mean next-token loss "
                      f"{metadata['mean_loss']:.4f}")
            return 0
        except Stopped as e:
            import signal
            name = signal.Signals(e.signum).name
            done = read_json(os.path.join(stage, "progress.json")) or {"done": 0}
            if keep:
                print(f"dump_kv.py: stopped by {name} after {done['done']} of {a.samples} sequences; the staging "
                      f"{stage} is kept: run the same command with --resume to continue", file=sys.stderr)
            else:
                print(f"dump_kv.py: stopped by {name} after {done['done']} of {a.samples} sequences; nothing was "
                      f"kept (--resume keeps what a later run can continue from)", file=sys.stderr)
            return 128 + e.signum
        finally:
            if not keep:
                shutil.rmtree(stage, ignore_errors=True)


def run_sequences(a, model, device, info, layer_ids, seqs, state, spool, per_seq, stop, stage):
    """Runs the sequences not yet done, appending each one's tensors to the spool files and then
    recording it as done in progress.json, so a resumed run continues from a finished sequence
    (a spool file longer than its done sequences, from a kill mid-sequence, is cut back)."""
    import torch
    want_grad = not a.no_grad
    store_dtype = torch_dtype(torch, a.dtype)
    files = {}
    for n, per in per_seq.items():
        path = os.path.join(spool, n)
        f = open(path, "r+b" if os.path.exists(path) else "wb")
        f.truncate(per * state["done"])
        f.seek(per * state["done"])
        files[n] = f

    def put(name, t):
        # [1, T, F] or [1, T, H, hd] -> contiguous little-endian bytes of [T, F] in the stored dtype
        t = t.detach().reshape(t.shape[1], -1).to(store_dtype).contiguous().cpu()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)  # NumPy has no bfloat16; the bytes are what the file holds
        files[name].write(t.numpy().tobytes())

    rec = Recorder(info["layers"], layer_ids, want_grad, info["heads"], info["kv_heads"], info["head_dim"])
    capture = AttentionCapture(model, layer_ids) if a.post_rope else None
    frozen = None
    try:
        frozen = ActivationGradients(model) if want_grad else None
        loss_sum = state["loss_sum"]
        progress = Progress(a.samples - state["done"], a.quiet)
        positions = torch.arange(a.seq_len)
        for si in range(state["done"], a.samples):
            stop.check()
            x = torch.tensor([seqs[si]], device=device)
            model.zero_grad(set_to_none=True)
            with torch.set_grad_enabled(want_grad):
                # use_cache=False: transformers 5 would build a KV cache on every forward
                out = model(input_ids=x, labels=x, use_cache=False)
                # transformers' loss is the mean over the T−1 predicted tokens; the dump's gradients
                # are of the sum, as in the bundled sample
                loss = out.loss * (a.seq_len - 1)
                if want_grad:
                    loss.backward()
            loss_sum += float(loss.detach())
            for lid in layer_ids:
                q, k, v, kg, vg = rec.tensors(lid)
                put(f"layers.{lid}.key", k)
                put(f"layers.{lid}.value", v)
                put(f"layers.{lid}.query", q)
                if want_grad:
                    for kind, t, g in (("key", k, kg), ("value", v, vg)):
                        put(f"layers.{lid}.{kind}_grad", g if g is not None else torch.zeros_like(t))
                if a.post_rope:
                    hd = info["head_dim"]
                    qp = capture.take(lid, "query") if capture.active else None
                    kp = capture.take(lid, "key") if capture.active else None
                    if kp is None or qp is None:
                        inv, scale = info["rope_per_type"][info["layer_types"][lid]]
                        kp = rope_post(k.detach().reshape(a.seq_len, -1, hd).cpu(), positions, inv, scale)
                        qp = rope_post(q.detach().reshape(a.seq_len, -1, hd).cpu(), positions, inv, scale)
                    put(f"layers.{lid}.key_post", kp[None])
                    put(f"layers.{lid}.query_post", qp[None])
            rec.clear()
            for f in files.values():
                f.flush()
                os.fsync(f.fileno())
            state["done"], state["loss_sum"] = si + 1, loss_sum
            if capture is not None:
                state["post_rope_source"] = ("attention inputs" if capture.active else
                                             "recomputed from rope.inv_freq")
            write_json(os.path.join(stage, "progress.json"), state)
            progress.step(f"sequence {si + 1}")
        return loss_sum
    finally:
        rec.remove()
        if frozen is not None:
            frozen.remove()
        if capture is not None:
            capture.remove()
        for f in files.values():
            f.close()


def main(argv=None, loaded=None):
    try:
        a = parse_args(argv)
        return run(a, loaded)
    except InputError as e:
        print(f"dump_kv.py: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        import errno
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            print(f"dump_kv.py: disk full writing {e.filename or 'the dump'}: {e.strerror}; --out was not "
                  f"written", file=sys.stderr)
            return 1
        raise
    except KeyboardInterrupt:
        print("dump_kv.py: interrupted (Ctrl-C twice); --out was not written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
