"""One model, two implementations: the bundled stories260K (llama2.c) converted to transformers'
LlamaForCausalLM by tools/llama2c_convert.py, and checked against gsrq's own C++ forward pass:

- transformers' perplexity (tools/hf_ppl.py) equals `gsrq ppl`'s on the same text;
- with the same codebooks (trained by `gsrq train` on the bundled sample), tools/hf_ppl.py equals
  `gsrq ppl -c`;
- tools/dump_kv.py's dump of the converted model equals the bundled sample's keys, values,
  queries and gradients (the sample was dumped from the llama2.c model on the same text).

Needs torch and transformers (tools/hf_env.sh) and a built gsrq.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
torch = pytest.importorskip("torch", reason="PyTorch is not installed (tools/hf_env.sh)")
pytest.importorskip("transformers", reason="transformers is not installed (tools/hf_env.sh)")
import dump_kv  # noqa: E402
import hf_check  # noqa: E402
import hf_ppl  # noqa: E402
import llama2c_convert  # noqa: E402

GSRQ = os.environ.get("GSRQ_CLI", os.path.join(ROOT, "build", "app", "cli", "gsrq"))
MODEL = os.path.join(ROOT, "resources", "models", "stories260K", "stories260K.bin")
TOKENIZER = os.path.join(ROOT, "resources", "models", "stories260K", "tok512.bin")
SAMPLE = os.path.join(ROOT, "resources", "samples", "stories260K-gpl3.safetensors")
ORIGINAL = os.path.join(ROOT, "..", "shared", "data", "realkv", "stories260K-gpl3")  # FP32 .npy, where present
GPL = "/usr/share/common-licenses/GPL-3"  # Debian's base-files: the text the sample was dumped on


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    if not os.path.exists(GSRQ):
        pytest.fail(f"gsrq is not built at {GSRQ}")
    d = str(tmp_path_factory.mktemp("hf") / "stories260K")
    llama2c_convert.to_hf(MODEL, TOKENIZER, d)
    return d


def gsrq_ppl(*args):
    r = subprocess.run([GSRQ, "--no-db", "ppl", MODEL, "--tokenizer", TOKENIZER, "--backend", "cpu", "--json", *args],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def hf_ppl_rows(capsys, *args):
    assert hf_ppl.main([*args, "--device", "cpu", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["results"]


def test_weights_round_trip(converted, tmp_path):
    """to-hf then to-llama2c gives back the same header and weights, byte for byte. The RoPE tables
    that follow them (which gsrq and llama2.c's run.c recompute) are regenerated in float64 and
    rounded once: within float32 rounding of the original's."""
    back, tok = str(tmp_path / "back.bin"), str(tmp_path / "tok.bin")
    llama2c_convert.to_llama2c(converted, back, tok)
    cfg, w = llama2c_convert.read_llama2c(MODEL)
    cfg2, w2 = llama2c_convert.read_llama2c(back)
    assert cfg == cfg2
    for name in w:
        if name.startswith("freq_"):
            # The original's angles pos·θ^(−2i/d) were float32: up to 511·2^−24 ≈ 3e-5 radians off.
            assert np.abs(w[name] - w2[name]).max() <= 1e-4, name
        else:
            assert np.array_equal(w[name], w2[name]), name
    # The tokenizer comes back with the same pieces (scores are −id: the same merge order).
    pieces, _ = llama2c_convert.read_tokenizer(TOKENIZER, cfg["vocab"])
    pieces2, _ = llama2c_convert.read_tokenizer(tok, cfg["vocab"])
    assert pieces2 == pieces


def test_transformers_perplexity_equals_gsrq(converted, capsys):
    args = ["--text", GPL, "--seq-len", "256", "--sequences", "4"]
    ours = gsrq_ppl(*args)
    theirs = hf_ppl_rows(capsys, "--model", converted, *args)
    p_ours = ours["results"][0]["perplexity"]
    p_theirs = theirs[0]["perplexity"]
    # Two float32 forward passes (Eigen's and torch's) over 5 layers: summation order only.
    assert abs(p_theirs - p_ours) <= 1e-4 * p_ours, (p_theirs, p_ours)


def test_codebooks_in_both_implementations(converted, tmp_path, capsys):
    books = str(tmp_path / "books.safetensors")
    r = subprocess.run([GSRQ, "--no-db", "train", SAMPLE, "--dim", "8", "--stages", "2", "--k", "16", "--iters", "10",
                        "--out", books, "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    args = ["--text", GPL, "--seq-len", "256", "--sequences", "4"]
    ours = gsrq_ppl(*args, "-c", books)
    theirs = hf_ppl_rows(capsys, "--model", converted, *args, "-c", books)
    p_ours = ours["results"][1]["perplexity"]
    p_fp32 = theirs[0]["perplexity"]
    p_theirs = theirs[1]["perplexity"]
    effect = abs(p_theirs - p_fp32)
    assert effect > 1e-2 * p_fp32  # the codebooks do change the predictions (by about 2%)
    # Greedy nearest-codeword encoding in both. The keys the two forward passes compute differ by
    # float32 rounding (≤ 1e-4 relative, test_dump_equals_the_bundled_sample), which flips the
    # nearest codeword of a few rows on near-ties: the two agree to 5% of the codebooks' effect
    # (seen: 1.2%), where a wrong layout or pair order would miss by more than the effect itself.
    assert abs(p_theirs - p_ours) <= 0.05 * effect, (p_theirs, p_ours, p_fp32)


def test_kivi_in_both_implementations(converted, capsys):
    """tools/hf_ppl.py --methods kivi-B against `gsrq ppl --methods kivi-B` on the same model and text:
    keys quantized per channel after RoPE (hf_ppl rotates transformers' rotate-half keys, gsrq its
    interleaved ones: per-channel groups do not see the channels' order), values per token, FP16
    scales and zeros, the same honest bits."""
    args = ["--text", GPL, "--seq-len", "256", "--sequences", "4"]
    ours = {m["method"]: m for m in gsrq_ppl(*args, "--methods", "fp32,kivi-2,kivi-1,kivi-2g16r64")["methods"]}
    theirs = {r["codebooks"]: r for r in hf_ppl_rows(capsys, "--model", converted, *args,
                                                      "--methods", "kivi-2,kivi-1,kivi-2g16r64")}
    fp32 = ours["fp32"]["perplexity"]
    for name in ("kivi-2", "kivi-1", "kivi-2g16r64"):
        o, t = ours[name]["perplexity"], theirs[name]["perplexity"]
        effect = abs(o - fp32)
        assert effect > 1e-3 * fp32, (name, o, fp32)  # KIVI does change the predictions
        # Round-to-nearest on keys that the two forward passes compute to float32 rounding apart
        # (≤ 1e-4 relative) flips a value on a near-tie now and then: the two agree to 5% of KIVI's
        # effect, where a wrong axis, group or window misses by more than the effect itself.
        assert abs(t - o) <= 0.05 * effect, (name, t, o, fp32)
        assert theirs[name]["bpa"] == pytest.approx(ours[name]["bits"], rel=1e-12), name


@pytest.fixture(scope="module")
def hf_dump(converted, tmp_path_factory):
    """tools/dump_kv.py's dump of the converted model on the text the sample was dumped on."""
    d = tmp_path_factory.mktemp("dump")
    text = d / "gpl.txt"
    with open(GPL, encoding="utf-8") as f:
        text.write_text(hf_ppl.reflow(f.read()))
    out = str(d / "dump")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "dump_kv.py"), "--model", converted, "--text",
                        str(text), "--samples", "4", "--seq-len", "512", "--out", out, "--device", "cpu",
                        "--dtype", "f32", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def test_codebooks_of_the_transformers_dump_in_both(converted, hf_dump, tmp_path, capsys):
    """Codebooks trained on the transformers model's own keys (rotate-half pairs, as the file records)
    run in gsrq's llama2.c forward pass, which puts its interleaved keys in their order."""
    books = str(tmp_path / "books.safetensors")
    r = subprocess.run([GSRQ, "--no-db", "train", hf_dump, "--dim", "8", "--stages", "2", "--k", "16", "--iters", "10",
                        "--out", books, "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    args = ["--text", GPL, "--seq-len", "256", "--sequences", "4"]
    ours = gsrq_ppl(*args, "-c", books)["results"][1]["perplexity"]
    theirs = hf_ppl_rows(capsys, "--model", converted, *args, "-c", books)
    fp32, quantized = theirs[0]["perplexity"], theirs[1]["perplexity"]
    effect = abs(quantized - fp32)
    assert effect > 5e-3 * fp32  # about 0.8%
    # As test_codebooks_in_both_implementations: near-tie flips only. Without the pair order the
    # keys' codewords would be matched to other features, and the two would differ by far more.
    assert abs(ours - quantized) <= 0.05 * effect, (ours, quantized, fp32)


def test_dump_equals_the_bundled_sample(hf_dump):
    mine, meta = hf_check.read_dump(hf_dump)
    sample, _ = hf_check.read_safetensors(SAMPLE)
    # transformers' rotate-half feature j of a head is llama2.c's interleaved feature order[j].
    order = llama2c_convert.interleaved_feature_order(8)
    originals = os.path.isdir(ORIGINAL)
    for l in range(5):
        for kind, permuted, rel in (("key", True, 2.0 ** -11), ("value", False, 2.0 ** -11),
                                    ("query", True, 2.0 ** -11), ("key_grad", True, 2.0 ** -8),
                                    ("value_grad", False, 2.0 ** -8)):
            ref = sample[f"layers.{l}.{kind}"].astype(np.float64)
            if permuted:
                ref = ref[..., order]
            got = mine[f"layers.{l}.{kind}"].astype(np.float64)
            # The sample stores F16 (keys, values, queries) and BF16 (gradients): half an ulp of
            # the stored value plus float32 noise of the two forward passes.
            scale = np.abs(ref).max()
            assert np.all(np.abs(got - ref) <= rel * np.abs(ref) + 1e-5 * scale), (l, kind)
            if originals:
                npy = {"key": "k_pre", "value": "v", "query": "q_pre", "key_grad": "grad_k_pre",
                       "value_grad": "grad_v"}[kind]
                o = np.load(os.path.join(ORIGINAL, f"layer{l:02d}_{npy}.npy")).astype(np.float64)
                o = o.reshape(got.shape[0], -1, 8)
                if permuted:
                    o = o[..., order]
                # FP32 against FP32: the two implementations' summation order only.
                assert np.abs(got - o).max() <= 1e-4 * np.abs(o).max(), (l, kind)
