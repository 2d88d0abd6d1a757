"""Curve statistics of the 100-Endings metric (docs/metrics.md 1.4) as numba kernels.

Many stories are processed in one call. Curves are packed CSR-style: one flat
``x`` (pct revealed), one flat ``y`` (no-rate) and ``offsets`` of length n+1, so
story ``i`` is ``x[offsets[i]:offsets[i+1]]``. Every kernel is a plain loop over
stories and positions; nothing allocates per story except small scratch arrays.

Edge cases give NaN with a reason flag (see ``Reason``) instead of raising, so a
corpus with one odd story still yields numbers for all the others.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence

import msgspec
import numba
import numpy as np

from tension.kernels.settings import CurveSettings

__all__ = [
    "TIE_EPS",
    "ANGLE_EPS",
    "Reason",
    "CurveSettings",
    "StoryStats",
    "BatchStats",
    "pack",
    "smooth",
    "unit_square",
    "vertex_angles",
    "reversals",
    "story_stats",
    "batch_stats",
]

# docs/metrics.md 1.4: differences within 1e-12 count as zero, so summation noise never
# creates or removes a reversal or a peak.
TIE_EPS = 1e-12
# arccos of an exact 60° vertex can come out as 60.00000000000001; an angle within
# this many degrees of a threshold counts as on it (docs/metrics.md).
ANGLE_EPS = 1e-9


class Reason(enum.IntFlag):
    """Why a story statistic is NaN. Several can hold at once."""

    NONE = 0
    NO_POSITIONS = 1  # m == 0: nothing is defined
    FEW_POSITIONS = 2  # m < 3: no vertex angles, so no inflection rate
    NO_LATE = 4  # no position with x >= late threshold: late NR undefined
    NO_PEAK = 8  # no local peak in the raw curve: retain/convergence undefined
    NAN_INPUT = 16  # x or y holds NaN or inf: every statistic undefined

    def describe(self) -> list[str]:
        return [_REASON_TEXT[r] for r in Reason if r and r in self]


_REASON_TEXT = {
    Reason.NO_POSITIONS: "no positions",
    Reason.FEW_POSITIONS: "fewer than 3 positions (no inflection rate)",
    Reason.NO_LATE: "no late position (late NR undefined)",
    Reason.NO_PEAK: "no peak (retain/convergence undefined)",
    Reason.NAN_INPUT: "NaN or infinite value in the curve",
}


class StoryStats(msgspec.Struct, frozen=True, kw_only=True):
    """Statistics of one story. ``retain`` and ``convergence`` are percentages,
    ``ir`` holds one inflection rate (a fraction) per threshold, in order."""

    n_positions: int
    mean_nr: float
    late_nr: float
    retain: float
    convergence: float
    ir: tuple[float, ...]
    reasons: Reason = Reason.NONE


class BatchStats(msgspec.Struct, frozen=True, kw_only=True):
    """Statistics of many stories as columns (arrays of length n; ``ir`` is n × t)."""

    n_positions: np.ndarray
    mean_nr: np.ndarray
    late_nr: np.ndarray
    retain: np.ndarray
    convergence: np.ndarray
    ir: np.ndarray
    reasons: np.ndarray

    def __len__(self) -> int:
        return len(self.mean_nr)

    def story(self, i: int) -> StoryStats:
        return StoryStats(
            n_positions=int(self.n_positions[i]),
            mean_nr=float(self.mean_nr[i]),
            late_nr=float(self.late_nr[i]),
            retain=float(self.retain[i]),
            convergence=float(self.convergence[i]),
            ir=tuple(float(v) for v in self.ir[i]),
            reasons=Reason(int(self.reasons[i])),
        )


# ----------------------------------------------------------------------------
# Per-story building blocks (njit, operate on one story's slices)


@numba.njit(cache=True, nogil=True)
def _smooth_into(y, half, out):
    m = y.shape[0]
    for j in range(m):
        lo = j - half if j >= half else 0
        hi = j + half + 1 if j + half + 1 <= m else m
        s = 0.0
        for t in range(lo, hi):
            s += y[t]
        out[j] = s / (hi - lo)


@numba.njit(cache=True, nogil=True)
def _sign(d):
    if d > TIE_EPS:
        return 1
    if d < -TIE_EPS:
        return -1
    return 0


@numba.njit(cache=True, nogil=True)
def _angle(x0, y0, x1, y1, x2, y2):
    """Angle in degrees at (x1, y1) between the legs to its two neighbours."""
    ax = x0 - x1
    ay = y0 - y1
    bx = x2 - x1
    by = y2 - y1
    na = math.sqrt(ax * ax + ay * ay)
    nb = math.sqrt(bx * bx + by * by)
    if na == 0.0 or nb == 0.0:
        return np.nan
    c = (ax * bx + ay * by) / (na * nb)
    if c > 1.0:
        c = 1.0
    elif c < -1.0:
        c = -1.0
    return math.degrees(math.acos(c))


@numba.njit(cache=True, nogil=True)
def _unit_square_into(x, ys, X, Y):
    m = x.shape[0]
    xmin = x[0]
    xmax = x[0]
    ymin = ys[0]
    ymax = ys[0]
    for j in range(1, m):
        xmin = min(xmin, x[j])
        xmax = max(xmax, x[j])
        ymin = min(ymin, ys[j])
        ymax = max(ymax, ys[j])
    xr = xmax - xmin
    yr = ymax - ymin
    for j in range(m):
        X[j] = (x[j] - xmin) / xr if xr > 0.0 else 0.0
        # A flat curve maps to Y = 0 everywhere (and then has no reversals).
        Y[j] = (ys[j] - ymin) / yr if yr > 0.0 else 0.0


@numba.njit(cache=True, nogil=True)
def _finite(a):
    for v in a:
        if not math.isfinite(v):
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _retention(yr, retention_window):
    """(has a peak, Retain %, convergence %) of curve `yr` (docs/metrics.md 1.4); the
    two values are NaN when the curve has no peak."""
    m = yr.shape[0]
    npk = 0
    rsum = 0.0
    csum = 0.0
    for j in range(1, m - 1):
        if _sign(yr[j] - yr[j - 1]) > 0 and _sign(yr[j] - yr[j + 1]) > 0:
            hi = min(m, j + 1 + retention_window)
            low = yr[j + 1]
            for q in range(j + 2, hi):
                low = min(low, yr[q])
            rsum += low / yr[j]
            csum += (low - yr[j]) / yr[j]
            npk += 1
    if npk == 0:
        return False, np.nan, np.nan
    return True, 100.0 * rsum / npk, 100.0 * csum / npk


@numba.njit(cache=True, nogil=True)
def stats_row(xs, yr, half, thresholds, late_threshold, retention_window, ys, X, Y, row):
    """Every statistic of one story's finite curve (xs, yr; m >= 1) into `row`: mean NR,
    late NR, Retain, convergence, then one inflection rate per threshold; returns the
    Reason bits. `ys`, `X` and `Y` are scratch of at least m values. The batch kernel
    and the resampling kernel (kernels/intervals.py) both call it, so an interval is
    always of the statistic stories.csv holds."""
    m = xs.shape[0]
    t = thresholds.shape[0]
    for q in range(row.shape[0]):
        row[q] = np.nan
    flags = 0

    # Mean and late NR.
    s = 0.0
    sl = 0.0
    nl = 0
    for j in range(m):
        s += yr[j]
        if xs[j] >= late_threshold - TIE_EPS:
            sl += yr[j]
            nl += 1
    row[0] = s / m
    if nl > 0:
        row[1] = sl / nl
    else:
        flags |= 4

    # Post-spike retention on the raw curve.
    peak, row[2], row[3] = _retention(yr, retention_window)
    if not peak:
        flags |= 8

    # Inflection rate on the smoothed curve in the unit square.
    if m < 3:
        flags |= 2
    else:
        _smooth_into(yr, half, ys[:m])
        _unit_square_into(xs, ys[:m], X[:m], Y[:m])
        for k in range(t):
            row[4 + k] = 0.0
        for j in range(1, m - 1):
            if _sign(ys[j] - ys[j - 1]) * _sign(ys[j + 1] - ys[j]) < 0:
                ang = _angle(X[j - 1], Y[j - 1], X[j], Y[j], X[j + 1], Y[j + 1])
                for k in range(t):
                    if ang <= thresholds[k] + ANGLE_EPS:
                        row[4 + k] += 1.0
        for k in range(t):
            row[4 + k] /= m
    return flags


# ----------------------------------------------------------------------------
# The batch kernel


@numba.njit(cache=True, nogil=True)
def _batch(x, y, offsets, half, thresholds, late_threshold, retention_window,
           n_positions, mean_nr, late_nr, retain, convergence, ir, reasons):
    n = offsets.shape[0] - 1
    t = thresholds.shape[0]
    mmax = 0
    for i in range(n):
        mmax = max(mmax, offsets[i + 1] - offsets[i])
    ys = np.empty(mmax)
    X = np.empty(mmax)
    Y = np.empty(mmax)
    row = np.empty(4 + t)
    for i in range(n):
        a = offsets[i]
        b = offsets[i + 1]
        m = b - a
        n_positions[i] = m
        mean_nr[i] = np.nan
        late_nr[i] = np.nan
        retain[i] = np.nan
        convergence[i] = np.nan
        for k in range(t):
            ir[i, k] = np.nan
        if m == 0:
            reasons[i] = 1 | 2 | 4 | 8
            continue
        xs = x[a:b]
        yr = y[a:b]
        if not (_finite(xs) and _finite(yr)):
            reasons[i] = 16
            continue
        reasons[i] = stats_row(xs, yr, half, thresholds, late_threshold, retention_window, ys, X, Y, row)
        mean_nr[i] = row[0]
        late_nr[i] = row[1]
        retain[i] = row[2]
        convergence[i] = row[3]
        for k in range(t):
            ir[i, k] = row[4 + k]


# ----------------------------------------------------------------------------
# Typed Python API


def pack(curves: Sequence[tuple[Sequence[float], Sequence[float]]]):
    """Pack ``[(x, y), …]`` into flat ``x``, ``y`` and ``offsets`` arrays."""
    lengths = np.fromiter((len(c[0]) for c in curves), dtype=np.int64, count=len(curves))
    for i, (cx, cy) in enumerate(curves):
        if len(cx) != len(cy):
            raise ValueError(f"curve {i}: x has {len(cx)} values, y has {len(cy)}")
    offsets = np.zeros(len(curves) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if len(curves):
        x = np.concatenate([np.asarray(c[0], dtype=np.float64) for c in curves])
        y = np.concatenate([np.asarray(c[1], dtype=np.float64) for c in curves])
    else:
        x = np.empty(0)
        y = np.empty(0)
    return x, y, offsets


def batch_stats(x, y, offsets, settings: CurveSettings = CurveSettings()) -> BatchStats:
    """Statistics of every story in a packed batch (see the module docstring)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D of equal length, got {x.shape} and {y.shape}")
    if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(x):
        raise ValueError("offsets must start at 0 and end at len(x)")
    if np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must be non-decreasing")
    n = len(offsets) - 1
    thresholds = np.asarray(settings.thresholds, dtype=np.float64)
    out = BatchStats(
        n_positions=np.empty(n, dtype=np.int64),
        mean_nr=np.empty(n),
        late_nr=np.empty(n),
        retain=np.empty(n),
        convergence=np.empty(n),
        ir=np.empty((n, len(thresholds))),
        reasons=np.empty(n, dtype=np.int64),
    )
    _batch(x, y, offsets, settings.window // 2, thresholds, float(settings.late_threshold),
           int(settings.retention_window), out.n_positions, out.mean_nr, out.late_nr,
           out.retain, out.convergence, out.ir, out.reasons)
    return out


def story_stats(x, y, settings: CurveSettings = CurveSettings()) -> StoryStats:
    """Statistics of one story's curve."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"x has {x.size} values, y has {y.size}")
    return batch_stats(x, y, np.array([0, len(x)], dtype=np.int64), settings).story(0)


def smooth(y, window: int = 5) -> np.ndarray:
    """Centered moving average; the window shrinks at the ends (docs/metrics.md 1.4)."""
    CurveSettings(window=window)  # validates
    y = np.ascontiguousarray(y, dtype=np.float64)
    out = np.empty_like(y)
    _smooth_into(y, window // 2, out)
    return out


def unit_square(x, y_smoothed) -> tuple[np.ndarray, np.ndarray]:
    """Rescale both axes to [0, 1] with the curve's own ranges."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    ys = np.ascontiguousarray(y_smoothed, dtype=np.float64)
    X = np.empty_like(x)
    Y = np.empty_like(ys)
    if len(x):
        _unit_square_into(x, ys, X, Y)
    return X, Y


def vertex_angles(x, y_smoothed) -> np.ndarray:
    """Vertex angle in degrees at every interior point; NaN at both ends."""
    X, Y = unit_square(x, y_smoothed)
    m = len(X)
    out = np.full(m, np.nan)
    for j in range(1, m - 1):
        out[j] = _angle(X[j - 1], Y[j - 1], X[j], Y[j], X[j + 1], Y[j + 1])
    return out


def reversals(y_smoothed) -> np.ndarray:
    """Boolean mask of strict local extrema (ties within TIE_EPS are flat)."""
    ys = np.asarray(y_smoothed, dtype=np.float64)
    m = len(ys)
    out = np.zeros(m, dtype=bool)
    for j in range(1, m - 1):
        out[j] = _sign(ys[j] - ys[j - 1]) * _sign(ys[j + 1] - ys[j]) < 0
    return out
