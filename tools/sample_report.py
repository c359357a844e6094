#!/usr/bin/env python3
"""What the realistic sample shows at head_dim 128: the paper's effects measured with gsrq, as a
Markdown report.

    python3 tools/sample_report.py --sample resources/models/pydocs-llama-hd128 \\
        --dump resources/samples/pydocs-llama-hd128 --train-text corpus/train.txt --out report.md

1. KM against GSKM on the dump's keys and values of its layer, D = 128 (a whole head), K = 256,
   grad-log weights: NMSE, cosine, gain error, shrinkage.
2. Shrinkage E‖μ‖²/E‖x‖² as D grows (8 … 128, K = 256), KM and GSKM.
3. GSKM-RQ against KM-RQ at 1 and 0.5 bits per activation (D = 128, K = 256, R = 16 or 8 stages),
   trained on 75% of the dump's rows and measured on the other 25%.
4. Perplexity with the whole KV cache compressed: codebooks for every layer trained on a dump of
   training text (made here with tools/dump_kv.py: --train-text), then `gsrq ppl` on the sample's
   held-out text, FP32 against each codebooks file.

Needs a built gsrq, and for part 4 torch and transformers (tools/hf_env.sh).
"""
import argparse
import json
import os
import subprocess
import sys
import time

from gsrqtools.paths import ROOT
from gsrqtools.texts import reflow
# Bits per activation = stages · log2(K) / D.
RATES = {"1": ("--dim", "128", "--stages", "16", "--k", "256"), "0.5": ("--dim", "128", "--stages", "8", "--k", "256")}


def gsrq(binary, *args):
    quiet = [] if args[0] in ("info", "ppl") else ["-q"]
    r = subprocess.run([binary, "--no-db", *args, "--json", *quiet], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"sample_report.py: gsrq {' '.join(args)} failed: {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout)


def fmt(x, n=4):
    return f"{x:.{n}f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", required=True, help="the sample model's directory (model.bin, tokenizer.bin, model/)")
    ap.add_argument("--dump", required=True, help="its committed KV dump")
    ap.add_argument("--train-text", help="training text for part 4's codebooks (tools/sample_corpus.py's train.txt)")
    ap.add_argument("--gsrq", default=os.path.join(ROOT, "build", "app", "cli", "gsrq"))
    ap.add_argument("--work", default="/tmp/gsrq-sample-report")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    info = gsrq(a.gsrq, "info", a.dump)
    layer = sorted({t["layer"] for t in info["tensors"] if t.get("layer", -1) >= 0})[0]
    lines = [f"# The realistic sample at head_dim 128: what gsrq measures on it", "",
             f"Written by `tools/sample_report.py` ({time.strftime('%Y-%m-%d')}). Dump: `{a.dump}` "
             f"(layer {layer}); model: `{a.sample}`.", ""]

    # 1. KM against GSKM at D = 128.
    lines += ["## 1. KM against GSKM, D = 128, K = 256, grad-log weights", "",
              "| tensor | method | NMSE | cosine | gain error | shrinkage |", "| --- | --- | --- | --- | --- | --- |"]
    for kind in ("key", "value"):
        c = gsrq(a.gsrq, "compare", a.dump, "--tensor", f"layers.{layer}.{kind}", "--dim", "128", "--k", "256",
                 "--iters", "50", "--weights", "grad-log")
        for m in ("km", "gskm"):
            r = c[m]
            lines.append(f"| {kind} | {m.upper()} | {fmt(r['nmse'])} | {fmt(r['cosine'])} | {fmt(r['gain_error'])} | "
                         f"{fmt(r['shrinkage'])} |")
    lines.append("")

    # 2. Shrinkage as D grows.
    dims = [8, 16, 32, 64, 128]
    lines += ["## 2. Shrinkage E‖μ‖²/E‖x‖² as D grows (K = 256)", "",
              "| tensor | method | " + " | ".join(f"D = {d}" for d in dims) + " |",
              "| --- | --- | " + " | ".join("---" for _ in dims) + " |"]
    for kind in ("key", "value"):
        s = gsrq(a.gsrq, "sweep", a.dump, "--tensor", f"layers.{layer}.{kind}", "--over", "dim", "--values",
                 ",".join(map(str, dims)), "--k", "256", "--iters", "30")
        for m in ("km", "gskm"):
            lines.append(f"| {kind} | {m.upper()} | " + " | ".join(fmt(p[m]["shrinkage"], 3) for p in s["points"]) + " |")
    lines.append("")

    # 3. GSKM-RQ against KM-RQ at 1 and 0.5 BPA, held-out rows.
    lines += ["## 3. GSKM-RQ against KM-RQ, held-out rows (25%), grad-log weights", "",
              "| tensor | BPA | stages | method | held-out NMSE | cosine | gain error | attention rel. L2 |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for kind in ("key", "value"):
        for bpa in ("1", "0.5"):
            for m in ("km", "gskm"):
                t = gsrq(a.gsrq, "train", a.dump, "--tensors", f"layers.{layer}.{kind}", *RATES[bpa], "--method", m,
                         "--weights", "grad-log", "--holdout", "0.25")
                e = t["tensors"][0]
                att = [x for x in t.get("attention", []) if x.get("layer") == layer]
                rel = fmt(att[0]["relative_l2"]) if att else "-"
                h = e["heldout"]
                lines.append(f"| {kind} | {bpa} | {len(e['stages'])} | {m.upper()}-RQ | {fmt(h['nmse'])} | "
                             f"{fmt(h['cosine'])} | {fmt(h['gain_error'])} | {rel} |")
    lines.append("")

    # 4. Perplexity with every layer's cache compressed.
    if a.train_text:
        train_dump = os.path.join(a.work, "train-dump")
        if not os.path.isdir(train_dump):
            flowed = os.path.join(a.work, "train-flowed.txt")  # as the model was trained
            with open(a.train_text, encoding="utf-8") as f, open(flowed, "w", encoding="utf-8") as g:
                g.write(reflow(f.read()))
            r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "dump_kv.py"), "--model",
                                os.path.join(a.sample, "model"), "--text", flowed, "--samples", "16",
                                "--seq-len", "512", "--out", train_dump, "--device", "cpu", "--dtype", "f32",
                                "--quiet"], capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"sample_report.py: dump_kv.py failed: {r.stderr[-400:]}")
        books = []
        for bpa in ("1", "0.5"):
            for m in ("km", "gskm"):
                path = os.path.join(a.work, f"{m}-{bpa}bpa.safetensors")
                if not os.path.exists(path):
                    gsrq(a.gsrq, "train", train_dump, "--tensors", "layers.*.key,layers.*.value", *RATES[bpa],
                         "--method", m, "--weights", "grad-log", "--out", path)
                books += ["-c", path]
        p = gsrq(a.gsrq, "ppl", os.path.join(a.sample, "model.bin"), "--tokenizer",
                 os.path.join(a.sample, "tokenizer.bin"), "--text", os.path.join(a.sample, "heldout.txt"),
                 "--seq-len", "512", "--sequences", "8", "--backend", "cpu", *books)
        lines += ["## 4. Perplexity on held-out text, every layer's keys and values compressed", "",
                  f"Codebooks trained on 16 × 512 tokens of training text (all {p.get('layers', 4)} layers, "
                  "grad-log weights); `gsrq ppl` on 8 × 512 tokens of the held-out text.", "",
                  "| codebooks | BPA | effective BPA | perplexity | change |", "| --- | --- | --- | --- | --- |"]
        for r in p["results"]:
            name = os.path.basename(r["codebooks"]).replace(".safetensors", "")
            lines.append(f"| {name} | {r['bpa']:g} | {r['effective_bpa']:.3f} | {r['perplexity']:.3f} | "
                         f"{r['delta_percent']:+.2f}% |")
        lines.append("")
    with open(a.out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
