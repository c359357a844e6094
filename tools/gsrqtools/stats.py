"""How sure a perplexity comparison is: the paired percentile bootstrap of core/base/bootstrap.h, and its
extension over training seeds.

Every method of a table reads the same evaluation sequences, so a replicate draws n sequence indices
with replacement once and evaluates every method on that draw (paired): what the sequences share
cancels in a difference. Where a method was trained with several seeds, each replicate also draws one
of its seeds at random, so the interval covers both the sequences and the seeds (a two-level
bootstrap). The interval is the percentile interval of the replicates, 95% unless told; the draws
are seeded, so a table regenerates exactly. Drawing one seed per replicate gives the interval of
what one training run of the method scores, wider than that of the seeds' mean (the row's figure):
an interval that excludes 0 holds for any one seed, not only on average.

Inputs are per sequence: each sequence's mean NLL per predicted token (natural log), and its
predicted tokens as weights, so that exp(Σ tᵢ nllᵢ / Σ tᵢ) is the perplexity.
"""
import math

import numpy as np

from gsrqtools.hf import InputError

RESAMPLES = 10000
LEVEL = 0.95
SEED = 0x5EED0F5EED
DESCRIPTION = "paired bootstrap over the sequences (and the seeds, where a row has several), percentile, 95%"


def _as_seeds(x):
    """A method's per-sequence NLL as a seeds × sequences array (one seed: one row)."""
    a = np.asarray(x, dtype=np.float64)
    return a[None, :] if a.ndim == 1 else a


def _check(arrays, tokens):
    n = len(tokens)
    if n == 0 or not all(t > 0 for t in tokens):
        raise InputError("a paired interval needs at least one sequence, each with a positive count of predicted "
                         "tokens")
    for a in arrays:
        if a.shape[1] != n:
            raise InputError(f"a paired interval needs one NLL per sequence for every method ({a.shape[1]} against "
                             f"{n} sequences)")


def log_ratio(method, reference, tokens):
    """Σ tᵢ (mᵢ − rᵢ) / Σ tᵢ: the log of the perplexities' ratio (method: one seed's sequences)."""
    t = np.asarray(tokens, dtype=np.float64)
    return float(np.dot(t, np.asarray(method, dtype=np.float64) - np.asarray(reference, dtype=np.float64)) / t.sum())


def delta_percent(method, reference, tokens):
    """Δ% of the perplexity against the reference: the seeds' mean where method has several."""
    m = _as_seeds(method)
    return float(np.mean([100 * math.expm1(log_ratio(s, reference, tokens)) for s in m]))


def replicates(stat_methods, reference, tokens, resamples=RESAMPLES, seed=SEED):
    """Per replicate, for each method of stat_methods (seeds × sequences arrays), the log ratio to the
    reference on that replicate's draw of sequences and of one seed: an array methods × resamples."""
    t = np.asarray(tokens, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    ms = [_as_seeds(m) for m in stat_methods]
    _check(ms + [r[None, :]], t)
    n = len(t)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))
    counts = np.zeros((resamples, n))
    np.add.at(counts, (np.arange(resamples)[:, None], draws), 1.0)  # how often each sequence was drawn
    w = counts * t  # weight of each sequence in each replicate
    den = w.sum(axis=1)
    out = []
    for m in ms:
        pick = rng.integers(0, m.shape[0], size=resamples)  # one seed per replicate
        diff = m[pick] - r[None, :]
        out.append((w * diff).sum(axis=1) / den)
    return np.array(out)


def percentile_interval(values, level=LEVEL):
    tail = (1 - level) / 2
    lo, hi = np.quantile(values, [tail, 1 - tail])  # linear interpolation, as core/base/bootstrap.cpp
    return [float(lo), float(hi)]


def delta_percent_interval(method, reference, tokens, resamples=RESAMPLES, level=LEVEL, seed=SEED):
    """[lo, hi] of the method's Δ% against the reference (seeds and sequences)."""
    rep = replicates([method], reference, tokens, resamples, seed)[0]
    return percentile_interval(100 * np.expm1(rep), level)


def gap_interval(a, b, reference, tokens, resamples=RESAMPLES, level=LEVEL, seed=SEED):
    """The gap Δ%(a) − Δ%(b) in points, with its paired interval: (gap, [lo, hi])."""
    return contrast([(1, a), (-1, b)], reference, tokens, resamples, level, seed)


def contrast(terms, reference, tokens, resamples=RESAMPLES, level=LEVEL, seed=SEED):
    """Σ wᵢ Δ%(methodᵢ) in points, terms [(w, per-sequence NLL or seeds × sequences)], with its paired
    interval over sequences and seeds: (value, [lo, hi]). A gap is [(1, a), (−1, b)]; whether a gap
    grows as bits fall is [(1, a_low), (−1, b_low), (−1, a_high), (1, b_high)]."""
    rep = replicates([m for _, m in terms], reference, tokens, resamples, seed)
    values = sum(w * 100 * np.expm1(r) for (w, _), r in zip(terms, rep))
    point = sum(w * delta_percent(m, reference, tokens) for w, m in terms)
    return point, percentile_interval(values, level)
