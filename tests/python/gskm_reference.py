"""An independent NumPy implementation of KM and GSKM (the paper's Algorithm 1) and of greedy
residual quantization, in float64, to check gsrq's engine against.

It is written from the method's description (docs/architecture.md, "The method"), not from
gsrq's C++; the only thing shared with gsrq is how the K starting rows are drawn (a partial
Fisher–Yates shuffle on raw std::mt19937_64 output), so that both start from the same rows.

GSKM, Algorithm 1:
  init   s_k = x_{i_k}/‖x_{i_k}‖ for K sampled rows; one assignment by direction,
         k* = argmax_k x·s_k; g_k = max(0, Σ w x·s_k / Σ w) over those members.
  repeat assign k* = argmin_k ‖x − g_k s_k‖²;
         s_k = normalize(Σ w x/‖x‖) (a near-zero sum keeps s_k);
         g_k = max(0, Σ w x·s_k / Σ w); an empty cluster keeps (g_k, s_k);
  until no label changes or T updates.
KM: c_k = the K sampled rows; assign to the nearest; c_k = Σ w x / Σ w.

    python3 tests/python/gskm_reference.py data.npy --k 256 --iters 100   # prints both metrics
"""
import argparse
import json

import numpy as np

_MASK = (1 << 64) - 1


class MT19937_64:
    """std::mt19937_64 (C++11 [rand.predef]: the 10000th output of a default-seeded engine is
    9981545732273789042)."""

    def __init__(self, seed):
        self.mt = [0] * 312
        self.mt[0] = seed & _MASK
        for i in range(1, 312):
            prev = self.mt[i - 1]
            self.mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & _MASK
        self.index = 312

    def _twist(self):
        mt = self.mt
        for i in range(312):
            y = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % 312] & 0x7FFFFFFF)
            v = mt[(i + 156) % 312] ^ (y >> 1)
            if y & 1:
                v ^= 0xB5026F5AA96619E9
            mt[i] = v
        self.index = 0

    def __call__(self):
        if self.index >= 312:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & _MASK


def sample_rows(n, k, seed):
    rng = MT19937_64(seed)
    idx = list(range(n))
    for i in range(k):
        j = i + rng() % (n - i)
        idx[i], idx[j] = idx[j], idx[i]
    return np.array(idx[:k], dtype=np.int64)


def _assign(X, C):
    """Nearest centroid, lowest index on ties."""
    scores = 2.0 * X @ C.T - np.einsum("kd,kd->k", C, C)[None, :]
    return np.argmax(scores, axis=1)


def _sums(X, w, labels, K):
    W = np.bincount(labels, weights=w, minlength=K)
    Sx = np.zeros((K, X.shape[1]))
    np.add.at(Sx, labels, w[:, None] * X)
    return W, Sx


def kmeans(X, K, iters, seed, w=None):
    X = np.asarray(X, dtype=np.float64)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=np.float64)
    C = X[sample_rows(len(X), K, seed)].copy()
    labels = None
    for _ in range(iters):
        new = _assign(X, C)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        W, Sx = _sums(X, w, labels, K)
        live = W > 0
        C[live] = Sx[live] / W[live, None]
    return C


def gskm(X, K, iters, seed, w=None, init="direction", eps=1e-8, shape_eps=1e-6):
    """init="direction": Algorithm 1. init="rows": c_k = the sampled rows (g = ‖row‖), first
    assignment by L2 — the start that makes GSKM follow K-means (kept for the comparison)."""
    X = np.asarray(X, dtype=np.float64)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=np.float64)
    Y = X / (np.linalg.norm(X, axis=1, keepdims=True) + eps)
    rows = X[sample_rows(len(X), K, seed)]
    g = np.linalg.norm(rows, axis=1)
    s = np.where(g[:, None] > 0, rows / np.maximum(g, 1e-300)[:, None], 0.0)
    s[g == 0, 0] = 1.0
    if init == "direction":
        labels = np.argmax(X @ s.T, axis=1)
        W, Sx = _sums(X, w, labels, K)
        live = W > 0
        g[live] = np.maximum(0.0, np.einsum("kd,kd->k", Sx, s)[live] / W[live])
    labels = None
    for _ in range(iters):
        new = _assign(X, g[:, None] * s)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        W, Sx = _sums(X, w, labels, K)
        _, Sy = _sums(Y, w, labels, K)
        for k in np.nonzero(W > 0)[0]:
            n = np.linalg.norm(Sy[k])
            if n / W[k] > shape_eps:
                s[k] = Sy[k] / n
            g[k] = max(0.0, Sx[k] @ s[k] / W[k])
    return g[:, None] * s


def metrics(X, Xhat):
    X = np.asarray(X, dtype=np.float64)
    Xhat = np.asarray(Xhat, dtype=np.float64)
    nx = np.linalg.norm(X, axis=1)
    nh = np.linalg.norm(Xhat, axis=1)
    cos = np.where((nx > 0) & (nh > 0), np.einsum("nd,nd->n", X, Xhat) / np.maximum(nx * nh, 1e-300), 0.0)
    return {
        "mse": float(np.mean(np.sum((X - Xhat) ** 2, axis=1))),
        "nmse": float(np.sum((X - Xhat) ** 2) / np.sum(X**2)),
        "gain_error": float(np.mean(np.abs(nx - nh))),
        "cosine": float(np.mean(cos[nx > 0])),
        "shrinkage": float(np.sum(nh**2) / np.sum(nx**2)),
    }


def quantize(X, C):
    return C[_assign(np.asarray(X, dtype=np.float64), C)]


def train_rq(X, stages, K, iters, seed, method):
    """Greedy residual quantization of X (one subspace): stage r clusters the residual of stages < r,
    starting from rows drawn with seed + 7919·r (gsrq's rule: each stage draws its own rows).
    Returns the R codebooks."""
    R = np.asarray(X, dtype=np.float64).copy()
    books = []
    for r in range(stages):
        stage_seed = seed + 7919 * r
        C = kmeans(R, K, iters, stage_seed) if method == "km" else gskm(R, K, iters, stage_seed)
        R -= quantize(R, C)
        books.append(C)
    return books


def encode_rq(X, books):
    R = np.asarray(X, dtype=np.float64).copy()
    for C in books:
        R -= quantize(R, C)
    return np.asarray(X, dtype=np.float64) - R


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="2-D .npy, rows × D")
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gskm-init", choices=("direction", "rows"), default="direction")
    a = ap.parse_args()
    X = np.load(a.data).astype(np.float64)
    out = {
        "km": metrics(X, quantize(X, kmeans(X, a.k, a.iters, a.seed))),
        "gskm": metrics(X, quantize(X, gskm(X, a.k, a.iters, a.seed, init=a.gskm_init))),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
