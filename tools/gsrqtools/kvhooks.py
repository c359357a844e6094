"""Forward hooks on a Hugging Face model's keys and values: the exporter's (which modules produce q,
k and v, recording them and the loss gradients, the attention function that sees them after RoPE)
and the replacing hooks of perplexity (codebooks' reconstructions, KIVI)."""
import re
import sys

from gsrqtools.codebooks import reconstruct
from gsrqtools.hf import InputError
from gsrqtools.kivi import kivi_quantize
from gsrqtools.rope import rope_of, rope_post

CAPTURE = "gsrq_capture"  # the attention function registered to see the model's post-RoPE q and k


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


class KvHooks:
    """Forward hooks that replace each chosen layer's keys (before RoPE) and values by what a method
    makes of them: key_fn(rows [T, kv_heads·head_dim], layer) and value_fn(rows, layer), either None
    for "as they are". The producers' outputs come in whichever layout the family and release give:
    [1, T, features] from a projection, [1, T, kv_heads, head_dim] or heads first, [1, kv_heads, T,
    head_dim], from a per-head norm (transformers 5 normalises some families after the transpose);
    the token count is the attention's input's, read by a pre-hook. An output that cannot be placed
    (a batch other than 1, or T = kv_heads with a 4-D output, which is ambiguous) is refused."""

    def __init__(self, model, info, layers, key_fn, value_fn):
        self.handles = []
        self.heads, self.kvh, self.hd = info["heads"], info["kv_heads"], info["head_dim"]
        for lid, layer in enumerate(info["layers"]):
            if lid in layers:
                self._attach(lid, layer.self_attn, key_fn, value_fn)

    def _attach(self, lid, attn, key_fn, value_fn):
        heads, kvh, hd = self.heads, self.kvh, self.hd
        prods = producers(attn)
        state = {}

        def pre(module, args, kwargs):
            h = kwargs.get("hidden_states", args[0] if args else None)
            state["T"] = int(h.shape[-2]) if h is not None else None
        self.handles.append(attn.register_forward_pre_hook(pre, with_kwargs=True))

        def rows_of(output, width, what):
            """(rows [T, width] float32, a function putting rows back in output's layout)."""
            T = state.get("T")
            shape = tuple(output.shape)
            if output.shape[0] != 1:
                raise InputError(f"layer {lid}: the {what} come in a batch of {shape[0]}; perplexity runs one "
                                 "sequence at a time")
            if output.dim() == 3 and shape[1] == T:
                return output[0].float(), lambda r: r.to(output.dtype).reshape(shape)
            if output.dim() == 4 and T is not None and shape[1] != shape[2]:
                if shape[1] == T:
                    return output[0].reshape(T, -1).float(), lambda r: r.to(output.dtype).reshape(shape)
                if shape[2] == T:
                    t = output[0].transpose(0, 1)
                    return (t.reshape(T, -1).float(),
                            lambda r: r.to(output.dtype).reshape(T, shape[1], shape[3]).transpose(0, 1)
                            .reshape(shape))
            raise InputError(f"layer {lid}: cannot place the {what} of shape {list(shape)} as tokens × features "
                             f"({T} tokens, {width} features): a layout hf_ppl.py does not know"
                             + (" (with as many tokens as KV heads: use another --seq-len)" if T == kvh else ""))

        def hook_for(kind):
            def hook(module, inputs, output):
                if kind == "qkv":
                    rows, back = rows_of(output, (heads + 2 * kvh) * hd, "fused q, k and v")
                    nq, nk = heads * hd, kvh * hd
                    new = rows.clone()
                    if key_fn is not None:
                        new[:, nq:nq + nk] = key_fn(rows[:, nq:nq + nk], lid)
                    if value_fn is not None:
                        new[:, nq + nk:nq + 2 * nk] = value_fn(rows[:, nq + nk:nq + 2 * nk], lid)
                    return back(new)
                rows, back = rows_of(output, kvh * hd, "keys" if kind == "key" else "values")
                return back((key_fn if kind == "key" else value_fn)(rows, lid))
            return hook
        if "qkv" in prods:
            if key_fn is not None or value_fn is not None:
                self.handles.append(prods["qkv"].register_forward_hook(hook_for("qkv")))
            return
        if key_fn is not None:
            self.handles.append(prods["key"].register_forward_hook(hook_for("key")))
        if value_fn is not None:
            self.handles.append(prods["value"].register_forward_hook(hook_for("value")))

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def CodebookHooks(model, info, meta, books, torch, device):
    """KvHooks whose keys and values are each recorded layer's codebooks' reconstruction: greedy
    residual encoding per subspace (a strided file's features in its order), keys after RoPE where the
    codebooks were trained there (key_rope = post), in the pair order they were trained in."""
    hd, kvh = info["head_dim"], info["kv_heads"]
    post = meta.get("key_rope") == "post"
    # Codebooks trained on keys whose RoPE pairs are interleaved (llama2.c's, as in gsrq's bundled
    # sample) see the features of each head in another order than transformers' rotate-half
    # models: feature j of such a model is the codebooks' feature from_pairs[j].
    interleaved = meta.get("rope_pairing", "half") == "interleaved"
    from_pairs = torch.arange(hd).reshape(hd // 2, 2).T.reshape(-1)
    to_pairs = torch.argsort(from_pairs)
    tb = {n: torch.tensor(b, device=device) for n, b in books.items()}
    orders = {n: torch.tensor(o, device=device, dtype=torch.long) for n, o in meta.get("_orders", {}).items()}
    features = kvh * hd
    for n, b in books.items():
        if b.shape[0] * b.shape[3] != features:
            raise InputError(f"codebooks for {n} cover {b.shape[0] * b.shape[3]} features; the model's keys "
                             f"and values have {features} (kv_heads × head_dim): codebooks of another model?")

    def rebuild(x, name):
        order = orders.get(name)
        if order is None:
            return reconstruct(x, tb[name], torch)
        out = torch.empty_like(x)
        out[:, order] = reconstruct(x[:, order], tb[name], torch)
        return out

    def keys(k, lid):
        name = f"layers.{lid}.key"
        if name not in tb:
            return k
        T = k.shape[0]
        pos = torch.arange(T)
        x = k
        if post:
            x = rope_post(x.reshape(T, kvh, hd).cpu(), pos, rope_of(info, lid)).reshape(T, -1).to(k)
        if interleaved:  # the model's rotate-half features in the codebooks' pair order
            x = x.reshape(T, kvh, hd)[..., to_pairs].reshape(T, -1)
        x = rebuild(x, name)
        if interleaved:
            x = x.reshape(T, kvh, hd)[..., from_pairs].reshape(T, -1)
        if post:
            x = rope_post(x.reshape(T, kvh, hd).cpu(), -pos, rope_of(info, lid)).reshape(T, -1).to(k)
        return x

    def values(v, lid):
        name = f"layers.{lid}.value"
        return rebuild(v, name) if name in tb else v

    layers = {int(n.split(".")[1]) for n in books if re.fullmatch(r"layers\.\d+\.(key|value)", n)}
    return KvHooks(model, info, layers, keys, values)


def KiviHooks(model, info, layers, bits, group, residual, torch, counts):
    """KvHooks applying KIVI to the keys as the cache holds them (after RoPE: rotated, quantized, rotated
    back, as `gsrq ppl` does) and to the values."""
    hd, kvh = info["head_dim"], info["kv_heads"]
    if (kvh * hd) % group:
        raise InputError(f"--methods kivi-{bits}g{group}: the group does not divide the values' {kvh * hd} channels")

    def keys(k, lid):
        T = k.shape[0]
        pos = torch.arange(T)
        inv = rope_of(info, lid)
        rot = rope_post(k.reshape(T, kvh, hd).cpu(), pos, inv).reshape(T, -1)
        q = kivi_quantize(rot, "key", bits, group, residual, torch, counts)
        return rope_post(q.reshape(T, kvh, hd), -pos, inv).reshape(T, -1).to(k)

    def values(v, lid):
        return kivi_quantize(v.cpu(), "value", bits, group, residual, torch, counts).to(v)

    return KvHooks(model, info, layers, keys, values)
