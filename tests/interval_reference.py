"""Independent reference for the per-story intervals of docs/metrics.md 1.6, written
from that page's text (not from kernels/intervals.py), with numpy and the plain-Python
curve reference (`curve_reference.story_stats`) only.

What the page fixes, and this file follows:

* a resample draws each position's number of matches from Binomial(n, p), with
  p = n_match / n, except that a position whose n verdicts are all matches or all
  non-matches draws at p = (n_match + ½) / (n + 1); its no-rate is 1 − matches / n;
* every statistic is computed anew on each resampled curve (the 1.4 definitions);
* the interval of a statistic: the 2.5th and 97.5th percentiles (linear
  interpolation) of its finite resampled values, each moved by (observed value −
  mean of the finite resampled values), widened where needed to hold the observed
  value, then cut to the statistic's range (no-rates
  and IRs in [0, 1], Retain in [0, 100], convergence in [−100, 0]);
* no interval (NaN) where the observed value is NaN, or fewer than half of the
  resamples give the statistic a value; a story with a position of no judged
  ending, or no position, has none at all.
"""

from __future__ import annotations

import math

import curve_reference as ref
import numpy as np

NAN = float("nan")
MIN_DEFINED = 0.5


def match_p(n: int, k: int) -> float:
    if k == 0 or k == n:
        return (k + 0.5) / (n + 1.0)
    return k / n


def draw_curves(n, k, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """A reference stream of resampled no-rate curves (n_resamples × positions),
    drawn with numpy's own binomial: for comparing distributions, not numbers."""
    out = np.empty((n_resamples, len(n)))
    for j, (nj, kj) in enumerate(zip(n, k)):
        out[:, j] = 1.0 - rng.binomial(nj, match_p(nj, kj), size=n_resamples) / nj
    return out


def row(stats: dict) -> list[float]:
    return [stats["mean_nr"], stats["late_nr"], stats["retain"], stats["convergence"], *stats["ir"]]


def ranges(t: int) -> tuple[list[float], list[float]]:
    return [0.0, 0.0, 0.0, -100.0] + [0.0] * t, [1.0, 1.0, 100.0, 0.0] + [1.0] * t


def interval(x, curves: np.ndarray, observed: list[float], window: int = 5, thresholds=(30.0, 60.0, 120.0),
             late_threshold: float = 0.8, retention_window: int = 10, level: float = 0.95):
    """(lo, hi) lists, one entry per statistic, from the resampled curves of one story."""
    values = np.array([row(ref.story_stats(list(x), [float(v) for v in c], window, thresholds, late_threshold,
                                           retention_window)) for c in curves])
    tail = 100 * (1 - level) / 2
    lo_cut, hi_cut = ranges(len(thresholds))
    lo, hi = [], []
    for s in range(values.shape[1]):
        v = values[:, s]
        v = v[np.isfinite(v)]
        if math.isnan(observed[s]) or len(v) < MIN_DEFINED * values.shape[0] or len(v) == 0:
            lo.append(NAN)
            hi.append(NAN)
            continue
        shift = observed[s] - v.mean()
        a, b = np.percentile(v, [tail, 100 - tail])
        a, b = min(a + shift, observed[s]), max(b + shift, observed[s])
        lo.append(min(max(a, lo_cut[s]), hi_cut[s]))
        hi.append(min(max(b, lo_cut[s]), hi_cut[s]))
    return lo, hi
