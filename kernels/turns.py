"""Turns of a tension curve at a fixed height: the second-order statistics that can be
compared between corpora (docs/metrics.md 1.9, issue 57).

The paper's inflection rate counts every reversal of the smoothed curve whose vertex
angle, in the curve's own unit square, is at most α; its Retain averages over every
peak of the raw curve. Both are scale-free: a wiggle of 0.001 no-rate counts as fully as
a fall of 0.5, because the unit square stretches the curve's range to 1 and a peak is a
peak at any height. Binomial noise of the endings makes such wiggles at every position,
so the paper's values measure the noise (and the curve's level, which sets it) as much
as the story, and a wiggle below the noise is not there to be measured at any number of
endings. The statistics here count only what a rerun would see again:

- **Turns.** The curve is smoothed as the paper's (`CurveSettings.window`, centred
  moving average). A turn is a pivot of its zigzag at height ``h`` (``TURN_HEIGHT``,
  no-rate units): the curve rose at least h to a peak and then fell at least h from it,
  or the other way round. Its **sharpness angle** is the angle between the chords from
  the pivot to the points, left and right, where the curve is first h away from it
  (linear between positions), with X the unit-square pct (the story's span, as the
  paper's) and Y the no-rate itself (not rescaled): so 60° means h is regained within
  about a 1/√3·h-wide stretch of the story on each side. ``ir_α`` = turns with angle ≤ α,
  per position (the paper's denominator).
- **Retain** (and convergence = Retain − 100): over the curve's zigzag peaks, the mean of
  ``min(s[j+1 : j+1+W]) / s[j]``, on the smoothed curve s, W the paper's retention
  window. NaN where the curve has no zigzag peak.

The noise-free curve's values are the **truth** a study can hold an estimate to
(bench/second_order.py). The estimate of a story (`turn_stats` with the position's
standard errors) confirms a pivot only once the curve has come back
``h + z·se`` (``z = TURN_Z``), with se the standard error of the difference of the two
smoothed no-rates (binomial, from each position's own counts with the edge rule of
kernels/intervals.py): a wiggle the noise can make is not taken for a turn. With se = 0
(the noise-free curve, or ``z = 0``) the rule is the definition itself.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from tension.kernels.curves import TIE_EPS
from tension.kernels.intervals import pack_counts
from tension.kernels.settings import CurveSettings

__all__ = ["TURN_HEIGHT", "TURN_Z", "TURN_C", "FLOOR_DRAWS", "turn_stats", "turn_stats_of_curves", "smoothed_se"]

# The height a turn must rise and fall (no-rate units): a tenth of the endings changing
# their verdict. Chosen before the study (bench/second_order.py) and not tuned on it: a
# reader's sense that the story turned, and twice the smoothed curve's binomial se at
# 100 endings (0.05 / √5 ≈ 0.022 at a no-rate of ½), so the truth is measurable there.
TURN_HEIGHT = 0.1
# The standard errors a story's return must clear beyond the height to confirm a turn
# (docs/metrics.md 1.9: the study's choice among 0, 1 and 2).
TURN_Z = 0.75
# The standard errors a pivot's reach is measured beyond h (docs/metrics.md 1.9): the
# highest of noisy values lies above the curve, so h below it is reached too soon and
# the turn looks sharper than it is.
TURN_C = 0.75
# Redraws of a story's verdicts whose mean estimate is its noise floor: the group
# interval widens by the group's shift to it (docs/metrics.md 1.9; the study used these).
FLOOR_DRAWS = 4


@numba.njit(cache=True, nogil=True)
def _smooth_se(n, k, a, m, half, se):
    """The binomial standard error of each position's smoothed no-rate."""
    for j in range(m):
        lo = j - half if j >= half else 0
        hi = j + half + 1 if j + half + 1 <= m else m
        v = 0.0
        for t in range(lo, hi):
            nt = n[a + t]
            p = (k[a + t] + 0.5) / (nt + 1.0)
            v += p * (1.0 - p) / nt
        se[j] = math.sqrt(v) / (hi - lo)


@numba.njit(cache=True, nogil=True)
def _pivots(s, se, h, z, piv, peak):
    """The zigzag's pivots of s at height h (a return must also clear z·se of the
    difference); returns their number, their indexes in piv and whether each is a
    peak in peak."""
    m = s.shape[0]
    npv = 0
    d = 0  # 0 until the first move of h sets the direction
    lo = 0
    hi = 0
    ext = 0
    for j in range(1, m):
        if d == 0:
            if s[j] > s[hi]:
                hi = j
            if s[j] < s[lo]:
                lo = j
            if s[j] - s[lo] >= h - TIE_EPS:
                d = 1
                ext = j
            elif s[hi] - s[j] >= h - TIE_EPS:
                d = -1
                ext = j
            continue
        need = h + z * math.sqrt(se[ext] * se[ext] + se[j] * se[j]) - TIE_EPS
        if d == 1:
            if s[j] > s[ext] + TIE_EPS:
                ext = j
            elif s[ext] - s[j] >= need:
                piv[npv] = ext
                peak[npv] = True
                npv += 1
                d = -1
                ext = j
        else:
            if s[j] < s[ext] - TIE_EPS:
                ext = j
            elif s[j] - s[ext] >= need:
                piv[npv] = ext
                peak[npv] = False
                npv += 1
                d = 1
                ext = j
    return npv


@numba.njit(cache=True, nogil=True)
def _reach(s, X, j, h, step):
    """The X distance from position j to where s is first h away from s[j], going
    `step` (−1 left, +1 right), linear between positions; inf if it never is."""
    m = s.shape[0]
    i = j
    while 0 <= i + step < m:
        i += step
        cur = abs(s[i] - s[j])
        if cur >= h - TIE_EPS:
            prev = abs(s[i - step] - s[j])
            t = (h - prev) / (cur - prev) if cur > prev else 1.0
            t = min(1.0, max(0.0, t))
            xi = X[i - step] + t * (X[i] - X[i - step])
            return abs(xi - X[j])
    return np.inf


@numba.njit(cache=True, nogil=True)
def turn_row(xs, ys, se, h, z, c, thresholds, retention_window, X, piv, peak, row):
    """Retain, convergence and one turn rate per threshold of one story's smoothed curve
    ys (se its standard errors; zeros for the definition itself) into row."""
    m = xs.shape[0]
    t = thresholds.shape[0]
    for q in range(row.shape[0]):
        row[q] = np.nan
    if m < 3:
        return
    xmin = xs[0]
    xmax = xs[0]
    for j in range(m):
        xmin = min(xmin, xs[j])
        xmax = max(xmax, xs[j])
    xr = xmax - xmin
    for j in range(m):
        X[j] = (xs[j] - xmin) / xr if xr > 0.0 else 0.0
    npv = _pivots(ys, se, h, z, piv, peak)
    for q in range(t):
        row[2 + q] = 0.0
    npk = 0
    rsum = 0.0
    for q in range(npv):
        j = piv[q]
        # a pivot found on noisy values sits about c·se beyond the curve's: its reach is
        # measured to h beyond where the curve is (se = 0: the definition's h)
        hj = h + c * se[j]
        ang = math.degrees(math.atan(_reach(ys, X, j, hj, -1) / h) + math.atan(_reach(ys, X, j, hj, 1) / h))
        for a in range(t):
            if ang <= thresholds[a] + 1e-9:
                row[2 + a] += 1.0
        if peak[q] and ys[j] > 0.0:
            low = ys[j + 1]
            for i in range(j + 2, min(m, j + 1 + retention_window)):
                low = min(low, ys[i])
            rsum += low / ys[j]
            npk += 1
    for a in range(t):
        row[2 + a] /= m
    if npk > 0:
        row[0] = 100.0 * rsum / npk
        row[1] = row[0] - 100.0


@numba.njit(cache=True, nogil=True)
def _turns(x, y, n, k, offsets, half, h, z, c, thresholds, retention_window, use_se, out):
    mmax = 1
    for i in range(offsets.shape[0] - 1):
        mmax = max(mmax, offsets[i + 1] - offsets[i])
    ys = np.empty(mmax)
    se = np.zeros(mmax)
    X = np.empty(mmax)
    piv = np.empty(mmax, dtype=np.int64)
    peak = np.empty(mmax, dtype=np.bool_)
    row = np.empty(2 + thresholds.shape[0])
    for i in range(offsets.shape[0] - 1):
        a = offsets[i]
        b = offsets[i + 1]
        m = b - a
        ok = m > 0
        for j in range(a, b):
            if not (math.isfinite(x[j]) and math.isfinite(y[j])):
                ok = False
            if use_se and (n[j] <= 0 or k[j] < 0 or k[j] > n[j]):
                ok = False
        if not ok:
            for q in range(out.shape[1]):
                out[i, q] = np.nan
            continue
        for j in range(m):
            lo = j - half if j >= half else 0
            hi = j + half + 1 if j + half + 1 <= m else m
            s = 0.0
            for t in range(lo, hi):
                s += y[a + t]
            ys[j] = s / (hi - lo)
        if use_se:
            _smooth_se(n, k, a, m, half, se)
        else:
            for j in range(m):
                se[j] = 0.0
        turn_row(x[a:b], ys[:m], se[:m], h, z, c, thresholds, retention_window, X[:m], piv[:m], peak[:m], row)
        for q in range(row.shape[0]):
            out[i, q] = row[q]


def _settings_args(settings: CurveSettings):
    return settings.window // 2, np.asarray(settings.thresholds, dtype=np.float64), int(settings.retention_window)


def turn_stats(x, n, k, offsets, settings: CurveSettings = CurveSettings(), h: float = TURN_HEIGHT,
               z: float = TURN_Z, c: float = TURN_C) -> np.ndarray:
    """The estimate of every story from its counts (n endings, k matches a position):
    stories × (Retain, convergence, one turn rate per threshold); NaN for a story with a
    position without endings, a count outside [0, n] or a NaN pct, and for Retain and
    convergence where no turn is a peak; IRs NaN for fewer than 3 positions."""
    x, n, k, offsets = pack_counts(x, n, k, offsets)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(n > 0, 1.0 - k / np.maximum(n, 1), np.nan)
    half, thresholds, rw = _settings_args(settings)
    out = np.empty((len(offsets) - 1, 2 + len(thresholds)))
    _turns(x, y, n, k, offsets, half, float(h), float(z), float(c), thresholds, rw, True, out)
    return out


def turn_stats_of_curves(x, y, offsets, settings: CurveSettings = CurveSettings(),
                         h: float = TURN_HEIGHT) -> np.ndarray:
    """The definition applied to known curves (a noise-free truth, or no-rates whose
    noise is not to be allowed for): `turn_stats` with every standard error 0."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    half, thresholds, rw = _settings_args(settings)
    out = np.empty((len(offsets) - 1, 2 + len(thresholds)))
    dummy = np.ones(len(x), dtype=np.int64)
    _turns(x, y, dummy, dummy, offsets, half, float(h), 0.0, 0.0, thresholds, rw, False, out)
    return out


def smoothed_se(n, k, m: int, window: int) -> np.ndarray:
    """The standard error of each smoothed no-rate of one story (`turn_stats`' se)."""
    n = np.ascontiguousarray(n, dtype=np.int64)
    k = np.ascontiguousarray(k, dtype=np.int64)
    se = np.empty(m)
    _smooth_se(n, k, 0, m, window // 2, se)
    return se
