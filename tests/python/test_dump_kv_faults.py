"""tools/dump_kv.py as a long cluster job: stopped by a signal it cleans up or keeps what --resume
needs; a resumed dump is byte-identical to an uninterrupted one; staging a killed run left is reused
or removed; the free space is checked first; and a corpus of broken model directories and texts
each gets one line naming the input, exit code 2, no traceback.

A transformers Llama saved as a model directory, as a user's would be (needs torch and transformers).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
torch = pytest.importorskip("torch", reason="PyTorch is not installed (tools/hf_env.sh)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (tools/hf_env.sh)")
tokenizers = pytest.importorskip("tokenizers", reason="tokenizers is not installed (tools/hf_env.sh)")
import dump_kv  # noqa: E402

WORDS = "the a cache key value query token head layer model small quick river stone tree light and but".split()
SAMPLES, SEQ = 60, 96


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("model") / "tiny-llama"
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(sorted(set(WORDS)))}}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                               unk_token="<unk>")
    # Large enough that a sequence takes a few milliseconds, so a signal lands mid-dump.
    cfg = transformers.LlamaConfig(vocab_size=len(vocab), hidden_size=128, intermediate_size=256,
                                   num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=256)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return str(d)


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    p = tmp_path_factory.mktemp("text") / "words.txt"
    words = [WORDS[(i * 7 + i // 5) % len(WORDS)] for i in range(SAMPLES * SEQ + 100)]
    p.write_text(" ".join(words))
    return str(p)


def cmd(model, text, out, *extra, samples=SAMPLES):
    return [sys.executable, os.path.join(ROOT, "tools", "dump_kv.py"), "--model", model, "--text", text, "--samples",
            str(samples), "--seq-len", str(SEQ), "--out", out, "--device", "cpu", "--dtype", "f32", "--quiet",
            *extra]


def env():
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def run(args):
    return subprocess.run(args, capture_output=True, text=True, env=env(), timeout=600)


def files_of(d):
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


def staging_leftovers(parent):
    return [f for f in os.listdir(parent) if f.endswith(".dump_kv") or ".dump_kv-" in f]


def stop_midway(args, stage, sig):
    """Starts the exporter and sends sig once its progress file shows at least two finished sequences."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    progress = os.path.join(stage, "progress.json")
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        try:
            with open(progress) as f:
                if json.load(f)["done"] >= 2:
                    break
        except (OSError, ValueError):
            pass
        time.sleep(0.005)
    p.send_signal(sig)
    out, err = p.communicate(timeout=300)
    return p.returncode, err


@pytest.fixture(scope="module")
def reference(model_dir, text, tmp_path_factory):
    """An uninterrupted dump: what every resumed one must equal, byte for byte."""
    out = str(tmp_path_factory.mktemp("ref") / "dump")
    r = run(cmd(model_dir, text, out))
    assert r.returncode == 0, r.stderr
    return files_of(out)


def test_sigterm_keeps_what_resume_needs_and_resume_is_identical(model_dir, text, reference, tmp_path):
    out = str(tmp_path / "dump")
    stage = dump_kv.staging_path(out)
    rc, err = stop_midway(cmd(model_dir, text, out, "--resume"), stage, signal.SIGTERM)
    assert rc == 128 + signal.SIGTERM, err
    assert "stopped by SIGTERM" in err and "--resume" in err and "Traceback" not in err
    done = json.load(open(os.path.join(stage, "progress.json")))["done"]
    assert 2 <= done < SAMPLES and not os.path.exists(out)
    r = run(cmd(model_dir, text, out, "--resume"))
    assert r.returncode == 0, r.stderr
    assert f"resuming from {stage}: {done} of {SAMPLES}" in r.stderr
    assert files_of(out) == reference
    assert staging_leftovers(str(tmp_path)) == []


def test_sigterm_without_resume_leaves_nothing(model_dir, text, tmp_path):
    out = str(tmp_path / "dump")
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        rc, err = stop_midway(cmd(model_dir, text, out), dump_kv.staging_path(out), sig)
        assert rc == 128 + sig, err
        assert f"stopped by {signal.Signals(sig).name}" in err and "nothing was kept" in err
        assert os.listdir(str(tmp_path)) == []


def test_killed_run_staging_is_reused_with_resume_and_removed_without(model_dir, text, reference, tmp_path):
    out = str(tmp_path / "dump")
    stage = dump_kv.staging_path(out)
    rc, _ = stop_midway(cmd(model_dir, text, out, "--resume"), stage, signal.SIGKILL)
    assert rc == -signal.SIGKILL and os.path.isdir(stage)
    kept = stage + ".copy"
    shutil.copytree(stage, kept)
    # Without --resume: removed, with a message, and the dump starts over.
    r = run(cmd(model_dir, text, out))
    assert r.returncode == 0 and f"removing the staging {stage}" in r.stderr, r.stderr
    assert files_of(out) == reference and not os.path.exists(stage)
    # With --resume: the killed run's spool (maybe cut mid-sequence) is reused.
    shutil.rmtree(out)
    shutil.move(kept, stage)
    r = run(cmd(model_dir, text, out, "--resume"))
    assert r.returncode == 0 and "resuming from" in r.stderr, r.stderr
    assert files_of(out) == reference
    assert staging_leftovers(str(tmp_path)) == []


def test_resume_with_other_settings_starts_over(model_dir, text, tmp_path):
    out = str(tmp_path / "dump")
    stage = dump_kv.staging_path(out)
    rc, _ = stop_midway(cmd(model_dir, text, out, "--resume"), stage, signal.SIGTERM)
    assert rc == 128 + signal.SIGTERM
    r = run(cmd(model_dir, text, out, "--resume", "--no-grad"))
    assert r.returncode == 0 and "made with other settings" in r.stderr, r.stderr


def test_free_space_is_checked_before_the_first_sequence(model_dir, text, tmp_path):
    out = str(tmp_path / "dump")
    r = run(cmd(model_dir, text, out, samples=10 ** 9))
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "--out" in line and "more bytes at its peak" in line and "free" in line
    assert os.listdir(str(tmp_path)) == []


def broken(kind, model_dir, tmp_path):
    """(model directory, text file, what the message must name) for one kind of bad input."""
    d = str(tmp_path / "model")
    shutil.copytree(model_dir, d)
    t = str(tmp_path / "text.txt")
    with open(t, "w") as f:
        f.write(" ".join(WORDS * 50))
    weights = os.path.join(d, "model.safetensors")
    if kind == "truncated weights":
        with open(weights, "r+b") as f:
            f.truncate(os.path.getsize(weights) // 2)
        return d, t, "--model"
    if kind == "weights header cut":
        with open(weights, "r+b") as f:
            f.truncate(40)
        return d, t, "--model"
    if kind == "wrong dtype":
        import safetensors.torch as st
        w = st.load_file(weights)
        w = {k: (v.to(torch.int32) if k.endswith("k_proj.weight") else v) for k, v in w.items()}
        st.save_file(w, weights, metadata={"format": "pt"})
        return d, t, "--model"
    if kind == "wrong shape":
        import safetensors.torch as st
        w = st.load_file(weights)
        w = {k: (v[:, :-1].contiguous() if k.endswith("v_proj.weight") else v) for k, v in w.items()}
        st.save_file(w, weights, metadata={"format": "pt"})
        return d, t, "--model"
    if kind == "no tokenizer":
        for f in os.listdir(d):
            if "token" in f or f.startswith("special"):
                os.remove(os.path.join(d, f))
        return d, t, "--model"
    if kind == "unsupported architecture":
        cfg = json.load(open(os.path.join(d, "config.json")))
        cfg["model_type"], cfg["architectures"] = "gpt2", ["GPT2LMHeadModel"]
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
        return d, t, "--model"
    if kind == "corrupt config":
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write("{not json")
        return d, t, "--model"
    if kind == "no such directory":
        return str(tmp_path / "nowhere" / "model"), t, "--model"
    if kind == "text not UTF-8":
        with open(t, "wb") as f:
            f.write(b"the cache \xff\xfe key " * 100)
        return d, t, "--text"
    if kind == "empty text":
        open(t, "w").close()
        return d, t, "--text"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["truncated weights", "weights header cut", "wrong dtype", "wrong shape",
                                  "no tokenizer", "unsupported architecture", "corrupt config", "no such directory",
                                  "text not UTF-8", "empty text"])
def test_bad_input_is_one_named_line(kind, model_dir, tmp_path):
    d, t, flag = broken(kind, model_dir, tmp_path)
    out = str(tmp_path / "dump")
    r = run(cmd(d, t, out, samples=2))
    assert r.returncode == 2, (kind, r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("dump_kv.py:")]
    assert len(lines) == 1 and flag in lines[0], r.stderr
    assert not os.path.exists(out) and staging_leftovers(str(tmp_path)) == []
