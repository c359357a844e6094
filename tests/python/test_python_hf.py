"""gsrq.hf: GSRQ codebooks as a transformers KV cache, on the bundled stories260K converted to
transformers (tools/llama2c_convert.py), with codebooks gsrq train makes from the bundled sample:

- perplexity through the cache (every token encoded: window 0) equals tools/hf_ppl.py's, whose
  hooks replace the key and value projections' outputs by the same codebooks' reconstructions;
- greedy generation through it: with a window as long as the text it is FP32's exactly; with
  window 0 it is the same as recomputing every step with the hooks; its agreement with FP32 is printed;
- its memory, against transformers' DynamicCache at the same length.

Needs torch and transformers (tools/hf_env.sh), the package built and the gsrq CLI.
"""
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.environ.get("GSRQ_PYTHON_PATH", os.path.join(ROOT, "build", "python")))
torch = pytest.importorskip("torch", reason="PyTorch is not installed (tools/hf_env.sh)")
pytest.importorskip("transformers", reason="transformers is not installed (tools/hf_env.sh)")
gsrq = pytest.importorskip("gsrq", reason="the Python package is not built (cmake -DGSRQ_BUILD_PYTHON=ON)")
import gsrq.hf  # noqa: E402
import dump_kv  # noqa: E402
import hf_ppl  # noqa: E402
import llama2c_convert  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache  # noqa: E402

GSRQ = os.environ.get("GSRQ_CLI", os.path.join(ROOT, "build", "app", "cli", "gsrq"))
MODEL = os.path.join(ROOT, "resources", "models", "stories260K", "stories260K.bin")
TOKENIZER = os.path.join(ROOT, "resources", "models", "stories260K", "tok512.bin")
SAMPLE = os.path.join(ROOT, "resources", "samples", "stories260K-gpl3.safetensors")
GPL = "/usr/share/common-licenses/GPL-3"  # Debian's base-files: the text the sample was dumped on


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("hf") / "stories260K")
    llama2c_convert.to_hf(MODEL, TOKENIZER, d)
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    m.eval()
    return m, AutoTokenizer.from_pretrained(d)


@pytest.fixture(scope="module")
def books(tmp_path_factory):
    """Codebooks of every layer's keys (before RoPE, interleaved pairs) and values: 4 subspaces of
    D = 8, R = 2, K = 16 (1 bit per activation)."""
    path = str(tmp_path_factory.mktemp("books") / "books.safetensors")
    r = subprocess.run([GSRQ, "--no-db", "train", SAMPLE, "--dim", "8", "--stages", "2", "--k", "16", "--iters", "10",
                        "--out", path, "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return path


def sequences(tok, n=4, length=256):
    seqs, _ = dump_kv.tokenize(tok, GPL, n, length, prepare=hf_ppl.reflow)
    return seqs


def cache_perplexity(m, seqs, books, window):
    nll, n = 0.0, 0
    with torch.no_grad():
        for s in seqs:
            x = torch.tensor([s])
            out = m(input_ids=x, labels=x, cache=gsrq.hf.GsrqCache(m, books, window=window), use_cache=True)
            nll += float(out.loss) * (len(s) - 1)
            n += len(s) - 1
    return math.exp(nll / n)


def hook_perplexity(m, seqs, books):
    meta, tensors = hf_ppl.load_codebooks(books)
    hooks = hf_ppl.CodebookHooks(m, dump_kv.describe(m), meta, tensors, torch, "cpu")
    try:
        return hf_ppl.perplexity(m, seqs, "cpu", torch)
    finally:
        hooks.remove()


def test_perplexity_through_the_cache_equals_the_hooks(model, books):
    m, tok = model
    seqs = sequences(tok)
    fp32 = hf_ppl.perplexity(m, seqs, "cpu", torch)
    hooked = hook_perplexity(m, seqs, books)
    cached = cache_perplexity(m, seqs, books, window=0)
    print(f"perplexity: fp32 {fp32:.4f}, hooks {hooked:.4f}, cache {cached:.4f}")
    effect = abs(hooked - fp32)
    assert effect > 1e-2 * fp32  # the codebooks do change the predictions (by about 2%)
    # Both encode with the nearest codeword, greedily, on the same pre-RoPE keys; the cache's are
    # taken back from the rotated keys, which float32 rounds (~1e-7 relative): that may flip a
    # near-tie, far below the codebooks' effect (seen: 1e-7 of the perplexity).
    assert abs(cached - hooked) <= 1e-4 * hooked, (cached, hooked)
    # The full-precision window lowers the error it adds.
    windowed = cache_perplexity(m, seqs, books, window=64)
    assert abs(windowed - fp32) < effect


def greedy_with_hooks(m, prompt, steps, books):
    meta, tensors = hf_ppl.load_codebooks(books)
    hooks = hf_ppl.CodebookHooks(m, dump_kv.describe(m), meta, tensors, torch, "cpu")
    s = list(prompt)
    try:
        with torch.no_grad():
            for _ in range(steps):
                s.append(int(m(input_ids=torch.tensor([s]), use_cache=False).logits[0, -1].argmax()))
    finally:
        hooks.remove()
    return s


def generate(m, prompt, steps, cache):
    with torch.no_grad():
        out = m.generate(torch.tensor([prompt]), cache=cache, max_new_tokens=steps, do_sample=False,
                         attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return out[0].tolist()


def test_greedy_generation_through_the_cache(model, books):
    m, tok = model
    prompt = tok("Once upon a time, there was a little")["input_ids"]
    steps = 40
    fp32_cache = DynamicCache()
    fp32 = generate(m, prompt, steps, fp32_cache)
    # A window that holds every token encodes none: FP32's generation exactly.
    whole = gsrq.hf.GsrqCache(m, books, window=len(prompt) + steps)
    assert generate(m, prompt, steps, whole) == fp32
    assert whole.memory()["codes"] == 0
    # Window 0: every token's keys and values are codes from the step they arrive, which is what
    # recomputing the whole text at every step with the hooks does.
    coded = gsrq.hf.GsrqCache(m, books, window=0)
    ids = generate(m, prompt, steps, coded)
    assert ids == greedy_with_hooks(m, prompt, steps, books)
    for window in (0, 8, 16):
        out = ids if window == 0 else generate(m, prompt, steps, gsrq.hf.GsrqCache(m, books, window=window))
        same = sum(a == b for a, b in zip(out[len(prompt):], fp32[len(prompt):]))
        prefix = next((i for i, (a, b) in enumerate(zip(out[len(prompt):], fp32[len(prompt):])) if a != b), steps)
        print(f"window {window:2d}: {same}/{steps} generated tokens equal FP32's, the first {prefix} in a row")
    print("fp32:  ", tok.decode(fp32))
    print("gsrq:  ", tok.decode(ids))

    # Memory at the same length: codes (one byte per stage and subspace: K = 16 ≤ 256), the
    # codebooks once, against what DynamicCache holds (float32 keys and values).
    mem = coded.memory()
    layers, kv_heads, head_dim = 5, 4, 8
    tokens = len(ids) - 1  # the last token generated is never fed back
    assert mem["tokens"] == tokens
    assert mem["dynamic_cache"] == gsrq.hf.dynamic_cache_bytes(fp32_cache) == 2 * layers * kv_heads * tokens * head_dim * 4
    assert mem["codes"] == 2 * layers * tokens * 4 * 2  # 4 subspaces × 2 stages, a byte each
    assert mem["codebooks"] == 2 * layers * 4 * 2 * 16 * 8 * 4
    print(f"at {tokens} tokens: DynamicCache {mem['dynamic_cache']} B; GsrqCache codes {mem['codes']} B + "
          f"window {mem['full_precision']} B + codebooks {mem['codebooks']} B = {mem['total']} B "
          f"({mem['ratio']:.3f} of it; codes alone {mem['codes'] / mem['dynamic_cache']:.4f})")


def test_bad_codebooks_are_named(model, books, tmp_path):
    m, _ = model
    other = str(tmp_path / "other.safetensors")
    r = subprocess.run([GSRQ, "--no-db", "train", SAMPLE, "--tensors", "layers.0.value", "--dim", "16", "--stages", "1",
                        "--k", "16", "--iters", "2", "--out", other, "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with pytest.raises(gsrq.InvalidInput, match="window -1"):
        gsrq.hf.GsrqCache(m, books, window=-1)
    with pytest.raises(gsrq.InvalidInput, match=str(tmp_path / "missing")):
        gsrq.hf.GsrqCache(m, str(tmp_path / "missing"))
    # Codebooks over other features than the model's kv_heads × head_dim are refused by name.
    small = gsrq.CodebookFile.load(other)
    cb = small.get("layers.0.value")
    f = gsrq.CodebookFile()
    f.metadata = small.metadata
    f.put("layers.0.value", gsrq.train(gsrq.open_dump(SAMPLE).rows("layers.0.value")[:, :16], dim=16, stages=1, k=16,
                                       iterations=2).codebooks)
    with pytest.raises(gsrq.InvalidInput, match="layers.0.value cover 16 features"):
        gsrq.hf.GsrqCache(m, f)
    assert cb.features == 32
