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
import sys

from gsrqtools import hf
from gsrqtools.codebooks import load_codebooks, reconstruct  # noqa: F401
from gsrqtools.hf import InputError
from gsrqtools.kivi import parse_kivi
from gsrqtools.kvhooks import CodebookHooks, KiviHooks, KvHooks  # noqa: F401
from gsrqtools.texts import reflow


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
