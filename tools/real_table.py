#!/usr/bin/env python3
"""The paper's tables on a pretrained model, in one command: fetch, calibrate, train, measure, record.

    python3 tools/real_table.py --model smollm2 --text devil --budget quick        # minutes: 4 methods
    python3 tools/real_table.py --model smollm2 --text devil --budget table        # Table 1's layout
    python3 tools/real_table.py --model qwen2.5-coder-1.5b --text devil --budget ablation
    python3 tools/real_table.py --model ~/models/my-llama --calib c.txt --eval e.txt --device cuda
    python3 tools/real_table.py --model smollm2 --text devil --calib-text debian-reference --seeds 3
    python3 tools/real_table.py merge OUT.json A/table.json B/table.json       # one table from several runs

--model is a name of tools/python/models.json (fetched once, checked by hash: tools/fetch_model.py),
a GGUF file, or a transformers model directory. --text names a held-out text of tools/texts.py
(its calibration and evaluation parts), or --calib and --eval give two files. Steps, each timed:

  1. the model is loaded once (FP32 from a GGUF file: transformers dequantizes it);
  2. calibration: tools/dump_kv.py's dump of --calib-samples × --seq-len tokens of the calibration
     text, every layer, keys, values and their loss gradients; and an evaluation dump of
     --eval-samples sequences of the evaluation text (no gradients) on which every trained method's
     held-out NMSE is measured (gsrq train --eval), so the table says whether calibration was enough
     (the mean held-out NMSE within 1.5× of the training NMSE);
  3. every trained method's codebooks: `gsrq train` on the calibration dump, every layer's keys and
     values, D, R, K from --bpa and the model's head_dim (the presets follow the model);
  4. perplexity of --eval-sequences × --seq-len tokens of the evaluation text (tools/hf_ppl.py):
     FP32, KIVI (training-free) and each codebooks file, every layer's cache quantized;
  5. the table as one `ppl` run in gsrq's run store (`gsrq runs add-ppl`: the Runs page draws its
     perplexity against bits), and OUT/table.json, OUT/table.md.

How sure each figure is: every row keeps its evaluation sequences' mean NLL per token (sequence_nll),
and its Δ% against FP32 carries a paired bootstrap 95% interval (delta_percent_interval;
tools/gsrqtools/stats.py). --seeds N trains every codebook method N times (K-means seeds 0 … N−1): the
row gives the mean and the standard deviation over seeds, and its interval covers seeds and
sequences. --calib-text calibrates on another text than the one evaluated (out of domain). Every
method × seed (its codebooks) and every measured perplexity is a unit kept in --out: a stopped run
continues where it stopped, and a table grows over several runs; `merge` joins tables of the same
settings made elsewhere, and refuses (exit 2, naming the field) tables of other settings.

Budgets (the methods and sizes; any size can be set by its flag):
  quick     fp32, kivi-2, km-rq@1, gsrq@1; 8 × 256 calibration tokens: a smoke test, not a result
  first     the README's first job (tools/run.sh): fp32, kivi-2, kivi-1, and km-rq, gsrq at 1 and 0.375
            BPA; 32 × 512 calibration tokens, 10 iterations: minutes on two cores
  table     Table 1: fp32, kivi-2, kivi-2g32r128 (KIVI's own setting: the last 128 tokens in FP16), kivi-1,
            cq-4c8b, cq-8c8b, and vqllm, km-rq, gsrq at 2, 1, 0.75, 0.375 BPA
  ablation  at 1 and 0.375 BPA: km, km-log (KM with log weights), gskm (unweighted), gskm-raw, gskm-log
            (= gsrq), and gskm-log at τ = 0.25, 0.5, 2, 4 (gskm-log@1:tau0.5; τ = 1 is gskm-log's own)
--methods replaces the budget's list with its own (the names above, comma-separated).

Exit codes: 0 done, 2 bad input (named), 1 other failures. The dumps and codebooks stay in --out and are
reused by a second run with the same settings (their settings are in their names).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

import dump_kv
import hf_ppl
from gsrqtools import hf, kivi, models, stats, texts
from gsrqtools.hf import InputError
from gsrqtools.paths import cache_root, default_gsrq
BUDGETS = {
    "quick": dict(seq_len=256, calib_samples=8, eval_samples=2, eval_sequences=2, iters=8,
                  methods="fp32,kivi-2,km-rq@1,gsrq@1"),
    "first": dict(seq_len=512, calib_samples=32, eval_samples=4, eval_sequences=8, iters=10,
                  methods="fp32,kivi-2,kivi-1,km-rq@1,gsrq@1,km-rq@0.375,gsrq@0.375"),
    "table": dict(seq_len=512, calib_samples=64, eval_samples=8, eval_sequences=16, iters=25,
                  methods="fp32,kivi-2,kivi-2g32r128,kivi-1,cq-4c8b,cq-8c8b," + ",".join(
                      f"{m}@{b:g}" for b in (2, 1, 0.75, 0.375) for m in ("vqllm", "km-rq", "gsrq"))),
    "ablation": dict(seq_len=512, calib_samples=64, eval_samples=8, eval_sequences=16, iters=25,
                     methods="fp32," + ",".join(
                         [f"{m}@{b:g}" for b in (1, 0.375) for m in ("km", "km-log", "gskm", "gskm-raw", "gskm-log")] +
                         [f"gskm-log@{b:g}:tau{t:g}" for b in (1, 0.375) for t in (0.25, 0.5, 2, 4)])),
}
# name -> (gsrq train --method, --weights, family shown in the store)
TRAINED = {
    "km-rq": ("km", "none", "km-rq"), "km": ("km", "none", "km-rq"), "gsrq": ("gskm", "grad-log", "gsrq"),
    "gskm-log": ("gskm", "grad-log", "gsrq"), "vqllm": ("vqllm", "none", "vqllm"),
    "km-log": ("km", "grad-log", "km-log"), "gskm": ("gskm", "none", "gskm"),
    "gskm-raw": ("gskm", "grad-raw", "gskm-raw"),
}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_method(name):
    """{"name", "kind": fp32|kivi|cq|trained, ...} for one entry of --methods."""
    if name == "fp32":
        return {"name": name, "kind": "fp32"}
    if name.startswith("kivi-"):
        kivi.parse_kivi(name)
        return {"name": name, "kind": "kivi"}
    m = re.fullmatch(r"cq-(\d+)c(\d+)b", name)
    if m:
        return {"name": name, "kind": "cq", "channels": int(m.group(1)), "bits": int(m.group(2)),
                "bpa": int(m.group(2)) / int(m.group(1)), "family": "cq"}
    m = re.fullmatch(r"([a-z-]+)@(\d+(?:\.\d+)?)(?::tau(\d+(?:\.\d+)?))?", name)
    if m and m.group(1) in TRAINED:
        method, weights, family = TRAINED[m.group(1)]
        tau = float(m.group(3)) if m.group(3) else None
        if tau is not None and weights != "grad-log":
            raise InputError(f"--methods {name}: τ applies to log weights only")
        return {"name": name, "kind": "trained", "method": method, "weights": weights, "family": family,
                "bpa": float(m.group(2)), "tau": tau}
    raise InputError(f"--methods: '{name}' is not a method (fp32, kivi-B[gG][rN], cq-<C>c<B>b, or "
                     f"{'|'.join(TRAINED)}@BPA[:tauX])")


def run_gsrq(gsrq, args, what):
    r = subprocess.run([gsrq, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode == 2:
        raise InputError(f"{what}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else 'exit 2'}")
    if r.returncode != 0:
        raise RuntimeError(f"{what}: gsrq exited {r.returncode}: {r.stderr.strip()[-2000:]}")
    return r.stdout


def train_method(a, m, calib, evald, out_dir, seed=0):
    """Codebooks of method m with K-means seed `seed` on every layer's keys and values; returns (path,
    summary, seconds). One method × seed is a unit: kept in out_dir and reused by later runs."""
    # The name says what trained them (method, iterations, calibration dump, seed), so a later run with
    # other settings in the same --out trains anew instead of reusing them.
    tag = (re.sub(r"[^A-Za-z0-9.@-]+", "_", m["name"]) + f"-i{a.iters}-{os.path.basename(os.path.normpath(calib))}"
           + (f"-s{seed}" if seed else ""))
    path = os.path.join(out_dir, f"codebooks-{tag}.safetensors")
    report = path + ".json"
    if os.path.isfile(path) and os.path.isfile(report):
        with open(report, encoding="utf-8") as f:
            return path, json.load(f), 0.0
    args = ["train", calib, "--eval", evald, "--iters", str(a.iters), "--out", path, "--force", "--json", "-q",
            "--attention-queries", "0", "--seed", str(seed)]
    if m["kind"] == "cq":
        args += ["--method", "cq", "--channels", str(m["channels"]), "--bits", str(m["bits"])]
    else:
        args += ["--bpa", f"{m['bpa']:g}", "--method", m["method"], "--weights", m["weights"]]
        if m["tau"] is not None:
            args += ["--tau", f"{m['tau']:g}"]
    if a.device.startswith("cuda"):  # a GPU server trains on its GPU too (gsrq's CUDA backend)
        args += ["--backend", "cuda"]
    if a.no_db:
        args.insert(0, "--no-db")
    t = time.time()
    out = json.loads(run_gsrq(a.gsrq, args, f"gsrq train ({m['name']})"))
    seconds = time.time() - t
    tensors = out.get("tensors", [])
    train = [x["train"]["nmse"] for x in tensors]
    held = [x["heldout"]["nmse"] for x in tensors if "heldout" in x]
    first = tensors[0] if tensors else {}
    stages = first.get("stages")
    stages = len(stages) if isinstance(stages, list) else stages
    summary = {"tensors": len(tensors), "train_nmse": sum(train) / len(train) if train else None,
               "heldout_nmse": sum(held) / len(held) if held else None,
               "bpa": first.get("bpa"), "effective_bpa": (sum(x["effective_bpa"] for x in tensors) / len(tensors)
                                                          if tensors else None),
               "settings": f"D={first.get('dim')} R={stages} K={first.get('k')} {m.get('method', 'cq')} "
                           f"{m.get('weights', 'grad-sq')}" + (f" τ={m['tau']:g}" if m.get("tau") else ""),
               "seconds": seconds, "seed": seed, "codeword_values": codeword_values(path)}
    with open(report + ".tmp", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    os.replace(report + ".tmp", report)
    return path, summary, seconds


def dump(a, loaded, text, samples, grad, out, what):
    """tools/dump_kv.py's dump of `samples` × --seq-len tokens of `text`, reused when it is there."""
    if os.path.isfile(os.path.join(out, "common.safetensors")):
        return 0.0
    args = ["--model", a.model, "--text", text, "--samples", str(samples), "--seq-len", str(a.seq_len),
            "--out", out, "--dtype", "f32", "--device", a.device, "--quiet"]
    if not grad:
        args.append("--no-grad")
    t = time.time()
    d = dump_kv.parse_args(args)
    try:
        rc = dump_kv.run(d, loaded=loaded)
    except InputError:
        raise
    if rc not in (0, None):
        raise RuntimeError(f"{what}: tools/dump_kv.py exited {rc}")
    return time.time() - t


def peak_rss_gib():
    try:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    except (ImportError, OSError):
        return None


def stamp_out(out, model, calib_text, eval_text):
    """--out keeps one model's work on one evaluation and calibration text: its dumps and codebooks are
    reused by name, so another model's or text's run there is refused (exit 2) rather than mixed in."""
    def size(p):
        return os.path.getsize(p) if os.path.isfile(p) else None
    want = {"model": os.path.abspath(model), "model_bytes": size(model), "calib_text": os.path.abspath(calib_text),
            "eval_text": os.path.abspath(eval_text)}
    path = os.path.join(out, "stamp.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            have = json.load(f)
        for k, v in want.items():
            if k in have and have[k] != v:
                raise InputError(f"--out {out}: holds the work of {k} {have[k]}, not {v}: give another --out")
    write_atomic(path, json.dumps(want, indent=1))


def sha256_of(path):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_atomic(path, body):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(body)
    os.replace(path + ".tmp", path)


def codeword_values(path):
    """How many values the codebooks of a file's keys and values hold (what a deployment stores once)."""
    from gsrqtools.codebooks import load_codebooks
    _, books = load_codebooks(path)
    return int(sum(b.size for n, b in books.items() if n.endswith((".key", ".value"))))


def measure_rows(a, loaded, info, methods, books, eval_text, out, text_name):
    """Every method's row with its sequences' NLL, each measurement a unit kept under out/ppl-<text>-<S>x<T>/
    (the sequences' SHA-256 inside it: a unit of other sequences is measured again)."""
    import hashlib

    import torch
    from gsrqtools.texts import reflow
    model, tok, device, _ = loaded
    seqs, _ = hf.tokenize(tok, eval_text, a.eval_sequences, a.seq_len, prepare=reflow)
    tokens = hf_ppl.sequence_tokens(seqs)
    sha = hashlib.sha256(json.dumps(seqs).encode()).hexdigest()
    ppl_dir = os.path.join(out, f"ppl-{text_name}-{a.eval_sequences}x{a.seq_len}")
    os.makedirs(ppl_dir, exist_ok=True)

    def unit(key, measure, books=None):
        """A measurement kept under ppl_dir: reused only for the same sequences (and codebooks file)."""
        path = os.path.join(ppl_dir, re.sub(r"[^A-Za-z0-9.@-]+", "_", key) + ".json")
        books_sha = sha256_of(books) if books else None
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                r = json.load(f)
            if r.get("sequences_sha256") == sha and r.get("codebooks_sha256") == books_sha:
                return r
        log(f"  perplexity of {key}")
        r = measure()
        r["sequences_sha256"] = sha
        r["codebooks_sha256"] = books_sha
        write_atomic(path, json.dumps(r))
        return r

    fp32 = unit("fp32", lambda: {"sequence_nll": hf_ppl.sequence_nll(model, seqs, device, torch)})
    fp32_ppl = hf_ppl.perplexity_of(fp32["sequence_nll"], tokens)
    layers = set(hf.parse_layers("", info["num_layers"]))

    def entry(nll):
        ppl = hf_ppl.perplexity_of(nll, tokens)
        return ppl, 100 * (ppl - fp32_ppl) / fp32_ppl

    rows = []
    for m in methods:
        if m["kind"] == "fp32":
            rows.append({"name": "fp32", "family": "fp32", "bits": 32, "effective_bits": 32, "perplexity": fp32_ppl,
                         "delta_percent": 0.0, "delta_percent_interval": None, "sequence_nll": fp32["sequence_nll"],
                         "settings": "FP32"})
        elif m["kind"] == "kivi":
            r = unit(m["name"], lambda: hf_ppl.measure_kivi(model, info, m["name"], layers, seqs, device, torch))
            k = r["kivi"]
            ppl, delta = entry(r["sequence_nll"])
            rows.append({"name": m["name"], "family": "kivi", "bits": r["bpa"], "effective_bits": r["bpa"],
                         "perplexity": ppl, "delta_percent": delta,
                         "delta_percent_interval": stats.delta_percent_interval(r["sequence_nll"], fp32["sequence_nll"],
                                                                                tokens),
                         "sequence_nll": r["sequence_nll"],
                         "settings": f"{k['bits']} bit{'s' if k['bits'] != 1 else ''}, groups of {k['group']}"
                                     + (f", the last {k['residual']} tokens in FP16" if k["residual"] else "")})
        else:
            per_seed = []
            for seed, path, summary in books[m["name"]]:
                r = unit(os.path.basename(path), lambda: hf_ppl.measure_codebooks(model, info, path, seqs, device,
                                                                                  torch), books=path)
                ppl, delta = entry(r["sequence_nll"])
                per_seed.append({"seed": seed, "perplexity": ppl, "delta_percent": delta,
                                 "train_nmse": summary["train_nmse"], "heldout_nmse": summary["heldout_nmse"],
                                 "effective_bits": summary["effective_bpa"], "codebooks": path,
                                 "codeword_values": summary.get("codeword_values") or codeword_values(path),
                                 "sequence_nll": r["sequence_nll"]})
            rows.append(seeded_row(m, books[m["name"]][0][2], per_seed, fp32["sequence_nll"], tokens))
    return rows, tokens


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def sd(xs):
    """The sample standard deviation (n − 1); None for fewer than two."""
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    return (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5


def seeded_row(m, summary, per_seed, fp32_nll, tokens):
    """A trained method's row from its seeds: the means, the spread over seeds, and the interval over
    seeds and sequences (tools/gsrqtools/stats.py)."""
    nll = [p["sequence_nll"] for p in per_seed]
    return {"name": m["name"], "family": m["family"], "bits": summary["bpa"] if summary["bpa"] else m["bpa"],
            "effective_bits": mean([p["effective_bits"] for p in per_seed]),
            "perplexity": mean([p["perplexity"] for p in per_seed]),
            "perplexity_sd": sd([p["perplexity"] for p in per_seed]),
            "delta_percent": mean([p["delta_percent"] for p in per_seed]),
            "delta_percent_sd": sd([p["delta_percent"] for p in per_seed]),
            "delta_percent_interval": stats.delta_percent_interval(nll, fp32_nll, tokens),
            "train_nmse": mean([p["train_nmse"] for p in per_seed]),
            "heldout_nmse": mean([p["heldout_nmse"] for p in per_seed]),
            "settings": summary["settings"], "codebooks": per_seed[0]["codebooks"],
            "codeword_values": per_seed[0]["codeword_values"],
            "sequence_nll": [sum(col) / len(col) for col in zip(*nll)], "seeds": per_seed}


CONTEXTS = (4096, 32768, 131072)


def add_memory(report):
    """Bytes per cached token as deployed: every layer's keys and values at the row's bits, plus the
    codebooks (stored as f32, as gsrq train writes them) spread over 4K, 32K and 128K cached tokens; and
    the context from which a codebook method's cache is smaller than KIVI-2's."""
    per_token = report["kv_values_per_token"]
    kivi2 = next((r for r in report["rows"] if r["name"] == "kivi-2"), None)
    kivi2_bytes = kivi2["bits"] * per_token / 8 if kivi2 else None
    for r in report["rows"]:
        base = r["bits"] * per_token / 8
        book = 4 * r.get("codeword_values", 0)
        r["bytes_per_token"] = {str(n): base + book / n for n in CONTEXTS}
        if book and kivi2_bytes is not None:
            r["smaller_than_kivi2_from"] = math.ceil(book / (kivi2_bytes - base)) if kivi2_bytes > base else None


def fmt(v, spec):
    return format(v, spec) if v is not None else "-"


def markdown(report):
    seeds = report.get("seeds", 1)
    calib = report.get("calib_text_name") or report["text"]
    lines = [f"# {report['model_title']} on {report['text_title']}", "",
             f"FP32 perplexity {report['fp32']:.4f} on {report['eval_sequences']} × {report['seq_len']} tokens of "
             f"the evaluation part of {report['text']}; calibration {report['calib_samples']} × {report['seq_len']} "
             f"tokens of {calib}'s calibration part"
             + {True: " (out of domain)", False: " (in domain)"}.get(
                 report["out_of_domain"] if "out_of_domain" in report else calib != report["text"], "")
             + f"; every layer's keys and values quantized; {seeds} seed{'s' if seeds != 1 else ''} per trained "
             f"method. Δ%: against FP32; interval: {report.get('interval', stats.DESCRIPTION)}.", "",
             "| method | bits | effective bits¹ | perplexity | Δ% | Δ% 95% interval | seeds | train NMSE | held-out NMSE | "
             "held-out / train | settings |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in report["rows"]:
        ratio = (r["heldout_nmse"] / r["train_nmse"] if r.get("heldout_nmse") and r.get("train_nmse") else None)
        ppl = f"{r['perplexity']:.4f}" + (f" ± {r['perplexity_sd']:.4f}" if r.get("perplexity_sd") else "")
        lo_hi = r.get("delta_percent_interval")
        lines.append(f"| {r['name']} | {fmt(r['bits'], '.3g')} | {fmt(r.get('effective_bits'), '.3g')} | {ppl} | "
                     f"{r['delta_percent']:+.2f} | {f'[{lo_hi[0]:+.2f}, {lo_hi[1]:+.2f}]' if lo_hi else '-'} | "
                     f"{len(r['seeds']) if r.get('seeds') else '-'} | {fmt(r.get('train_nmse'), '.4f')} | "
                     f"{fmt(r.get('heldout_nmse'), '.4f')} | {fmt(ratio, '.2f')} | {r.get('settings', '')} |")
    lines += ["", "¹ with the codewords (f32, as `gsrq train` stores them) spread over the calibration tokens, as "
              "`gsrq train` counts them; a deployment spreads them over every token the codebooks serve (below). "
              "Perplexity ± the standard deviation over seeds.", ""]
    if any(r.get("bytes_per_token") for r in report["rows"]):
        lines += ["Bytes per cached token as deployed (every layer's keys and values; codebooks stored once, spread "
                  "over the cached tokens):", "",
                  "| method | " + " | ".join(f"at {n // 1024}K tokens" for n in CONTEXTS) + " | smaller than KIVI-2 from |",
                  "| --- | " + " | ".join("---:" for _ in CONTEXTS) + " | ---: |"]
        for r in report["rows"]:
            b = r.get("bytes_per_token") or {}
            since = r.get("smaller_than_kivi2_from", "-") if r.get("codeword_values") else "-"
            lines.append(f"| {r['name']} | " + " | ".join(fmt(b.get(str(n)), ".1f") for n in CONTEXTS) +
                         f" | {since if since is not None else 'never'}"
                         f"{' tokens' if isinstance(since, int) else ''} |")
        lines.append("")
    lines += ["Steps (seconds on this machine): " + ", ".join(f"{k} {v:.0f}" for k, v in report["seconds"].items()),
              f"Peak resident memory: {report['peak_rss_gib']:.1f} GiB." if report.get("peak_rss_gib") else ""]
    return "\n".join(lines) + "\n"


# What two tables must share to be one table: the model, the texts, the window and the sizes.
MERGE_KEYS = ("model_name", "text", "calib_text_name", "seq_len", "eval_sequences", "calib_samples", "eval_samples",
              "iters")


def load_table(path):
    """A table.json of this tool, checked: InputError naming the file and what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot be read ({e})")
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not a table.json of tools/real_table.py ({e.msg} at line {e.lineno})")
    if not isinstance(t, dict) or not isinstance(t.get("rows"), list) or not t["rows"]:
        raise InputError(f"{path}: not a table.json of tools/real_table.py (no \"rows\")")
    if not isinstance(t.get("sequence_tokens"), list):
        raise InputError(f"{path}: has no per-sequence figures (\"sequence_tokens\"): a table from before they were "
                         "recorded; measure it again")
    tokens = t["sequence_tokens"]
    if not tokens or not all(isinstance(x, (int, float)) and x > 0 for x in tokens):
        raise InputError(f"{path}: \"sequence_tokens\" is not a positive count per sequence")
    for k in ("model_title", "text", "seq_len", "eval_sequences", "kv_values_per_token"):
        if k not in t:
            raise InputError(f"{path}: no \"{k}\" (not a table.json of tools/real_table.py)")

    def numbers(x):
        return (isinstance(x, list) and len(x) == len(tokens)
                and all(isinstance(v, (int, float)) and math.isfinite(v) for v in x))
    for i, r in enumerate(t["rows"]):
        if not isinstance(r, dict) or not isinstance(r.get("name"), str):
            raise InputError(f"{path}: row {i + 1} has no \"name\"")
        if not numbers(r.get("sequence_nll")):
            raise InputError(f"{path}: {r['name']}'s \"sequence_nll\" is not one number per sequence")
        for k in ("perplexity", "bits"):
            if not isinstance(r.get(k), (int, float)) or not r[k] > 0:
                raise InputError(f"{path}: {r['name']}'s \"{k}\" is not a positive number")
        if not isinstance(r.get("delta_percent"), (int, float)):
            raise InputError(f"{path}: {r['name']}'s \"delta_percent\" is not a number")
        for x in r.get("seeds") or []:
            if (not isinstance(x, dict) or not isinstance(x.get("seed"), int) or not numbers(x.get("sequence_nll"))
                    or not isinstance(x.get("perplexity"), (int, float))):
                raise InputError(f"{path}: {r['name']}'s \"seeds\" entry {x.get('seed') if isinstance(x, dict) else x} "
                                 "lacks its seed, perplexity or one NLL per sequence")
    if t["rows"][0]["name"] != "fp32":
        raise InputError(f"{path}: the first row must be fp32 (every Δ is against it)")
    return t


def merge(paths, out):
    """One table from several runs of the same settings: rows by name, a trained method's seeds together
    (the intervals computed again over all of them). Refuses tables of other settings, naming the field."""
    if len(paths) < 2:
        raise InputError("merge: give OUT.json and at least two tables")
    tables = [load_table(p) for p in paths]
    base = tables[0]
    fp32 = base["rows"][0]["sequence_nll"]
    for p, t in zip(paths[1:], tables[1:]):
        for k in MERGE_KEYS:
            if t.get(k) != base.get(k):
                raise InputError(f"{p}: {k} is {t.get(k)!r} where {paths[0]} has {base.get(k)!r}: tables of other "
                                 "settings do not merge")
        # The same sequences give FP32 the same NLL to float rounding (1e-4 nat allows another device or
        # BLAS); other sequences differ by tenths.
        if (t["sequence_tokens"] != base["sequence_tokens"]
                or max(abs(x - y) for x, y in zip(t["rows"][0]["sequence_nll"], fp32)) > 1e-4):
            raise InputError(f"{p}: measured other sequences than {paths[0]} (FP32's per-sequence NLL differs)")
    tokens = base["sequence_tokens"]
    rows, order = {}, []
    for p, t in zip(paths, tables):
        for r in t["rows"]:
            have = rows.get(r["name"])
            if have is None:
                rows[r["name"]] = json.loads(json.dumps(r))
                order.append(r["name"])
                continue
            if have.get("settings") != r.get("settings") or have.get("bits") != r.get("bits"):
                raise InputError(f"{p}: {r['name']} ran as {r.get('settings')!r} at {r.get('bits')} bits, in "
                                 f"{paths[0]} as {have.get('settings')!r} at {have.get('bits')}: not one method")
            if "seeds" not in r:
                continue  # FP32 and KIVI: no seeds, the same measurement
            by_seed = {x["seed"]: x for x in have["seeds"]}
            for x in r["seeds"]:
                if (x["seed"] in by_seed
                        and abs(by_seed[x["seed"]]["perplexity"] / x["perplexity"] - 1) > 1e-6):
                    raise InputError(f"{p}: {r['name']} seed {x['seed']} has perplexity {x['perplexity']} where "
                                     f"another table has {by_seed[x['seed']]['perplexity']}")
                by_seed[x["seed"]] = x
            have["seeds"] = [by_seed[k] for k in sorted(by_seed)]
    merged = []
    for name in order:
        r = rows[name]
        if "seeds" in r:
            r = dict(r, **seeded_row({"name": name, "family": r["family"], "bpa": r["bits"]},
                                     {"bpa": r["bits"], "settings": r["settings"]}, r["seeds"], fp32, tokens))
        merged.append(r)
    report = dict(base)
    report["rows"] = merged
    report["seeds"] = max(len(r["seeds"]) for r in merged if "seeds" in r) if any("seeds" in r for r in merged) else 1
    report["merged_from"] = [os.path.abspath(p) for p in paths]
    report["seconds"] = {k: sum(t["seconds"].get(k, 0) for t in tables) for k in base.get("seconds", {})}
    add_memory(report)
    write_atomic(out, json.dumps(report, indent=1))
    write_atomic(os.path.splitext(out)[0] + ".md", markdown(report))
    return report


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["merge"]:
        try:
            if len(argv) < 2 or not argv[1].endswith(".json"):
                raise InputError("usage: real_table.py merge OUT.json TABLE.json TABLE.json ...")
            report = merge(argv[2:], argv[1])
            sys.stdout.write(markdown(report))
            return 0
        except InputError as e:
            print(f"real_table.py: {e}", file=sys.stderr)
            return 2
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a model of tools/python/models.json, a GGUF file or a model directory")
    ap.add_argument("--text", help="a text of tools/texts.py (its calibration and evaluation parts)")
    ap.add_argument("--calib-text", metavar="NAME",
                    help="calibrate on this text of tools/texts.py instead (out of domain: --text is evaluated)")
    ap.add_argument("--seeds", type=int, default=1,
                    help="train each codebook method this many times (K-means seeds 0 … N−1); the table gives the "
                         "mean, the spread, and an interval over seeds and sequences")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="the first seed (seeds S … S+N−1): jobs of a Slurm array train other seeds, merged after")
    ap.add_argument("--calib", help="calibration text file (instead of --text)")
    ap.add_argument("--eval", help="evaluation text file (instead of --text)")
    ap.add_argument("--budget", choices=sorted(BUDGETS), default="quick")
    ap.add_argument("--methods", help="comma-separated methods, replacing the budget's")
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--calib-samples", type=int, help="calibration sequences dumped")
    ap.add_argument("--eval-samples", type=int, help="evaluation sequences dumped for held-out NMSE")
    ap.add_argument("--eval-sequences", type=int, help="evaluation sequences of the perplexity")
    ap.add_argument("--iters", type=int, help="maximum K-means iterations per stage")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N: the model's device; with cuda, gsrq trains "
                                                   "on its CUDA backend too")
    ap.add_argument("--out", help="directory for dumps, codebooks and the table (default: the cache's tables/)")
    ap.add_argument("--gsrq", default=default_gsrq())
    ap.add_argument("--no-db", action="store_true", help="record nothing in the run store")
    a = ap.parse_args(argv)
    try:
        budget = BUDGETS[a.budget]
        for k in ("seq_len", "calib_samples", "eval_samples", "eval_sequences", "iters"):
            if getattr(a, k) is None:
                setattr(a, k, budget[k])
            if getattr(a, k) < 1:
                raise InputError(f"--{k.replace('_', '-')} {getattr(a, k)}: must be at least 1")
        if a.seeds < 1:
            raise InputError(f"--seeds {a.seeds}: must be at least 1")
        if a.first_seed < 0:
            raise InputError(f"--first-seed {a.first_seed}: must be at least 0")
        methods = [parse_method(m.strip()) for m in (a.methods or budget["methods"]).split(",") if m.strip()]
        if not any(m["kind"] == "fp32" for m in methods):
            methods.insert(0, {"name": "fp32", "kind": "fp32"})
        if not os.access(a.gsrq, os.X_OK) and any(m["kind"] in ("trained", "cq") for m in methods):
            raise InputError(f"--gsrq {a.gsrq}: not an executable gsrq (build it: tools/build.sh)")
        seconds = {}
        t = time.time()
        # The text first: a missing package or file is named before a model is downloaded.
        if a.text:
            if a.calib or a.eval:
                raise InputError("give --text, or --calib and --eval, not both")
            try:
                calib_text, eval_text = texts.prepare(a.text)
            except texts.InputError as e:
                raise InputError(f"--text {e}")
            text_title = texts.TEXTS[a.text]["title"]
            text_name = a.text
            calib_name = a.text
            out_of_domain = bool(a.calib_text and a.calib_text != a.text)
            if out_of_domain:
                try:
                    calib_text, _ = texts.prepare(a.calib_text)
                except texts.InputError as e:
                    raise InputError(f"--calib-text {e}")
                calib_name = a.calib_text
        else:
            if a.calib_text:
                raise InputError("--calib-text goes with --text (with --calib and --eval the files say it)")
            if not (a.calib and a.eval):
                raise InputError("give --text NAME (tools/texts.py --list), or --calib FILE and --eval FILE")
            for flag, p in (("--calib", a.calib), ("--eval", a.eval)):
                if not os.path.isfile(p):
                    raise InputError(f"{flag} {p}: no such file")
            calib_text, eval_text, text_title = a.calib, a.eval, f"{a.calib} / {a.eval}"
            text_name = os.path.splitext(os.path.basename(a.eval))[0]
            calib_name = os.path.splitext(os.path.basename(a.calib))[0]
            out_of_domain = None  # two files: whether they share a domain is the user's to say
        manifest = models.load_manifest()
        title = a.model
        name = a.model
        if a.model in manifest:
            name, title = a.model, manifest[a.model]["title"]
            d = os.path.join(cache_root(), "models", name)
            try:
                a.model = models.cached(manifest[name], d, False) or models.fetch(name, manifest[name], d, log)
            except models.InputError as e:
                raise InputError(str(e))
        else:
            name = os.path.basename(os.path.normpath(a.model))
        seconds["fetch"] = time.time() - t
        out = a.out or os.path.join(cache_root(), "tables", f"{name}-{text_name}"
                                    + (f"-calib-{calib_name}" if calib_name != text_name else ""))
        os.makedirs(out, exist_ok=True)
        stamp_out(out, a.model, calib_text, eval_text)

        log(f"loading {a.model}")
        try:  # this tool logs its own steps: transformers' per-tensor progress bars would bury them
            import transformers
            transformers.utils.logging.disable_progress_bar()
        except (ImportError, AttributeError):
            pass
        t = time.time()
        a.no_grad, a.model_dtype = False, "f32"
        loaded = hf.load_model(a, seq_len=a.seq_len, backward=True)
        seconds["load"] = time.time() - t
        info = hf.describe(loaded[0])
        log(f"{info['model_type']}: {info['num_layers']} layers, {info['heads']} heads on {info['kv_heads']} KV heads "
            f"of head_dim {info['head_dim']}")

        # Another text's calibration dump has its own name: a later run in the same --out never takes
        # one for the other.
        calib = os.path.join(out, f"calib-{a.calib_samples}x{a.seq_len}" if calib_name == text_name
                             else f"calib-{calib_name}-{a.calib_samples}x{a.seq_len}")
        evald = os.path.join(out, f"eval-{a.eval_samples}x{a.seq_len}")
        log(f"calibration dump: {a.calib_samples} × {a.seq_len} tokens with gradients -> {calib}")
        seconds["calibration dump"] = dump(a, loaded, calib_text, a.calib_samples, True, calib, "calibration")
        log(f"evaluation dump: {a.eval_samples} × {a.seq_len} tokens -> {evald}")
        seconds["evaluation dump"] = dump(a, loaded, eval_text, a.eval_samples, False, evald, "evaluation")

        books = {}  # method name -> [(seed, codebooks path, training summary)]
        seconds["training"] = 0.0
        for m in methods:
            if m["kind"] in ("trained", "cq"):
                books[m["name"]] = []
                for seed in range(a.first_seed, a.first_seed + a.seeds):  # each seed's K-means starts: a unit
                    log(f"training {m['name']} (seed {seed}) on every layer's keys and values")
                    path, summary, s = train_method(a, m, calib, evald, out, seed)
                    books[m["name"]].append((seed, path, summary))
                    seconds["training"] += s

                    def nm(v):
                        return f"{v:.4f}" if v is not None else "-"
                    log(f"  {m['name']} seed {seed}: {summary['settings']}; NMSE train {nm(summary['train_nmse'])}, "
                        f"held-out {nm(summary['heldout_nmse'])}; {s:.0f} s")

        log(f"perplexity: {a.eval_sequences} × {a.seq_len} tokens of the evaluation text, {len(methods)} methods")
        t = time.time()
        rows, tokens = measure_rows(a, loaded, info, methods, books, eval_text, out, text_name)
        seconds["perplexity"] = time.time() - t
        report = {"tool": "real_table.py", "model": a.model, "model_name": name, "model_title": title,
                  "model_type": info["model_type"], "head_dim": info["head_dim"], "text": text_name,
                  "text_title": text_title, "calib_text_name": calib_name, "calib_text": calib_text,
                  "out_of_domain": out_of_domain,
                  "eval_text": eval_text, "budget": a.budget, "seq_len": a.seq_len, "calib_samples": a.calib_samples,
                  "eval_samples": a.eval_samples, "eval_sequences": a.eval_sequences, "iters": a.iters,
                  "seeds": a.seeds, "fp32": rows[0]["perplexity"], "sequence_tokens": tokens,
                  "interval": stats.DESCRIPTION, "kv_values_per_token": 2 * info["num_layers"] * info["kv_heads"] *
                  info["head_dim"], "rows": rows, "seconds": seconds, "peak_rss_gib": peak_rss_gib(),
                  "calibration_dump": calib, "device": a.device}
        add_memory(report)
        # table.json and table.md: this run's; table-<budget>.*: kept beside the other budgets' tables.
        for stem in ("table", f"table-{a.budget}"):
            write_atomic(os.path.join(out, stem + ".json"), json.dumps(report, indent=1))
            write_atomic(os.path.join(out, stem + ".md"), markdown(report))
        if not a.no_db and os.access(a.gsrq, os.X_OK):
            run_gsrq(a.gsrq, ["runs", "add-ppl", os.path.join(out, "table.json")], "gsrq runs add-ppl")
        sys.stdout.write(markdown(report))
        print(f"\n{os.path.join(out, 'table.md')}, table.json")
        return 0
    except InputError as e:
        print(f"real_table.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
