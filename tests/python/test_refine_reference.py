"""gsrq train --refine's codebook update against an independent NumPy (float64) least-squares solve.

With the codes fixed, the codewords of all R stages of a subspace that minimise
sum_n ||x_n - sum_r C_r[c_nr]||^2 solve one linear least-squares problem, A C = X, where A is the
N x R*K indicator of the codes. A first round's update solves it for the greedy stages' codes, so
its objective (reported as objective_after_update) must equal the least-squares minimum NumPy finds
for those codes (written by the same seeded training without refinement). Where a round re-encodes
no row, its codebooks must be that problem's solution for its own codes too: the reconstructions
A C are compared (C itself is unique only up to codewords no row tells apart). Data: synthetic
Gaussian rows, seeded, written here as a .npy.
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


def train(tmp_path, name, *args):
    x = np.random.default_rng(7).standard_normal((400, 16)).astype(np.float32)  # synthetic
    rows = tmp_path / "x.npy"
    np.save(rows, x)
    out = tmp_path / f"{name}.safetensors"
    r = subprocess.run([GSRQ, "--no-db", "train", str(rows), "--dim", "8", "--stages", "3", "--k", "8",
                        "--with-codes", "--out", str(out), "--json", *args],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return x, out, json.loads(r.stdout)["tensors"][0]


def least_squares(x, codes, K, D):
    """NumPy's least-squares reconstruction of x for codes [N, M, R] with K codewords per stage."""
    N, M, R = codes.shape
    recon = np.empty((N, M * D))
    for m in range(M):
        A = np.zeros((N, R * K))
        for r in range(R):
            A[np.arange(N), r * K + codes[:, m, r]] = 1.0
        target = x[:, m * D:(m + 1) * D].astype(np.float64)
        solution, *_ = np.linalg.lstsq(A, target, rcond=None)
        recon[:, m * D:(m + 1) * D] = A @ solution
    return recon


def nmse(x, recon):
    return ((x - recon) ** 2).sum() / (x.astype(np.float64) ** 2).sum()


def test_first_update_is_the_least_squares_minimum(tmp_path):
    x, greedy, _ = train(tmp_path, "greedy")
    _, _, t = train(tmp_path, "refined", "--refine", "1")
    _, tensor = gsrq_decode.load(str(greedy))
    codes = tensor("x.codes").astype(np.int64)
    ours = nmse(x, least_squares(x, codes, 8, 8))
    # The engine solves in double and stores float32 codewords: 1e-6 of an NMSE near 0.27 is far
    # below the gap to any other solution and above float32 rounding of the reconstruction.
    assert abs(t["refinement"]["rounds"][0]["objective_after_update"] - ours) < 1e-6
    assert abs(t["refinement"]["before"]["objective"] - nmse(x, gsrq_decode.decode(str(greedy), "x"))) < 1e-6


def test_converged_codebooks_are_the_least_squares_solution(tmp_path):
    x, out, t = train(tmp_path, "refined", "--refine", "20")
    rounds = t["refinement"]["rounds"]
    still = [r["round"] for r in rounds if r["rows_recoded"] == 0]
    assert still, "no round left the codes as they were: the comparison below needs one"
    assert rounds[-1]["rows_recoded"] == 0  # once no row changes, none can: the next update is the same
    _, tensor = gsrq_decode.load(str(out))
    books = tensor("x.codebooks").astype(np.float64)  # [M, R, K, D]
    codes = tensor("x.codes").astype(np.int64)  # [N, M, R]
    M, R, K, D = books.shape
    engine = np.concatenate([sum(books[m, r][codes[:, m, r]] for r in range(R)) for m in range(M)], axis=1)
    # Double solve, float32 codewords: 1e-5 of the rows' scale covers that rounding over R = 3 stages.
    assert np.abs(engine - least_squares(x, codes, K, D)).max() < 1e-5 * np.abs(x).max()
    decoded = gsrq_decode.decode(str(out), "x").astype(np.float64)  # the shipped NumPy decoder
    assert np.abs(decoded - engine).max() < 1e-6 * np.abs(x).max()
    assert abs(t["train"]["nmse"] - nmse(x, decoded)) < 1e-6


def test_rounds_never_raise_the_objective(tmp_path):
    _, _, t = train(tmp_path, "refined", "--refine", "5", "--refine-beam", "4")
    previous = t["refinement"]["before"]["objective"]
    for r in t["refinement"]["rounds"]:
        assert not r["update_reverted"]  # the solve itself never raised it
        assert r["objective_after_update"] <= previous * (1 + 1e-9)
        assert r["objective"] <= r["objective_after_update"] * (1 + 1e-9)
        previous = r["objective"]
    assert t["refinement"]["kept_round"] == 5  # no held-out rows: the last round


@pytest.mark.parametrize("args,flag", [
    (["--refine", "-1"], "--refine"),
    (["--refine", "2", "--refine-beam", "999"], "--refine-beam"),
    (["--refine", "1", "--k", "4096", "--stages", "3"], "--refine"),  # R·K past the dense solve's bound
])
def test_bad_refine_flags_exit_2(tmp_path, args, flag):
    rows = tmp_path / "x.npy"
    np.save(rows, np.zeros((5000, 8), np.float32))
    shape = {"--stages": "2", "--k": "8"}
    for i in range(0, len(args), 2):
        shape.pop(args[i], None)  # the case's own --stages or --k instead
    r = subprocess.run([GSRQ, "--no-db", "train", str(rows), "--dim", "8",
                        *[a for kv in shape.items() for a in kv], *args],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2, r.stderr
    assert flag in r.stderr
