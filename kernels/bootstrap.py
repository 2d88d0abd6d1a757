"""Percentile bootstrap of a mean (docs/metrics.md 1.5): resample stories with
replacement, 10,000 times by default, seeded, and take the 2.5th and 97.5th
percentiles of the resampled means. A paired comparison bootstraps the mean of
the per-pair differences the same way."""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["N_RESAMPLES", "resample_means", "percentile_ci"]

N_RESAMPLES = 10_000


@numba.njit(cache=True, nogil=True)
def _resample_means(v, n_resamples, seed, out):
    # numba keeps its own generator state per thread; seeding it here makes the
    # interval a pure function of (values, n_resamples, seed).
    np.random.seed(seed)
    n = v.shape[0]
    for b in range(n_resamples):
        s = 0.0
        for _ in range(n):
            s += v[np.random.randint(0, n)]
        out[b] = s / n


def resample_means(values, n_resamples: int = N_RESAMPLES, seed: int = 0) -> np.ndarray:
    """Means of `n_resamples` resamples (with replacement) of the finite values."""
    v = np.asarray(values, dtype=np.float64)
    v = np.ascontiguousarray(v[np.isfinite(v)])
    out = np.empty(n_resamples)
    if v.size == 0:
        out.fill(np.nan)
        return out
    _resample_means(v, int(n_resamples), int(seed) & 0xFFFFFFFF, out)
    return out


def percentile_ci(values, n_resamples: int = N_RESAMPLES, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """(low, high) percentile interval of the mean; NaN when fewer than 2 values."""
    v = np.asarray(values, dtype=np.float64)
    if np.isfinite(v).sum() < 2:
        return math.nan, math.nan
    means = resample_means(v, n_resamples, seed)
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(means, [tail, 100.0 - tail])
    return float(lo), float(hi)
