#!/usr/bin/env python3
"""The paper's tables on a pretrained model, in one command: fetch, calibrate, train, measure, record.

    python3 tools/real_table.py --model smollm2 --text devil --budget quick        # minutes: 4 methods
    python3 tools/real_table.py --model smollm2 --text devil --budget table        # Table 1's layout
    python3 tools/real_table.py --model qwen2.5-coder-1.5b --text devil --budget ablation
    python3 tools/real_table.py --model ~/models/my-llama --calib c.txt --eval e.txt --device cuda

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
import os
import re
import subprocess
import sys
import time

import dump_kv
import hf_ppl
from gsrqtools import hf, kivi, models, texts
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


def train_method(a, m, calib, evald, out_dir):
    """Codebooks of method m on every layer's keys and values; returns (path, summary)."""
    # The name says what trained them (method, iterations, calibration dump), so a later run with
    # other settings in the same --out trains anew instead of reusing them.
    tag = re.sub(r"[^A-Za-z0-9.@-]+", "_", m["name"]) + f"-i{a.iters}-{os.path.basename(os.path.normpath(calib))}"
    path = os.path.join(out_dir, f"codebooks-{tag}.safetensors")
    report = path + ".json"
    if os.path.isfile(path) and os.path.isfile(report):
        with open(report, encoding="utf-8") as f:
            return path, json.load(f), 0.0
    args = ["train", calib, "--eval", evald, "--iters", str(a.iters), "--out", path, "--force", "--json", "-q",
            "--attention-queries", "0"]
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
               "seconds": seconds}
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


def markdown(report):
    lines = [f"# {report['model_title']} on {report['text_title']}", "",
             f"FP32 perplexity {report['fp32']:.4f} on {report['eval_sequences']} × {report['seq_len']} tokens of "
             f"the evaluation part; calibration {report['calib_samples']} × {report['seq_len']} tokens; every layer's "
             "keys and values quantized.", "",
             "| method | bits | effective bits¹ | perplexity | Δ% | train NMSE | held-out NMSE | held-out / train | settings |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in report["rows"]:
        def f(v, fmt):
            return fmt.format(v) if v is not None else "-"
        ratio = (r["heldout_nmse"] / r["train_nmse"] if r.get("heldout_nmse") and r.get("train_nmse") else None)
        lines.append(f"| {r['name']} | {f(r['bits'], '{:.3g}')} | {f(r.get('effective_bits'), '{:.3g}')} | "
                     f"{r['perplexity']:.4f} | {r['delta_percent']:+.2f} | {f(r.get('train_nmse'), '{:.4f}')} | "
                     f"{f(r.get('heldout_nmse'), '{:.4f}')} | {f(ratio, '{:.2f}')} | {r.get('settings', '')} |")
    lines += ["", "¹ with the codewords (FP16) spread over the calibration tokens, as `gsrq train` counts them; a "
              "deployment spreads them over every token the codebooks serve.", "",
              "Steps (seconds on this machine): " + ", ".join(f"{k} {v:.0f}" for k, v in report["seconds"].items()),
              f"Peak resident memory: {report['peak_rss_gib']:.1f} GiB." if report.get("peak_rss_gib") else ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a model of tools/python/models.json, a GGUF file or a model directory")
    ap.add_argument("--text", help="a text of tools/texts.py (its calibration and evaluation parts)")
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
        else:
            if not (a.calib and a.eval):
                raise InputError("give --text NAME (tools/texts.py --list), or --calib FILE and --eval FILE")
            for flag, p in (("--calib", a.calib), ("--eval", a.eval)):
                if not os.path.isfile(p):
                    raise InputError(f"{flag} {p}: no such file")
            calib_text, eval_text, text_title = a.calib, a.eval, f"{a.calib} / {a.eval}"
            text_name = os.path.splitext(os.path.basename(a.eval))[0]
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
        out = a.out or os.path.join(cache_root(), "tables", f"{name}-{text_name}")
        os.makedirs(out, exist_ok=True)

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

        calib = os.path.join(out, f"calib-{a.calib_samples}x{a.seq_len}")
        evald = os.path.join(out, f"eval-{a.eval_samples}x{a.seq_len}")
        log(f"calibration dump: {a.calib_samples} × {a.seq_len} tokens with gradients -> {calib}")
        seconds["calibration dump"] = dump(a, loaded, calib_text, a.calib_samples, True, calib, "calibration")
        log(f"evaluation dump: {a.eval_samples} × {a.seq_len} tokens -> {evald}")
        seconds["evaluation dump"] = dump(a, loaded, eval_text, a.eval_samples, False, evald, "evaluation")

        books = {}
        seconds["training"] = 0.0
        for m in methods:
            if m["kind"] in ("trained", "cq"):
                log(f"training {m['name']} on every layer's keys and values")
                path, summary, s = train_method(a, m, calib, evald, out)
                books[m["name"]] = (path, summary)
                seconds["training"] += s
                def nm(v):
                    return f"{v:.4f}" if v is not None else "-"
                log(f"  {m['name']}: {summary['settings']}; NMSE train {nm(summary['train_nmse'])}, held-out "
                    f"{nm(summary['heldout_nmse'])}; {s:.0f} s")

        log(f"perplexity: {a.eval_sequences} × {a.seq_len} tokens of the evaluation text, {len(methods)} methods")
        t = time.time()
        args = ["--model", a.model, "--text", eval_text, "--seq-len", str(a.seq_len), "--sequences",
                str(a.eval_sequences), "--device", a.device, "--json",
                "--methods", ",".join(m["name"] for m in methods if m["kind"] == "kivi")]
        for m in methods:
            if m["name"] in books:
                args += ["-c", books[m["name"]][0]]
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = hf_ppl.main(args, loaded=loaded)
        if rc == 2:
            raise InputError("tools/hf_ppl.py refused its input (its message is above)")
        if rc != 0:
            raise RuntimeError(f"tools/hf_ppl.py exited {rc}")
        res = json.loads(buf.getvalue())["results"]
        seconds["perplexity"] = time.time() - t
        fp32 = res[0]["perplexity"]
        by_source = {r["codebooks"]: r for r in res}
        rows = []
        for m in methods:
            if m["kind"] == "fp32":
                rows.append({"name": "fp32", "family": "fp32", "bits": 32, "effective_bits": 32, "perplexity": fp32,
                             "settings": "FP32"})
            elif m["kind"] == "kivi":
                r = by_source[m["name"]]
                k = r["kivi"]
                rows.append({"name": m["name"], "family": "kivi", "bits": r["bpa"], "effective_bits": r["bpa"],
                             "perplexity": r["perplexity"],
                             "settings": f"{k['bits']} bit{'s' if k['bits'] != 1 else ''}, groups of {k['group']}"
                                         + (f", the last {k['residual']} tokens in FP16" if k["residual"] else "")})
            else:
                path, s = books[m["name"]]
                r = by_source[path]
                rows.append({"name": m["name"], "family": m["family"], "bits": s["bpa"] if s["bpa"] else m["bpa"],
                             "effective_bits": s["effective_bpa"], "perplexity": r["perplexity"],
                             "train_nmse": s["train_nmse"], "heldout_nmse": s["heldout_nmse"],
                             "settings": s["settings"], "codebooks": path})
        for r in rows:
            r["delta_percent"] = 100 * (r["perplexity"] - fp32) / fp32
        report = {"tool": "real_table.py", "model": a.model, "model_name": name, "model_title": title,
                  "model_type": info["model_type"], "head_dim": info["head_dim"], "text": text_name,
                  "text_title": text_title, "calib_text": calib_text, "eval_text": eval_text, "budget": a.budget,
                  "seq_len": a.seq_len, "calib_samples": a.calib_samples, "eval_samples": a.eval_samples,
                  "eval_sequences": a.eval_sequences, "iters": a.iters, "fp32": fp32, "rows": rows,
                  "seconds": seconds, "peak_rss_gib": peak_rss_gib(), "calibration_dump": calib,
                  "device": a.device}
        # table.json and table.md: this run's; table-<budget>.*: kept beside the other budgets' tables.
        for stem in ("table", f"table-{a.budget}"):
            with open(os.path.join(out, stem + ".json.tmp"), "w", encoding="utf-8") as f:
                json.dump(report, f, indent=1)
            os.replace(os.path.join(out, stem + ".json.tmp"), os.path.join(out, stem + ".json"))
            with open(os.path.join(out, stem + ".md.tmp"), "w", encoding="utf-8") as f:
                f.write(markdown(report))
            os.replace(os.path.join(out, stem + ".md.tmp"), os.path.join(out, stem + ".md"))
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
