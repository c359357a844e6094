#!/usr/bin/env python3
"""Perplexity of a Hugging Face causal LM with its KV cache replaced by GSRQ codebooks' reconstructions
or by KIVI: `gsrq ppl` for the models tools/dump_kv.py dumps, run where torch and transformers are.

    python3 tools/hf_ppl.py --model DIR|FILE.gguf (--text FILE | --generate [--seed S]) [--seq-len 256]
                            [--sequences 16] [-c CODEBOOKS ...] [--methods kivi-2,kivi-1 [--layers 0-3]]
                            [--device cuda] [--json]

The same method as `gsrq ppl`: S sequences of T tokens (BOS, then the re-flowed text's next T − 1 tokens, or
T − 1 tokens sampled from the unquantized model at temperature 1); perplexity = exp(mean next-token
loss). For each codebooks file, forward hooks on the modules whose outputs are the keys (before
RoPE) and values (tools/dump_kv.py's producers: k_proj / k_norm, v_proj, Phi-3's fused qkv_proj)
replace each row [kv_heads · head_dim] by its greedy residual encoding's reconstruction, stage by
stage per subspace (files trained with a beam are encoded greedily here: say so in comparisons).
Keys trained after RoPE (key_rope = post) are rotated, reconstructed and rotated back; files of
strided channel groups (vqllm, T.order) are applied in their order. --methods kivi-B[gG][rN] runs
KIVI as `gsrq ppl` does (keys per channel after RoPE, values per token, FP16 scales and zeros; bits
reported honestly). The hooks take the keys in every layout the exporter takes (tokens or heads
first) and refuse, naming the layer, one they cannot place. --model is what tools/dump_kv.py takes,
a GGUF file included.
Exit codes: 0 done, 2 bad input (named).
"""
import argparse
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "docs"))
import dump_kv  # noqa: E402
import gsrq_decode  # noqa: E402

InputError = dump_kv.InputError


def load_codebooks(path):
    """{tensor: [M, R, K, D] float32 array} and the metadata of a codebooks file."""
    try:
        meta, tensor = gsrq_decode.load(path)
    except (OSError, AssertionError, ValueError, KeyError) as e:
        raise InputError(f"--codebooks {path}: not a GSRQ codebooks file ({e})")
    names = [n.strip() for n in meta.get("tensors", "").split(",") if n.strip()]
    books, orders = {}, {}
    for n in names:
        try:
            books[n] = tensor(n + ".codebooks").astype("float32")
        except KeyError:
            raise InputError(f"--codebooks {path}: lists {n} but holds no {n}.codebooks")
        if n + ".order" in tensor.names:  # strided channel groups (gsrq train --method vqllm)
            order = tensor(n + ".order").astype("int64").reshape(-1)
            M, _, _, D = books[n].shape
            if sorted(order.tolist()) != list(range(M * D)):
                raise InputError(f"--codebooks {path}: {n}.order is not a permutation of its {M * D} features")
            orders[n] = order
    meta = dict(meta)
    meta["_orders"] = orders
    return meta, books


def reconstruct(x, books, torch):
    """Greedy residual encoding of rows x [N, M·D] with books [M, R, K, D]; returns the reconstruction."""
    M, R, K, D = books.shape
    out = torch.empty_like(x)
    for m in range(M):
        res = x[:, m * D:(m + 1) * D].clone()
        for r in range(R):
            c = books[m, r]  # K × D
            idx = ((res * res).sum(1, keepdim=True) - 2 * res @ c.T + (c * c).sum(1)[None]).argmin(1)
            res -= c[idx]
        out[:, m * D:(m + 1) * D] = x[:, m * D:(m + 1) * D] - res
    return out


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
        prods = dump_kv.producers(attn)
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


def rope_of(info, lid):
    inv, _ = info["rope_per_type"][info["layer_types"][lid]]
    return inv


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
            x = dump_kv.rope_post(x.reshape(T, kvh, hd).cpu(), pos, rope_of(info, lid)).reshape(T, -1).to(k)
        if interleaved:  # the model's rotate-half features in the codebooks' pair order
            x = x.reshape(T, kvh, hd)[..., to_pairs].reshape(T, -1)
        x = rebuild(x, name)
        if interleaved:
            x = x.reshape(T, kvh, hd)[..., from_pairs].reshape(T, -1)
        if post:
            x = dump_kv.rope_post(x.reshape(T, kvh, hd).cpu(), -pos, rope_of(info, lid)).reshape(T, -1).to(k)
        return x

    def values(v, lid):
        name = f"layers.{lid}.value"
        return rebuild(v, name) if name in tb else v

    layers = {int(n.split(".")[1]) for n in books if re.fullmatch(r"layers\.\d+\.(key|value)", n)}
    return KvHooks(model, info, layers, keys, values)


def parse_kivi(name):
    """kivi-B[gG][rN] as `gsrq ppl --methods` reads it: (bits, group, residual)."""
    m = re.fullmatch(r"kivi-(\d{1,2})(?:g(\d{1,6}))?(?:r(\d{1,7}))?", name)
    if not m:
        raise InputError(f"--methods: '{name}' is not a KIVI setting (kivi-B, kivi-BgG or kivi-BgGrN, e.g. kivi-2g32r128)")
    bits, group, residual = int(m.group(1)), int(m.group(2) or 32), int(m.group(3) or 0)
    if not 1 <= bits <= 8:
        raise InputError(f"--methods: '{name}': KIVI's bits must be between 1 and 8")
    if group < 1:
        raise InputError(f"--methods: '{name}': the group must be at least 1")
    return bits, group, residual


def kivi_groups(x, bits, torch):
    """Asymmetric round-to-nearest over the last axis of x [..., n]: min and scale in FP16, as gsrq's
    KIVI (core/cluster/kivi.cpp) stores them."""
    lo, hi = x.min(-1, keepdim=True).values, x.max(-1, keepdim=True).values
    levels = float((1 << bits) - 1)
    zero = lo.half().float()
    scale = ((hi - lo) / levels).half().float()
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.clamp(torch.round((x - zero) / safe), 0, levels)
    return torch.where(scale > 0, q * scale + zero, zero.expand_as(x))


def kivi_quantize(x, axis, bits, group, residual, torch, counts):
    """KIVI on the rows [T, F] of one sequence, as core/cluster/kivi.cpp: keys per channel over groups of
    G tokens (tokens before the FP16 window that do not fill a group stay FP16), values per token over
    groups of G channels; the last `residual` tokens in FP16. Adds to counts (honest bits)."""
    T, F = x.shape
    quantized = max(0, T - residual)
    y = x.clone()
    if axis == "key":
        quantized -= quantized % group
        if quantized:
            blocks = x[:quantized].reshape(quantized // group, group, F).transpose(1, 2)  # [g, F, G]
            y[:quantized] = kivi_groups(blocks, bits, torch).transpose(1, 2).reshape(quantized, F)
        counts["groups"] += quantized // group * F
    else:
        if F % group:
            raise InputError(f"--methods kivi: the group {group} does not divide the values' {F} channels")
        if quantized:
            y[:quantized] = kivi_groups(x[:quantized].reshape(quantized, F // group, group), bits,
                                        torch).reshape(quantized, F)
        counts["groups"] += quantized * (F // group)
    y[quantized:] = x[quantized:].half().float()
    counts["quantized"] += quantized * F
    counts["fp16"] += (T - quantized) * F
    return y


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
        rot = dump_kv.rope_post(k.reshape(T, kvh, hd).cpu(), pos, inv).reshape(T, -1)
        q = kivi_quantize(rot, "key", bits, group, residual, torch, counts)
        return dump_kv.rope_post(q.reshape(T, kvh, hd), -pos, inv).reshape(T, -1).to(k)

    def values(v, lid):
        return kivi_quantize(v.cpu(), "value", bits, group, residual, torch, counts).to(v)

    return KvHooks(model, info, layers, keys, values)


def reflow(text):
    """As `gsrq ppl` reads a text: paragraphs (separated by blank lines) joined by "\n", runs of white
    space inside one collapsed to a space."""
    ws = " \t\n\r\f\v"  # C's isspace, as gsrq's reader: a no-break space is not white space here
    paras = [re.sub(f"[{ws}]+", " ", p).strip(ws) for p in re.split(r"\n[ \t\r\f\v]*\n", text)]
    return "\n".join(p for p in paras if p)


def perplexity(model, seqs, device, torch):
    nll, n = 0.0, 0
    with torch.no_grad():
        for s in seqs:
            x = torch.tensor([s], device=device)
            nll += float(model(input_ids=x, labels=x, use_cache=False).loss) * (len(s) - 1)
            n += len(s) - 1
    return math.exp(nll / n)


def generate(model, bos, seq_len, sequences, seed, device, torch):
    g = torch.Generator(device="cpu").manual_seed(seed)
    out = []
    with torch.no_grad():
        for _ in range(sequences):
            s = [bos]
            while len(s) < seq_len:
                logits = model(input_ids=torch.tensor([s], device=device)).logits[0, -1].float().cpu()
                s.append(int(torch.multinomial(torch.softmax(logits, -1), 1, generator=g)))
            out.append(s)
    return out


def main(argv=None, loaded=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--text")
    ap.add_argument("--generate", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--sequences", type=int, default=16)
    ap.add_argument("-c", "--codebooks", action="append", default=[])
    ap.add_argument("--methods", default="", help="training-free methods, comma-separated: kivi-B[gG][rN]")
    ap.add_argument("--layers", default="",
                    help="layers KIVI and the codebooks quantize, e.g. 0-3,7 (default: all; as gsrq ppl --layers)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--model-dtype", choices=("auto", "f32", "bf16", "f16"), default="f32")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--save-token-ids", metavar="FILE",
                    help="write the measured sequences' token ids, one sequence per line (gsrq ppl --token-ids)")
    a = ap.parse_args(argv)
    try:
        if bool(a.text) == a.generate:
            raise InputError("give --text FILE or --generate")
        if a.seq_len < 2 or a.sequences < 1:
            raise InputError("--seq-len must be at least 2 and --sequences at least 1")
        files = [(p, *load_codebooks(p)) for p in a.codebooks]
        kivis = [(m, parse_kivi(m)) for m in (x.strip() for x in a.methods.split(",")) if m and m != "fp32"]
        # dump_kv's loader: the same model families, devices and dtypes.
        a.post_rope = False
        model, tok, device, mdt = loaded or dump_kv.load_model(a, seq_len=a.seq_len, backward=False)
        import torch
        info = dump_kv.describe(model)
        kivi_layers = set(dump_kv.parse_layers(a.layers, info["num_layers"]))
        if a.generate:
            bos = getattr(tok, "bos_token_id", None)
            seqs = generate(model, bos if bos is not None else 0, a.seq_len, a.sequences, a.seed, device, torch)
        else:
            if not os.path.isfile(a.text):
                raise InputError(f"--text {a.text}: no such file")
            seqs, _ = dump_kv.tokenize(tok, a.text, a.sequences, a.seq_len, prepare=reflow)
        if a.save_token_ids:
            tmp = a.save_token_ids + ".tmp"
            with open(tmp, "w") as f:
                for q in seqs:
                    f.write(" ".join(str(int(t)) for t in q) + "\n")
            os.replace(tmp, a.save_token_ids)
        fp32 = perplexity(model, seqs, device, torch)
        rows = [{"codebooks": "unquantized", "method": "-", "bpa": None, "perplexity": fp32}]
        for path, meta, books in files:
            if a.layers:  # only the chosen layers' codebooks, as gsrq ppl --layers
                books = {n: b for n, b in books.items() if n.startswith("layers.")
                         and n.split(".")[1].isdigit() and int(n.split(".")[1]) in kivi_layers}
            hooks = CodebookHooks(model, info, meta, books, torch, device)
            try:
                ppl = perplexity(model, seqs, device, torch)
            finally:
                hooks.remove()
            bpa = float(meta["bpa"]) if "bpa" in meta else None
            rows.append({"codebooks": path, "method": meta.get("method", "-"), "bpa": bpa, "perplexity": ppl,
                         "beam_in_training": int(meta.get("beam", "1"))})
        for name, (bits, group, residual) in kivis:
            counts = {"quantized": 0, "fp16": 0, "groups": 0}
            hooks = KiviHooks(model, info, kivi_layers, bits, group, residual, torch, counts)
            try:
                ppl = perplexity(model, seqs, device, torch)
            finally:
                hooks.remove()
            values = counts["quantized"] + counts["fp16"]
            honest = (counts["quantized"] * bits + counts["groups"] * 32 + counts["fp16"] * 16) / max(values, 1)
            rows.append({"codebooks": name, "method": "kivi", "bpa": honest, "perplexity": ppl,
                         "kivi": {"bits": bits, "group": group, "residual": residual}})
        for r in rows:
            r["delta_percent"] = 100 * (r["perplexity"] - fp32) / fp32
        if a.json:
            print(json.dumps({"model": a.model, "model_dtype": mdt, "source": "generate" if a.generate else a.text,
                              "seq_len": a.seq_len, "sequences": a.sequences, "results": rows}, indent=1))
        else:
            print(f"{a.model} ({mdt}): {a.sequences} × {a.seq_len} tokens of "
                  f"{'its own samples, seed ' + str(a.seed) if a.generate else a.text}")
            for r in rows:
                bits = f"{r['bpa']:g}" if r["bpa"] is not None else "-"
                print(f"  {r['codebooks']:<36} {r['method']:<6} {bits:>5} {r['perplexity']:10.4f} "
                      f"{r['delta_percent']:+7.2f}%")
        return 0
    except InputError as e:
        print(f"hf_ppl.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
