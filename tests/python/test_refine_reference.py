"""gsrq train --refine's codebook update against an independent NumPy (float64) least-squares solve.

With the codes fixed, the codewords of all R stages of a subspace that minimise
sum_n ||x_n - sum_r C_r[c_nr]||^2 solve one linear least-squares problem, A C = X, where A is the
N x R*K indicator of the codes. Once a refinement round re-encodes no row, the codes it ends with
are the ones its update solved for, so the engine's codebooks must be that problem's solution. The
solution is unique only up to codewords no row tells apart (an unused codeword, or two always used
together), so the reconstructions A C are compared, not C itself. Data: synthetic Gaussian rows,
seeded, written here as a .npy.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GSRQ = os.environ.get("GSRQ_CLI", os.path.join(ROOT, "build", "app", "cli", "gsrq"))
sys.path.insert(0, os.path.join(ROOT, "docs"))
import gsrq_decode  # noqa: E402  (the NumPy decoder shipped in docs/)

if not os.access(GSRQ, os.X_OK):
    pytest.skip(f"the gsrq binary is not built ({GSRQ})", allow_module_level=True)


def train(tmp_path, *args):
    x = np.random.default_rng(7).standard_normal((400, 16)).astype(np.float32)  # synthetic
    rows = tmp_path / "x.npy"
    np.save(rows, x)
    out = tmp_path / "cb.safetensors"
    r = subprocess.run([GSRQ, "--no-db", "train", str(rows), "--dim", "8", "--stages", "3", "--k", "8",
                        "--with-codes", "--out", str(out), "--json", *args],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return x, out, json.loads(r.stdout)["tensors"][0]


def test_codebook_update_is_the_least_squares_solution(tmp_path):
    x, out, t = train(tmp_path, "--refine", "20")
    rounds = t["refinement"]["rounds"]
    # This seeded data stops changing codes at round 14 (46, 23, 10, ... re-encoded before it).
    assert rounds[-1]["rows_recoded"] == 0, [r["rows_recoded"] for r in rounds]
    meta, tensor = gsrq_decode.load(str(out))
    books = tensor("x.codebooks").astype(np.float64)  # [M, R, K, D]
    codes = tensor("x.codes").astype(np.int64)  # [N, M, R]
    M, R, K, D = books.shape
    N = codes.shape[0]
    engine = np.empty((N, M * D))
    ours = np.empty((N, M * D))
    for m in range(M):
        A = np.zeros((N, R * K))
        for r in range(R):
            A[np.arange(N), r * K + codes[:, m, r]] = 1.0
        target = x[:, m * D:(m + 1) * D].astype(np.float64)
        solution, *_ = np.linalg.lstsq(A, target, rcond=None)
        ours[:, m * D:(m + 1) * D] = A @ solution
        engine[:, m * D:(m + 1) * D] = A @ books[m].reshape(R * K, D)
    # The engine solves in double and stores float32 codewords: 1e-5 of the rows' scale covers that
    # rounding summed over R = 3 stages, and is far below any codeword left unsolved.
    assert np.abs(engine - ours).max() < 1e-5 * np.abs(x).max()
    # The shipped NumPy decoder gives the same reconstruction, and the reported error is its error.
    decoded = gsrq_decode.decode(str(out), "x").astype(np.float64)
    assert np.abs(decoded - engine).max() < 1e-6 * np.abs(x).max()
    nmse = ((x - decoded) ** 2).sum() / (x.astype(np.float64) ** 2).sum()
    assert abs(t["train"]["nmse"] - nmse) < 1e-6
    assert abs(rounds[-1]["objective"] - nmse) < 1e-6  # no weights: the objective is the NMSE


def test_rounds_never_raise_the_objective(tmp_path):
    _, _, t = train(tmp_path, "--refine", "5", "--refine-beam", "4")
    previous = t["refinement"]["before"]["objective"]
    for r in t["refinement"]["rounds"]:
        assert r["objective_after_update"] <= previous * (1 + 1e-9)
        assert r["objective"] <= r["objective_after_update"] * (1 + 1e-9)
        previous = r["objective"]
    assert t["refinement"]["kept_round"] == 5  # no held-out rows: the last round


@pytest.mark.parametrize("flag,value", [("--refine", "-1"), ("--refine-beam", "999")])
def test_bad_refine_flags_exit_2(tmp_path, flag, value):
    rows = tmp_path / "x.npy"
    np.save(rows, np.zeros((100, 8), np.float32))
    r = subprocess.run([GSRQ, "--no-db", "train", str(rows), "--dim", "8", "--stages", "2", "--k", "8",
                        "--refine", "2", flag, value], capture_output=True, text=True, check=False)
    assert r.returncode == 2
    assert flag in r.stderr
