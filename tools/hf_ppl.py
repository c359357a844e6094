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
reported honestly). Each row carries its sequences' mean NLL per token (sequence_nll) and a paired bootstrap
95% interval of its Δ% against FP32 (delta_percent_interval; tools/gsrqtools/stats.py). The hooks take the keys in every layout the exporter takes (tokens or heads
first) and refuse, naming the layer, one they cannot place. --model is what tools/dump_kv.py takes,
a GGUF file included.
Exit codes: 0 done, 2 bad input (named).
"""
import argparse
import json
import math
import os
import sys

from gsrqtools import hf, stats
from gsrqtools.codebooks import load_codebooks, reconstruct  # noqa: F401
from gsrqtools.hf import InputError
from gsrqtools.kivi import parse_kivi
from gsrqtools.kvhooks import CodebookHooks, KiviHooks, KvHooks  # noqa: F401
from gsrqtools.texts import reflow


def sequence_nll(model, seqs, device, torch):
    """Each sequence's mean NLL per predicted token (natural log), in order: the paired bootstrap's input."""
    out = []
    with torch.no_grad():
        for s in seqs:
            x = torch.tensor([s], device=device)
            out.append(float(model(input_ids=x, labels=x, use_cache=False).loss))
    return out


def perplexity(model, seqs, device, torch):
    """The perplexity of every predicted token of seqs together."""
    return perplexity_of(sequence_nll(model, seqs, device, torch), sequence_tokens(seqs))


def sequence_tokens(seqs):
    return [len(s) - 1 for s in seqs]


def perplexity_of(nll, tokens):
    """exp of the token-weighted mean NLL: the perplexity of every predicted token together."""
    return math.exp(sum(n * t for n, t in zip(nll, tokens)) / sum(tokens))


def measure_codebooks(model, info, path, seqs, device, torch, layers=None):
    """One codebooks file's row: its per-sequence NLL with every (or `layers`') keys and values replaced."""
    meta, books = load_codebooks(path)
    if layers is not None:  # only the chosen layers' codebooks, as gsrq ppl --layers
        books = {n: b for n, b in books.items() if n.startswith("layers.")
                 and n.split(".")[1].isdigit() and int(n.split(".")[1]) in layers}
    hooks = CodebookHooks(model, info, meta, books, torch, device)
    try:
        nll = sequence_nll(model, seqs, device, torch)
    finally:
        hooks.remove()
    bpa = float(meta["bpa"]) if "bpa" in meta else None
    return {"codebooks": path, "method": meta.get("method", "-"), "bpa": bpa,
            "perplexity": perplexity_of(nll, sequence_tokens(seqs)), "beam_in_training": int(meta.get("beam", "1")),
            "sequence_nll": nll}


def measure_kivi(model, info, name, layers, seqs, device, torch):
    """KIVI's row (name: kivi-B[gG][rN]) with its honest bits: B, FP16 scales and zeros, FP16 window."""
    bits, group, residual = parse_kivi(name)
    counts = {"quantized": 0, "fp16": 0, "groups": 0}
    hooks = KiviHooks(model, info, layers, bits, group, residual, torch, counts)
    try:
        nll = sequence_nll(model, seqs, device, torch)
    finally:
        hooks.remove()
    values = counts["quantized"] + counts["fp16"]
    honest = (counts["quantized"] * bits + counts["groups"] * 32 + counts["fp16"] * 16) / max(values, 1)
    return {"codebooks": name, "method": "kivi", "bpa": honest, "perplexity": perplexity_of(nll, sequence_tokens(seqs)),
            "kivi": {"bits": bits, "group": group, "residual": residual}, "sequence_nll": nll}


def add_deltas(rows, tokens):
    """Each row's Δ% against the first (FP32) with its paired bootstrap interval."""
    ref = rows[0]
    for r in rows:
        r["delta_percent"] = 100 * (r["perplexity"] - ref["perplexity"]) / ref["perplexity"]
        r["delta_percent_interval"] = (None if r is ref else
                                       stats.delta_percent_interval(r["sequence_nll"], ref["sequence_nll"], tokens))


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
        for p in a.codebooks:  # each file is read before the model loads: a bad one is named at once
            load_codebooks(p)
        kivis = [(m, parse_kivi(m)) for m in (x.strip() for x in a.methods.split(",")) if m and m != "fp32"]
        # dump_kv's loader: the same model families, devices and dtypes.
        a.post_rope = False
        model, tok, device, mdt = loaded or hf.load_model(a, seq_len=a.seq_len, backward=False)
        import torch
        info = hf.describe(model)
        kivi_layers = set(hf.parse_layers(a.layers, info["num_layers"]))
        if a.generate:
            bos = getattr(tok, "bos_token_id", None)
            seqs = generate(model, bos if bos is not None else 0, a.seq_len, a.sequences, a.seed, device, torch)
        else:
            if not os.path.isfile(a.text):
                raise InputError(f"--text {a.text}: no such file")
            seqs, _ = hf.tokenize(tok, a.text, a.sequences, a.seq_len, prepare=reflow)
        if a.save_token_ids:
            tmp = a.save_token_ids + ".tmp"
            with open(tmp, "w") as f:
                for q in seqs:
                    f.write(" ".join(str(int(t)) for t in q) + "\n")
            os.replace(tmp, a.save_token_ids)
        tokens = sequence_tokens(seqs)
        nll = sequence_nll(model, seqs, device, torch)
        rows = [{"codebooks": "unquantized", "method": "-", "bpa": None, "perplexity": perplexity_of(nll, tokens),
                 "sequence_nll": nll}]
        for path in a.codebooks:
            rows.append(measure_codebooks(model, info, path, seqs, device, torch,
                                          kivi_layers if a.layers else None))
        for name, _ in kivis:
            rows.append(measure_kivi(model, info, name, kivi_layers, seqs, device, torch))
        add_deltas(rows, tokens)
        if a.json:
            print(json.dumps({"model": a.model, "model_dtype": mdt, "source": "generate" if a.generate else a.text,
                              "seq_len": a.seq_len, "sequences": a.sequences, "sequence_tokens": tokens,
                              "interval": stats.DESCRIPTION, "results": rows}, indent=1))
        else:
            print(f"{a.model} ({mdt}): {a.sequences} × {a.seq_len} tokens of "
                  f"{'its own samples, seed ' + str(a.seed) if a.generate else a.text}")
            for r in rows:
                bits = f"{r['bpa']:g}" if r["bpa"] is not None else "-"
                lo_hi = r["delta_percent_interval"]
                print(f"  {r['codebooks']:<36} {r['method']:<6} {bits:>5} {r['perplexity']:10.4f} "
                      f"{r['delta_percent']:+7.2f}% " + (f"[{lo_hi[0]:+.2f}, {lo_hi[1]:+.2f}]" if lo_hi else ""))
            print(f"interval: {stats.DESCRIPTION}")
        return 0
    except InputError as e:
        print(f"hf_ppl.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
