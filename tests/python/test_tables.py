"""Tables one can trust: the bootstrap of tools/gsrqtools/stats.py against closed-form cases, the
seeds in its interval, tools/real_table.py's merge and refusals, and tools/claims.py: its verdicts on
tables whose answer is known, and docs/real-models.md's claims section equal to a fresh generation
from the raw tables. The tables here are synthetic (made below, no model runs); the document's are
the raw files real_table.py wrote.
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import claims  # noqa: E402
import real_table  # noqa: E402
from gsrqtools import stats  # noqa: E402


def tool(name, *args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "tools", name), *args], capture_output=True,
                          text=True, timeout=300)


def binomial_cdf(n, p, x):
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(x + 1))


def test_bootstrap_of_a_binary_mean_is_binomial():
    # As tests/tst_statistics.cpp: 6 of 20 sequences one nat worse. A replicate's mean difference is
    # Binomial(20, 0.3)/20, whose CDF steps over 0.025 and 0.975 with 0.007 to spare on each side:
    # with 20,000 replicates (standard error 0.0011) the percentile ends are the exact quantiles.
    n, k = 20, 6
    method, ref, tokens = np.zeros(n), np.zeros(n), [100] * n
    method[::3][:k] = 1
    assert method.sum() == k
    lo_x = next(x for x in range(n + 1) if binomial_cdf(n, k / n, x) >= 0.025)
    hi_x = next(x for x in range(n + 1) if binomial_cdf(n, k / n, x) >= 0.975)
    lo, hi = stats.delta_percent_interval(method, ref, tokens, resamples=20000)
    assert lo == pytest.approx(100 * math.expm1(lo_x / n), abs=1e-9)
    assert hi == pytest.approx(100 * math.expm1(hi_x / n), abs=1e-9)
    assert stats.delta_percent(method, ref, tokens) == pytest.approx(100 * math.expm1(0.3), abs=1e-12)


def test_seeds_widen_the_interval_to_cover_them():
    # Two seeds of one method, 0.1 and 0.3 nat worse than FP32 on every sequence: with sequences alone
    # each seed's interval is a point; over seeds the interval spans both and the point is their mean.
    ref, tokens = np.linspace(1, 4, 16), [511] * 16
    seeds = [ref + 0.1, ref + 0.3]
    lo, hi = stats.delta_percent_interval(seeds, ref, tokens)
    assert lo == pytest.approx(100 * math.expm1(0.1)) and hi == pytest.approx(100 * math.expm1(0.3))
    assert stats.delta_percent(seeds, ref, tokens) == pytest.approx(50 * (math.expm1(0.1) + math.expm1(0.3)))
    one = stats.delta_percent_interval(seeds[0], ref, tokens)
    assert one[0] == pytest.approx(one[1])


def test_contrast_of_a_gap_flips_with_the_order():
    rng = np.random.default_rng(1)
    ref = rng.uniform(2, 4, 32)
    a, b = ref + rng.normal(0.05, 0.02, 32), ref + rng.normal(0.10, 0.02, 32)
    tokens = [255] * 32
    v, (lo, hi) = stats.gap_interval(a, b, ref, tokens)
    w, (lo2, hi2) = stats.gap_interval(b, a, ref, tokens)
    assert v == pytest.approx(-w) and lo == pytest.approx(-hi2) and hi == pytest.approx(-lo2)
    assert hi < 0  # a is 0.05 nat better on average, with a spread of 0.03: 32 sequences tell them apart


def synthetic_table(tmp_path, name, seq_len=512, seeds=(0, 1, 2), methods=None, fp32_shift=0.0, calib=None):
    """A table.json as real_table.py writes it, from made-up per-sequence NLL (synthetic: no model ran).
    methods: {name: (family, bits, extra nat per sequence, per-seed spread)}."""
    rng = np.random.default_rng(7)
    n = 24
    tokens = [seq_len - 1] * n
    fp32 = (rng.uniform(2.5, 3.5, n) + fp32_shift).tolist()
    rows = [{"name": "fp32", "family": "fp32", "bits": 32, "effective_bits": 32, "settings": "FP32",
             "perplexity": real_table.hf_ppl.perplexity_of(fp32, tokens), "delta_percent": 0.0,
             "delta_percent_interval": None, "sequence_nll": fp32}]
    methods = methods or {"kivi-2": ("kivi", 3.0, 0.30, 0), "km-rq@1": ("km-rq", 1.0, 0.20, 0.01),
                          "gsrq@1": ("gsrq", 1.0, 0.15, 0.01), "km-rq@0.375": ("km-rq", 0.375, 0.60, 0.01),
                          "gsrq@0.375": ("gsrq", 0.375, 0.45, 0.01)}
    for m, (family, bits, extra, spread) in methods.items():
        noise = rng.normal(0, 0.01, n)
        if family == "kivi":
            nll = (np.array(fp32) + extra + noise).tolist()
            ppl = real_table.hf_ppl.perplexity_of(nll, tokens)
            rows.append({"name": m, "family": family, "bits": bits, "effective_bits": bits, "perplexity": ppl,
                         "delta_percent": 100 * (ppl / rows[0]["perplexity"] - 1), "sequence_nll": nll,
                         "settings": "2 bits, groups of 32"})
            continue
        per_seed = []
        for s in seeds:
            nll = (np.array(fp32) + extra + noise + spread * (s - 1)).tolist()
            ppl = real_table.hf_ppl.perplexity_of(nll, tokens)
            per_seed.append({"seed": s, "perplexity": ppl, "delta_percent": 100 * (ppl / rows[0]["perplexity"] - 1),
                             "train_nmse": 0.1, "heldout_nmse": 0.11, "effective_bits": bits + 0.01,
                             "codebooks": f"/synthetic/{m}-s{s}.safetensors", "codeword_values": 1000,
                             "sequence_nll": nll})
        rows.append(real_table.seeded_row({"name": m, "family": family, "bpa": bits},
                                          {"bpa": bits, "settings": f"synthetic {m}"}, per_seed, fp32, tokens))
    t = {"tool": "real_table.py", "model": "/synthetic", "model_name": "synthetic", "model_title": "A synthetic model",
         "model_type": "llama", "head_dim": 64, "text": "devil", "text_title": "synthetic text",
         "calib_text_name": calib or "devil", "out_of_domain": bool(calib), "budget": "table", "seq_len": seq_len, "calib_samples": 64,
         "eval_samples": 8, "eval_sequences": n, "iters": 25, "seeds": len(seeds), "fp32": rows[0]["perplexity"],
         "sequence_tokens": tokens, "interval": stats.DESCRIPTION, "kv_values_per_token": 2 * 30 * 192, "rows": rows,
         "seconds": {"training": 10.0}}
    real_table.add_memory(t)
    path = tmp_path / name
    path.write_text(json.dumps(t))
    return path


def test_merge_joins_seeds_and_refuses_other_settings(tmp_path):
    a = synthetic_table(tmp_path, "a.json", seeds=(0,))
    b = synthetic_table(tmp_path, "b.json", seeds=(1, 2))
    out = tmp_path / "merged.json"
    r = tool("real_table.py", "merge", str(out), str(a), str(b))
    assert r.returncode == 0, r.stderr
    merged = json.loads(out.read_text())
    gsrq = next(x for x in merged["rows"] if x["name"] == "gsrq@1")
    assert [s["seed"] for s in gsrq["seeds"]] == [0, 1, 2] and merged["seeds"] == 3
    assert gsrq["perplexity_sd"] > 0 and gsrq["delta_percent_interval"][0] < gsrq["delta_percent"]
    assert (tmp_path / "merged.md").read_text().count("| gsrq@1 | 1 |") == 1  # one row of the main table
    # Other settings are refused, naming the file and the field; nothing is written.
    other = synthetic_table(tmp_path, "c.json", seq_len=2048, seeds=(1,))
    r = tool("real_table.py", "merge", str(tmp_path / "m2.json"), str(a), str(other))
    assert r.returncode == 2 and "c.json" in r.stderr and "seq_len" in r.stderr, r.stderr
    assert not (tmp_path / "m2.json").exists()
    ood = synthetic_table(tmp_path, "d.json", seeds=(1,), calib="debian-reference")
    r = tool("real_table.py", "merge", str(tmp_path / "m3.json"), str(a), str(ood))
    assert r.returncode == 2 and "calib_text_name" in r.stderr, r.stderr
    shifted = synthetic_table(tmp_path, "e.json", seeds=(1,), fp32_shift=0.5)
    r = tool("real_table.py", "merge", str(tmp_path / "m4.json"), str(a), str(shifted))
    assert r.returncode == 2 and "other sequences" in r.stderr, r.stderr
    renamed = json.loads(b.read_text())
    next(x for x in renamed["rows"] if x["name"] == "gsrq@1")["settings"] = "D=8 R=2 K=16 gskm grad-log"
    (tmp_path / "f.json").write_text(json.dumps(renamed))
    r = tool("real_table.py", "merge", str(tmp_path / "m5.json"), str(a), str(tmp_path / "f.json"))
    assert r.returncode == 2 and "gsrq@1" in r.stderr and "not one method" in r.stderr, r.stderr


def test_refusals_name_the_file_or_flag(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"rows": [')
    r = tool("real_table.py", "merge", str(tmp_path / "o.json"), str(bad), str(bad))
    assert r.returncode == 2 and "broken.json" in r.stderr and "not a table.json" in r.stderr, r.stderr
    r = tool("claims.py", str(bad))
    assert r.returncode == 2 and "broken.json" in r.stderr, r.stderr
    r = tool("real_table.py", "--model", "smollm2", "--text", "devil", "--seeds", "0")
    assert r.returncode == 2 and "--seeds 0" in r.stderr, r.stderr
    old = json.loads(synthetic_table(tmp_path, "old.json").read_text())
    del old["sequence_tokens"]  # a table from before per-sequence figures were recorded
    (tmp_path / "old.json").write_text(json.dumps(old))
    r = tool("claims.py", str(tmp_path / "old.json"))
    assert r.returncode == 2 and "old.json" in r.stderr and "sequence_tokens" in r.stderr, r.stderr
    for field, value, phrase in (("sequence_tokens", [0] * 24, "positive count"),
                                 ("model_title", None, "no \"model_title\"")):
        t = json.loads(synthetic_table(tmp_path, "f.json").read_text())
        if value is None:
            del t[field]
        else:
            t[field] = value
        (tmp_path / "f.json").write_text(json.dumps(t))
        r = tool("claims.py", str(tmp_path / "f.json"))
        assert r.returncode == 2 and "f.json" in r.stderr and phrase in r.stderr, r.stderr
    t = json.loads(synthetic_table(tmp_path, "g.json").read_text())
    t["rows"][-1]["seeds"][0]["sequence_nll"] = [1.0]  # one NLL for 24 sequences
    (tmp_path / "g.json").write_text(json.dumps(t))
    r = tool("claims.py", str(tmp_path / "g.json"))
    assert r.returncode == 2 and "g.json" in r.stderr and "seeds" in r.stderr, r.stderr
    r = tool("real_table.py", "--model", "smollm2", "--text", "devil", "--first-seed", "-1")
    assert r.returncode == 2 and "--first-seed -1" in r.stderr, r.stderr


def test_claims_give_the_known_verdicts(tmp_path):
    # GSRQ is 0.05 nat (1 BPA) and 0.15 nat (0.375 BPA) better than KM-RQ on every sequence, with a
    # 0.01 spread: both gaps hold and the gap grows as bits fall. KIVI-2 (+0.30 nat) against GSRQ at
    # 0.375 (+0.45): does not hold. A method at the same extra as another: within the interval.
    path = synthetic_table(tmp_path, "t.json")
    text = claims.generate([str(path)])
    assert "GSRQ − KM-RQ at 1 BPA" in text and "GSRQ − KM-RQ at 0.375 BPA" in text
    def line(start):
        return next(ln.strip() for ln in text.splitlines() if ln.strip().startswith(start))
    assert "): holds:" in line("- GSRQ − KM-RQ at 1 BPA") and "): holds:" in line("- GSRQ − KM-RQ at 0.375 BPA")
    assert line("- the gap at 0.375 BPA minus the gap at 1 BPA").endswith("]")
    assert ": holds:" in line("- the gap at 0.375 BPA minus the gap at 1 BPA")
    assert "does not hold" in line("- GSRQ at 0.375 BPA − KIVI-2")
    level = synthetic_table(tmp_path, "level.json", methods={"km-rq@1": ("km-rq", 1.0, 0.2, 0.01),
                                                               "gsrq@1": ("gsrq", 1.0, 0.2, 0.01)})
    t2 = claims.generate([str(level)])
    assert "GSRQ − KM-RQ at 1 BPA" in t2 and "within the interval" in t2 and "not measured in these tables" in t2


def test_ablation_reads_the_main_methods_as_its_ends(tmp_path):
    # A table of the main methods (km-rq, gsrq) with ablation rows beside them: km-rq@1 is the
    # ablation's KM and gsrq@1 its GSKM with log weights (the same training in real_table.py), so
    # claim 4 compares gskm@1 with km-rq@1 and gsrq@1 with gskm@1, and claim 5 gsrq@1 with its τ rows.
    # GSKM (0.20 nat) sits between KM (0.25) and GSKM-log (0.15), 0.05 nat apart where the seeds
    # spread ±0.01; τ = 2 is worse (0.25), τ = 0.5 the same as τ = 1: holds, holds, holds, within.
    path = synthetic_table(tmp_path, "ablation.json", methods={
        "km-rq@1": ("km-rq", 1.0, 0.25, 0.01), "gsrq@1": ("gsrq", 1.0, 0.15, 0.01),
        "gskm@1": ("gskm", 1.0, 0.20, 0.01), "gsrq@1:tau2": ("gsrq", 1.0, 0.25, 0.01),
        "gsrq@1:tau0.5": ("gsrq", 1.0, 0.15, 0.01)})
    text = claims.generate([str(path)])
    def line(start):
        return next(ln.strip() for ln in text.splitlines() if ln.strip().startswith(start))
    assert ": holds:" in line("- GSKM against KM (no weights) at 1 BPA (gskm@1 − km-rq@1)")
    assert ": holds:" in line("- log weights on GSKM at 1 BPA (gsrq@1 − gskm@1)")
    assert ": holds:" in line("- τ = 1 against τ = 2 at 1 BPA (gsrq@1 − gsrq@1:tau2)")
    assert "within the interval" in line("- τ = 1 against τ = 0.5 at 1 BPA")
    # Without an ablation row, the main methods alone claim no ablation.
    main = claims.generate([str(synthetic_table(tmp_path, "main.json"))])
    assert "GSKM against KM" not in main and "τ = 1 against" not in main


def test_check_and_write_keep_a_document_generated(tmp_path):
    path = synthetic_table(tmp_path, "t.json")
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Title\n\nprose\n\n{claims.BEGIN}\nold\n{claims.END}\n\nmore prose\n")
    assert tool("claims.py", str(path), "--check", str(doc)).returncode == 1
    assert tool("claims.py", str(path), "--write", str(doc)).returncode == 0
    assert tool("claims.py", str(path), "--check", str(doc)).returncode == 0
    body = doc.read_text()
    assert body.startswith("# Title\n\nprose\n\n") and body.endswith("\n\nmore prose\n")
    doc.write_text(body.replace("holds:", "holds (edited):", 1))  # a hand edit is found
    assert tool("claims.py", str(path), "--check", str(doc)).returncode == 1
    r = tool("claims.py", str(path), "--check", str(tmp_path / "none.md"))
    assert r.returncode == 2 and "none.md" in r.stderr


def test_the_documents_claims_are_a_fresh_generation():
    # docs/real-models.md's claims come from the raw tables committed beside it, not from a hand.
    raw = os.path.join(ROOT, "docs", "real-models", "raw")
    assert [f for f in os.listdir(raw) if f.endswith(".json")], "no raw tables in docs/real-models/raw"
    r = tool("claims.py", "--check", os.path.join(ROOT, "docs", "real-models.md"))
    assert r.returncode == 0, r.stderr
