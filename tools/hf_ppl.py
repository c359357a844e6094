#!/usr/bin/env python3
"""Perplexity of a Hugging Face causal LM with its KV cache replaced by GSRQ codebooks' reconstructions:
`gsrq ppl` for the models tools/dump_kv.py dumps, run where torch and transformers are.

    python3 tools/hf_ppl.py --model DIR (--text FILE | --generate [--seed S]) [--seq-len 256] [--sequences 16]
                            [-c CODEBOOKS ...] [--device cuda] [--json]

The same method as `gsrq ppl`: S sequences of T tokens (BOS, then the re-flowed text's next T − 1 tokens, or
T − 1 tokens sampled from the unquantized model at temperature 1); perplexity = exp(mean next-token
loss). For each codebooks file, forward hooks on the modules whose outputs are the keys (before
RoPE) and values (tools/dump_kv.py's producers: k_proj / k_norm, v_proj, Phi-3's fused qkv_proj)
replace each row [kv_heads · head_dim] by its greedy residual encoding's reconstruction, stage by
stage per subspace (files trained with a beam are encoded greedily here: say so in comparisons).
Keys trained after RoPE (key_rope = post) are rotated, reconstructed and rotated back.
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
    strided = [n for n in names if n + ".order" in tensor.names]
    if strided:
        raise InputError(f"--codebooks {path}: {strided[0]} quantizes strided channel groups (T.order, gsrq train "
                         "--method vqllm), which hf_ppl.py does not apply; measure it with gsrq ppl")
    books = {}
    for n in names:
        try:
            books[n] = tensor(n + ".codebooks").astype("float32")
        except KeyError:
            raise InputError(f"--codebooks {path}: lists {n} but holds no {n}.codebooks")
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


class CodebookHooks:
    """Forward hooks that replace each recorded layer's keys and values by their reconstruction."""

    def __init__(self, model, info, meta, books, torch, device):
        self.handles = []
        hd, heads, kvh = info["head_dim"], info["heads"], info["kv_heads"]
        post = meta.get("key_rope") == "post"
        # Codebooks trained on keys whose RoPE pairs are interleaved (llama2.c's, as in gsrq's bundled
        # sample) see the features of each head in another order than transformers' rotate-half
        # models: feature j of such a model is the codebooks' feature from_pairs[j].
        interleaved = meta.get("rope_pairing", "half") == "interleaved"
        from_pairs = torch.arange(hd).reshape(hd // 2, 2).T.reshape(-1)
        to_pairs = torch.argsort(from_pairs)
        tb = {n: torch.tensor(b, device=device) for n, b in books.items()}
        features = kvh * hd
        for n, b in books.items():
            if b.shape[0] * b.shape[3] != features:
                raise InputError(f"codebooks for {n} cover {b.shape[0] * b.shape[3]} features; the model's keys "
                                 f"and values have {features} (kv_heads × head_dim): codebooks of another model?")
        for lid, layer in enumerate(info["layers"]):
            kb, vb = tb.get(f"layers.{lid}.key"), tb.get(f"layers.{lid}.value")
            if kb is None and vb is None:
                continue
            prods = dump_kv.producers(layer.self_attn)

            inv, _ = info["rope_per_type"][info["layer_types"][lid]]

            def fix_keys(k, kb=kb, inv=inv):
                T = k.shape[0]
                pos = torch.arange(T)
                x = k
                if post:
                    x = dump_kv.rope_post(x.reshape(T, kvh, hd).cpu(), pos, inv).reshape(T, -1).to(k)
                if interleaved:  # the model's rotate-half features in the codebooks' pair order
                    x = x.reshape(T, kvh, hd)[..., to_pairs].reshape(T, -1)
                x = reconstruct(x, kb, torch)
                if interleaved:
                    x = x.reshape(T, kvh, hd)[..., from_pairs].reshape(T, -1)
                if post:
                    x = dump_kv.rope_post(x.reshape(T, kvh, hd).cpu(), -pos, inv).reshape(T, -1).to(k)
                return x

            def replace(kind, fixer):
                def hook(module, inputs, output):
                    flat = output.reshape(output.shape[0], output.shape[1], -1)
                    rows = flat[0].float()
                    if kind == "qkv":
                        nq, nk = heads * hd, kvh * hd
                        new = rows.clone()
                        if kb is not None:
                            new[:, nq:nq + nk] = fix_keys(rows[:, nq:nq + nk])
                        if vb is not None:
                            new[:, nq + nk:nq + 2 * nk] = reconstruct(rows[:, nq + nk:nq + 2 * nk], vb, torch)
                    else:
                        new = fixer(rows)
                    return new.to(output.dtype).reshape(output.shape)
                return hook
            if "qkv" in prods:
                self.handles.append(prods["qkv"].register_forward_hook(replace("qkv", None)))
                continue
            if kb is not None:
                self.handles.append(prods["key"].register_forward_hook(replace("key", fix_keys)))
            if vb is not None:
                self.handles.append(prods["value"].register_forward_hook(
                    replace("value", lambda v, vb=vb: reconstruct(v, vb, torch))))

    def remove(self):
        for h in self.handles:
            h.remove()


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
    ap.add_argument("--device", default="auto")
    ap.add_argument("--model-dtype", choices=("auto", "f32", "bf16", "f16"), default="f32")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        if bool(a.text) == a.generate:
            raise InputError("give --text FILE or --generate")
        if a.seq_len < 2 or a.sequences < 1:
            raise InputError("--seq-len must be at least 2 and --sequences at least 1")
        files = [(p, *load_codebooks(p)) for p in a.codebooks]
        # dump_kv's loader: the same model families, devices and dtypes.
        a.layers, a.post_rope = "", False
        model, tok, device, mdt = loaded or dump_kv.load_model(a)
        import torch
        info = dump_kv.describe(model)
        if a.generate:
            bos = getattr(tok, "bos_token_id", None)
            seqs = generate(model, bos if bos is not None else 0, a.seq_len, a.sequences, a.seed, device, torch)
        else:
            if not os.path.isfile(a.text):
                raise InputError(f"--text {a.text}: no such file")
            seqs, _ = dump_kv.tokenize(tok, a.text, a.sequences, a.seq_len, prepare=reflow)
        fp32 = perplexity(model, seqs, device, torch)
        rows = [{"codebooks": "unquantized", "method": "-", "bpa": None, "perplexity": fp32}]
        for path, meta, books in files:
            hooks = CodebookHooks(model, info, meta, books, torch, device)
            try:
                ppl = perplexity(model, seqs, device, torch)
            finally:
                hooks.remove()
            bpa = float(meta["bpa"]) if "bpa" in meta else None
            rows.append({"codebooks": path, "method": meta.get("method", "-"), "bpa": bpa, "perplexity": ppl,
                         "beam_in_training": int(meta.get("beam", "1"))})
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
