"""Subsampling a run's own verdicts (docs/metrics.md 1.8): every story statistic
recomputed from k of each position's n endings, either the first k in ending order
(what a run at ``--endings k`` with the same seed draws on a seed-per-choice
server) or random subsets of k without replacement (the spread of that choice).

The verdicts are packed one level below kernels/curves.py's CSR: a flat ``match``
(1 = the ending's verdict is a match, in ending order), ``starts`` (where each
position's endings begin in it; position j's are ``match[starts[j]:starts[j+1]]``)
and the stories' ``offsets`` into the positions, with ``x`` (pct) per position. A
position of fewer than k endings uses all of them (an adaptive run's positions hold
different n). Each statistic comes from `curves.stats_row`, the kernel stories.csv's
values come from, so the k = n row is the run's own.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from tension.kernels.curves import stats_row
from tension.kernels.settings import CurveSettings

__all__ = ["first_k_counts", "subsample_stats"]


@numba.njit(cache=True, nogil=True)
def _first_counts(match, starts, k, n_out, m_out):
    """n_out[j], m_out[j] = endings used and matches among the first min(k, n_j)."""
    for j in range(starts.shape[0] - 1):
        a = starts[j]
        use = min(k, starts[j + 1] - a)
        m = 0
        for t in range(use):
            m += match[a + t]
        n_out[j] = use
        m_out[j] = m


@numba.njit(cache=True, nogil=True)
def _ok(x, starts, a, b):
    if b <= a:
        return False
    for j in range(a, b):
        if starts[j + 1] <= starts[j] or not math.isfinite(x[j]):
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _subsample(x, match, starts, offsets, seeds, k, draws, half, thresholds, late_threshold, retention_window,
               out):
    """out[i, r, :] = the statistics of story i from draw r: each position's
    min(k, n) endings chosen without replacement (a partial Fisher–Yates shuffle of
    its endings' indexes), NaN for a story that has a position without endings."""
    mmax = 1
    nmax = 1
    for i in range(offsets.shape[0] - 1):
        mmax = max(mmax, offsets[i + 1] - offsets[i])
    for j in range(starts.shape[0] - 1):
        nmax = max(nmax, starts[j + 1] - starts[j])
    idx = np.arange(nmax, dtype=np.int64)
    swaps = np.empty(nmax, dtype=np.int64)
    yb = np.empty(mmax)
    ys = np.empty(mmax)
    X = np.empty(mmax)
    Y = np.empty(mmax)
    for i in range(offsets.shape[0] - 1):
        a = offsets[i]
        b = offsets[i + 1]
        if not _ok(x, starts, a, b):
            out[i, :, :] = np.nan
            continue
        # a story's subsets are a pure function of its verdicts, its seed, k and draws
        np.random.seed(seeds[i])
        xs = x[a:b]
        for r in range(draws):
            for j in range(a, b):
                s0 = starts[j]
                nj = starts[j + 1] - s0
                use = min(k, nj)
                m = 0
                for t in range(use):
                    c = t + np.random.randint(0, nj - t)
                    swaps[t] = c
                    v = idx[c]
                    idx[c] = idx[t]
                    idx[t] = v
                    m += match[s0 + v]
                # undone in reverse order, idx is the identity again: O(k) a position, not O(n)
                for t in range(use - 1, -1, -1):
                    c = swaps[t]
                    v = idx[c]
                    idx[c] = idx[t]
                    idx[t] = v
                yb[j - a] = 1.0 - m / use
            stats_row(xs, yb[:b - a], half, thresholds, late_threshold, retention_window, ys, X, Y, out[i, r])


def _packed(x, match, starts, offsets):
    x = np.ascontiguousarray(x, dtype=np.float64)
    match = np.ascontiguousarray(match, dtype=np.int64)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if x.ndim != 1 or starts.shape != (len(x) + 1,) or starts[0] != 0 or starts[-1] != len(match):
        raise ValueError("starts must have one entry per position and one more, from 0 to len(match)")
    if np.any(np.diff(starts) < 0):
        raise ValueError("starts must be non-decreasing")
    if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(x):
        raise ValueError("offsets must start at 0 and end at len(x)")
    if np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must be non-decreasing")
    return x, match, starts, offsets


def first_k_counts(match, starts, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(endings used, matches) of every position from its first min(k, n) endings."""
    match = np.ascontiguousarray(match, dtype=np.int64)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    if k < 1:
        raise ValueError(f"k: expected an integer >= 1, got {k}")
    n_out = np.empty(len(starts) - 1, dtype=np.int64)
    m_out = np.empty(len(starts) - 1, dtype=np.int64)
    _first_counts(match, starts, int(k), n_out, m_out)
    return n_out, m_out


def subsample_stats(x, match, starts, offsets, seeds, k: int, draws: int,
                    settings: CurveSettings = CurveSettings()) -> np.ndarray:
    """The statistics of every story in each of `draws` random subsets of k endings a
    position: stories × draws × s."""
    x, match, starts, offsets = _packed(x, match, starts, offsets)
    seeds = np.ascontiguousarray(seeds, dtype=np.int64)
    if len(seeds) != len(offsets) - 1:
        raise ValueError(f"{len(offsets) - 1} stories but {len(seeds)} seeds")
    if k < 1 or draws < 1:
        raise ValueError(f"k and draws: expected integers >= 1, got {k} and {draws}")
    thresholds = np.asarray(settings.thresholds, dtype=np.float64)
    out = np.empty((len(offsets) - 1, int(draws), 4 + len(thresholds)))
    _subsample(x, match, starts, offsets, seeds, int(k), int(draws), settings.window // 2, thresholds,
               float(settings.late_threshold), int(settings.retention_window), out)
    return out
