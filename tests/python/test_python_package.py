"""The Python package gsrq (app/python) against the CLI on the bundled sample: dumps read without a
copy, codes bit-identical and metrics equal to gsrq train's, the GIL released while the engine runs,
Ctrl-C and callbacks cancelling, bad input raising named errors, the run store shared with the app.

Needs the package built (GSRQ_PYTHON_PATH: the build's python/ folder) and the gsrq CLI (GSRQ_CLI).
Rows called synthetic are Gaussian noise made here; everything else is the bundled sample
(resources/samples/README.md: keys, values and gradients of stories260K on the GPL-3 text).
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.environ.get("GSRQ_PYTHON_PATH", os.path.join(ROOT, "build", "python")))
gsrq = pytest.importorskip("gsrq", reason="the Python package is not built (cmake -DGSRQ_BUILD_PYTHON=ON)")

GSRQ = os.environ.get("GSRQ_CLI", os.path.join(ROOT, "build", "app", "cli", "gsrq"))
SAMPLE = os.path.join(ROOT, "resources", "samples", "stories260K-gpl3.safetensors")
SAMPLE_HD128 = os.path.join(ROOT, "resources", "samples", "pydocs-hd128")


def cli(*args):
    r = subprocess.run([GSRQ, *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def mapped_ranges(path):
    """The address ranges /proc/self/maps shows mapped from `path`."""
    real = os.path.realpath(path)
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5] == real:
                a, b = (int(v, 16) for v in parts[0].split("-"))
                out.append((a, b))
    return out


def test_dump_tensors_are_views_of_the_mapped_file():
    dump = gsrq.open_dump(SAMPLE)
    assert "layers.0.key" in dump and dump.format == "safetensors"
    keys = dump["layers.0.key"]
    info = dump.info("layers.0.key")
    assert keys.dtype == np.float16 and keys.shape == tuple(info["shape"]) == (2048, 4, 8)
    # No copy: the array's data is the tensor's place in the file's mapping, read-only, owned elsewhere.
    address = keys.__array_interface__["data"][0]
    assert address == info["address"]
    assert any(a <= address and address + info["nbytes"] <= b for a, b in mapped_ranges(SAMPLE))
    assert not keys.flags.writeable and not keys.flags.owndata
    # The view outlives the Dump (it holds the mapping), and its values are the engine's.
    del dump
    again = gsrq.open_dump(SAMPLE)
    np.testing.assert_array_equal(keys.astype(np.float32).reshape(2048, -1), again.load("layers.0.key"))
    assert again.metadata["rope_pairing"] == "interleaved"


def train_cli(tmp_path, *flags):
    out = str(tmp_path / "cli.safetensors")
    j = json.loads(cli("--no-db", "train", SAMPLE, "--tensors", "layers.1.value", "--dim", "8", "--stages", "2",
                       "--k", "16", "--iters", "10", "--with-codes", "--out", out, "--json", "-q", *flags))
    return j["tensors"][0], gsrq.CodebookFile.load(out)


def assert_metrics_equal(ours, theirs):
    # Both are computed in double from the same codes; the JSON prints them with 17 digits or more.
    for name in ("mse", "nmse", "gain_error", "cosine", "shrinkage"):
        assert abs(ours[name] - theirs[name]) <= 1e-6 * max(1.0, abs(theirs[name])), name


def test_codes_and_metrics_equal_the_clis(tmp_path):
    t, f = train_cli(tmp_path)
    dump = gsrq.open_dump(SAMPLE)
    r = gsrq.train(dump.rows("layers.1.value"), dim=8, stages=2, k=16, iterations=10, tensor="layers.1.value")
    np.testing.assert_array_equal(r.codes, f.codes("layers.1.value"))
    np.testing.assert_array_equal(r.codebooks.codewords, f.get("layers.1.value").codewords)
    assert_metrics_equal(r.metrics, t["train"])
    # Encoding the rows again gives the training's codes, and decoding them its metrics.
    codes = r.codebooks.encode(dump.rows("layers.1.value"))
    np.testing.assert_array_equal(codes, r.codes)
    assert_metrics_equal(gsrq.metrics(dump.load("layers.1.value"), r.codebooks.decode(codes)), t["train"])


def test_weighted_holdout_training_equals_the_clis(tmp_path):
    t, f = train_cli(tmp_path, "--weights", "grad-log", "--tau", "2", "--holdout", "0.25")
    dump = gsrq.open_dump(SAMPLE)
    r = gsrq.train(dump.rows("layers.1.value"), grad=dump.rows("layers.1.value_grad"), weight_mode="grad-log", tau=2,
                   holdout=0.25, dim=8, stages=2, k=16, iterations=10)
    np.testing.assert_array_equal(r.codebooks.codewords, f.get("layers.1.value").codewords)
    np.testing.assert_array_equal(r.codes, f.codes("layers.1.value"))
    assert r.rows == t["rows"] and r.heldout_rows == t["heldout_rows"] == 512
    assert_metrics_equal(r.metrics, t["train"])
    assert_metrics_equal(r.heldout, t["heldout"])
    # The dump's own weights are the ones gsrq train made from the gradient.
    np.testing.assert_array_equal(dump.weights("layers.1.value", "grad-log", 2.0),
                                  gsrq.gradient_weights(dump.rows("layers.1.value_grad"), "grad-log", 2.0))


def test_torch_tensors_and_other_dtypes_train_the_same():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (tools/hf_env.sh)")
    x = gsrq.open_dump(SAMPLE).load("layers.2.key")
    a = gsrq.train(x, dim=8, stages=2, k=16, iterations=5)
    b = gsrq.train(torch.from_numpy(x), dim=8, stages=2, k=16, iterations=5)  # DLPack, read in place
    c = gsrq.train(x.astype(np.float64), dim=8, stages=2, k=16, iterations=5)  # converted once
    d = gsrq.train(x.reshape(2048, 4, 8), dim=8, stages=2, k=16, iterations=5)  # tokens × heads × head_dim
    for other in (b, c, d):
        np.testing.assert_array_equal(other.codes, a.codes)


def synthetic_rows(n, d, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d), dtype=np.float32)  # synthetic (Gaussian)


def test_the_gil_is_released_while_the_engine_runs():
    """A Python thread keeps counting while K-means runs in another. Each iteration here takes about
    0.2 s on one core; the engine takes the GIL back only once per iteration, so a held GIL would let
    the counter run about 5 ms (the switch interval) in 200 ms: under 3% of its own rate. Released,
    it keeps well over 20% of it (the engine runs on its own core: threads=1)."""
    x = synthetic_rows(200_000, 64)

    def count_for(seconds):
        n, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            n += 1
        return n

    done = threading.Event()
    result = {}

    def run():
        result["r"] = gsrq.kmeans(x, 256, iterations=4, threads=1)
        done.set()

    t = threading.Thread(target=run)
    start = time.perf_counter()
    t.start()
    counted = 0
    while not done.is_set():
        counted += count_for(0.01)
    elapsed = time.perf_counter() - start
    t.join()
    alone = count_for(1.0)
    rate = (counted / elapsed) / alone
    print(f"counter during training: {rate:.2f} of its rate alone ({elapsed:.2f} s of training)")
    assert result["r"].iterations == 4
    assert rate > 0.2


def test_ctrl_c_cancels_at_the_next_iteration():
    x = synthetic_rows(100_000, 32)
    seen = []
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        gsrq.train(x, dim=8, stages=8, k=256, iterations=50, progress=lambda info: seen.append(info["fraction"]))
    timer.join()
    # It stopped part of the way: a pass had run, and far from all of them (8 stages × 4 subspaces × 50).
    assert seen and max(seen) < 0.9


def test_callbacks_cancel_and_their_errors_propagate():
    x = synthetic_rows(5000, 16)
    r = gsrq.train(x, dim=8, stages=2, k=16, progress=lambda info: info["stage"] < 1)
    assert r.cancelled
    with pytest.raises(ZeroDivisionError):
        gsrq.kmeans(x, 8, progress=lambda info: 1 / 0)
    calls = []
    km = gsrq.kmeans(x, 8, iterations=3, progress=calls.append)
    assert len(calls) == len(km.history) and calls[-1]["nmse"] == km.history[-1]["nmse"]


def _vector_kernels():
    """Whether this CPU runs the engine's AVX2 (with FMA) or AVX-512 assignment kernels."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read().split()
    except OSError:
        return False
    return "avx2" in flags and "fma" in flags


def test_exact_bounds_change_nothing_but_the_work():
    # The sample's keys, rows of 128 per head: the bounds skip most scores there (about 60% over 12
    # passes) and give the same labels and bit-identical centroids (the same sums in the same order);
    # the objectives differ only in how a row's error is rounded.
    keys = gsrq.open_dump(SAMPLE_HD128).rows("layers.2.key").reshape(-1, 128)
    on = gsrq.kmeans(keys, 128, iterations=12, seed=1)
    off = gsrq.kmeans(keys, 128, iterations=12, seed=1, exact_bounds=False)
    assert np.array_equal(on.labels, off.labels)
    assert np.array_equal(on.centroids, off.centroids)
    assert [h["changed"] for h in on.history] == [h["changed"] for h in off.history]
    assert all(h["skipped"] == 0 for h in off.history)
    if _vector_kernels():
        assert np.mean([h["skipped"] for h in on.history]) > 0.25
    else:  # the bounds use the AVX2 and AVX-512 kernels; without them every codeword is scored
        assert all(h["skipped"] == 0 for h in on.history)
    assert on.history[-1]["objective"] == pytest.approx(off.history[-1]["objective"], rel=1e-5)


def test_beam_training_on_every_beam_or_the_best():
    x = synthetic_rows(3000, 16)
    # The first stage trains on the rows either way; the second on every beam's residual (4 per row)
    # or the best beam's, so its codewords, and the error, differ.
    every = gsrq.train(x, dim=8, stages=2, k=16, beam=4, iterations=5)
    best = gsrq.train(x, dim=8, stages=2, k=16, beam=4, iterations=5, beam_train="best")
    assert every.after_stage[0]["nmse"] == best.after_stage[0]["nmse"]
    assert every.metrics["nmse"] != best.metrics["nmse"]
    with pytest.raises(gsrq.InvalidInput, match="beam_train"):
        gsrq.train(x, dim=8, stages=1, k=4, beam_train="some")


def test_bad_input_raises_with_the_file_or_argument_named(tmp_path):
    missing = str(tmp_path / "nope.safetensors")
    with pytest.raises(gsrq.InvalidInput, match=re.escape(missing)):
        gsrq.open_dump(missing)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 64)
    with pytest.raises(gsrq.InvalidInput, match=re.escape(str(bad))):
        gsrq.open_dump(str(bad))
    dump = gsrq.open_dump(SAMPLE)
    with pytest.raises(gsrq.InvalidInput, match="layers.9.key"):
        dump["layers.9.key"]
    x = synthetic_rows(100, 16)
    x[3, 5] = np.nan
    with pytest.raises(gsrq.InvalidInput, match="x: row 3"):
        gsrq.train(x, dim=8, stages=1, k=4)
    with pytest.raises(gsrq.InvalidInput, match="weights: 5 values for 100 rows"):
        gsrq.kmeans(synthetic_rows(100, 16), 4, weights=np.ones(5, np.float32))
    with pytest.raises(gsrq.InvalidInput, match="--k|k"):
        gsrq.kmeans(synthetic_rows(10, 4), 64)
    with pytest.raises(gsrq.InvalidInput, match="bpa=0.6"):
        gsrq.train(synthetic_rows(100, 16), bpa=0.6)
    books = gsrq.train(synthetic_rows(500, 16), dim=8, stages=1, k=16).codebooks
    with pytest.raises(gsrq.InvalidInput, match="codes: 99 at row 1"):
        books.decode(np.array([[[0], [1]], [[2], [99]]]))
    with pytest.raises(gsrq.InvalidInput, match="12 features but the codebooks cover 16"):
        books.encode(synthetic_rows(10, 12))
    assert isinstance(gsrq.InvalidInput("x"), ValueError)
    # The same in a fresh interpreter: an exception and exit code 1 from Python, not an abort.
    code = f"import sys; sys.path.insert(0, {os.path.dirname(os.path.dirname(gsrq.__file__))!r}); import gsrq; " \
           f"gsrq.open_dump({str(bad)!r})"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 1 and "gsrq.InvalidInput" in p.stderr, p.stderr


def test_codebooks_save_load_and_nothing_half_written(tmp_path):
    x = gsrq.open_dump(SAMPLE).load("layers.0.value")
    r = gsrq.train(x, bpa=None, dim=8, stages=2, k=16, iterations=5, tensor="layers.0.value")
    path = str(tmp_path / "books.safetensors")
    r.codebooks.save(path, tensor="layers.0.value")
    back = gsrq.Codebooks.load(path)
    np.testing.assert_array_equal(back.codewords, r.codebooks.codewords)
    np.testing.assert_array_equal(back.encode(x), r.codes)
    assert_metrics_equal(back.evaluate(x), r.metrics)
    # The CLI reads what Python wrote.
    assert "layers.0.value" in cli("codebooks", "info", path)
    # A write that cannot happen leaves nothing behind.
    with pytest.raises(gsrq.InvalidInput):
        r.codebooks.save(path + ".x", tensor="layers.0.value", dtype="f8")
    assert not os.path.exists(path + ".x")


def test_a_recorded_run_is_in_the_apps_store(tmp_path):
    db = str(tmp_path / "runs.sqlite")
    dump = gsrq.open_dump(SAMPLE)
    r = gsrq.train(dump.rows("layers.0.key"), dim=8, stages=2, k=16, iterations=5, tensor="layers.0.key", source=dump)
    store = gsrq.RunStore(db)
    run_id = store.record_train(r)
    runs = store.runs(kind="train")
    assert [x["id"] for x in runs] == [run_id] and runs[0]["status"] == "done"
    assert runs[0]["dump_path"] == dump.path and len(runs[0]["dump_sha256"]) == 64
    nmse = [m["value"] for m in store.metrics(run_id) if m["name"] == "nmse" and m["scope"] == "final"]
    assert nmse and abs(nmse[0] - r.metrics["nmse"]) <= 1e-12
    assert "layers.0.key.nmse_vs_stage" in store.series(run_id)
    # The CLI (and so the app's Runs page) reads the same run.
    shown = json.loads(cli("--db", db, "runs", "show", str(run_id), "--json"))
    assert shown["kind"] == "train" and shown["command"] == "python: gsrq.train"


def test_benchmark_prints_python_against_the_cli():
    """tools/bench/python_vs_cli.py: the same training in both, timed (printed, never asserted); it
    fails where their NMSE differs."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench", "python_vs_cli.py"), "--repeat", "1",
                        "--cli", GSRQ], capture_output=True, text=True)
    print(p.stdout)
    assert p.returncode == 0, p.stderr
    assert "python / cli = " in p.stdout


def test_the_worked_example_runs(tmp_path):
    """docs/python.md's example: gsrq against FAISS's product residual quantizer, plotted."""
    pytest.importorskip("faiss", reason="faiss-cpu is not installed (tools/hf_env.sh)")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (tools/hf_env.sh)")
    png = tmp_path / "example.png"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(gsrq.__file__)))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "python_example.py"), "--out", str(png)],
                       capture_output=True, text=True, env=env)
    print(p.stdout)
    assert p.returncode == 0, p.stderr
    rows = {line.split()[1]: line for line in p.stdout.splitlines() if line.startswith(("gsrq ", "faiss "))}
    assert set(rows) == {"km", "gskm", "1.15.1"}
    assert png.stat().st_size > 10_000
