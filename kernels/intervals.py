"""Per-story intervals of the curve statistics (docs/metrics.md 1.6): resample the
verdicts within each position, recompute the whole curve, its smoothing, its angles
and every statistic for each resample (`curves.stats_row`, the kernel stories.csv's
values come from), and take the percentile interval of the resampled values.

A position is (n endings judged, n_match matches); its no-rate is 1 − n_match / n.
Each resample draws every position's no-rate anew (the draws below), so a position
may hold any number of endings (adaptive rounds give positions different n): the
kernel only ever reads per-position n and n_match.

Curves are packed CSR-style as in kernels/curves.py: flat ``x``, ``n``, ``k``
(matches) and ``offsets``. Every story has its own seed (`story_seeds`: the run's
seed mixed with a hash of the story's id), so a story's interval is the same in a
run of one story or of the whole corpus, in any order.
"""

from __future__ import annotations

import enum
import hashlib
import math
import warnings
from collections.abc import Sequence

import msgspec
import numba
import numpy as np

from tension.kernels.curves import stats_row
from tension.kernels.settings import CurveSettings

__all__ = ["Draw", "pack_counts", "N_INTERVAL_RESAMPLES", "LEVEL", "MIN_DEFINED", "StoryIntervals", "story_seeds",
           "resample_stats", "resample_curves", "shifted_interval", "story_intervals", "INTERVAL_SEED"]

N_INTERVAL_RESAMPLES = 1000
INTERVAL_SEED = 0
LEVEL = 0.95
# A resample may leave a statistic undefined where the observed curve defines it (a
# peak that the resample flattens: no Retain). The interval is taken over the
# resamples that define it, and only when at least this share do: otherwise the
# interval would describe a minority of the resamples.
MIN_DEFINED = 0.5


class Draw(enum.IntEnum):
    """How a position's no-rate is drawn in a resample (docs/metrics.md 1.6)."""

    BINOMIAL = 0  # the plain bootstrap: n draws with replacement of the n verdicts
    JEFFREYS = 1  # a draw from the Beta(n − n_match + ½, n_match + ½) posterior
    EDGE = 2  # the plain bootstrap, but an all-match / no-match position draws at (k + ½) / (n + 1)


@numba.njit(cache=True, nogil=True)
def _match_p(n, k, draw):
    """The chance of a match a resample draws a position's verdicts with."""
    if draw == 2 and (k == 0 or k == n):
        return (k + 0.5) / (n + 1.0)
    return k / n


# A position of more endings than this draws with numba's binomial instead of a table
# (its table would be long, and (1 − p)^n can underflow).
_TABLE_MAX = 1000


@numba.njit(cache=True, nogil=True)
def _tables(n, k, a, m, draw, cdf, start, flip):
    """The cumulative Binomial(n, p) distribution of each position (a … a+m−1) into
    cdf[start[j] : start[j] + n + 1]: drawing a binomial is then one uniform and a
    binary search (bench/intervals.py has its cost). A position whose p is above ½
    gets the table of its non-matches (flip[j]), so the first term, (1 − p)^n, is at
    least 2^−n and never underflows for the n a table is used for."""
    at = 0
    for j in range(m):
        nj = n[a + j]
        start[j] = at
        if nj > _TABLE_MAX or draw == 1:
            continue
        p = _match_p(nj, k[a + j], draw)
        flip[j] = p > 0.5
        if flip[j]:
            p = 1.0 - p
        if p <= 0.0:
            for i in range(nj + 1):
                cdf[at + i] = 1.0
        else:
            pmf = (1.0 - p) ** nj
            odds = p / (1.0 - p)
            c = 0.0
            for i in range(nj + 1):
                c += pmf
                cdf[at + i] = c
                pmf *= (nj - i) / (i + 1.0) * odds
        cdf[at + nj] = 1.0  # the last value is certain, whatever the rounding of the sum
        at += nj + 1


@numba.njit(cache=True, nogil=True)
def _draw_curve(n, k, a, m, draw, cdf, start, flip, yb):
    """One resample of a story's curve (positions a … a+m−1) into yb[:m]."""
    for j in range(m):
        nj = n[a + j]
        if draw == 1:
            yb[j] = np.random.beta(nj - k[a + j] + 0.5, k[a + j] + 0.5)
        elif nj > _TABLE_MAX:
            yb[j] = 1.0 - np.random.binomial(nj, _match_p(nj, k[a + j], draw)) / nj
        else:
            u = np.random.random()
            lo = start[j]
            hi = lo + nj  # cdf[hi] == 1 > u: the first index with cdf > u is in [lo, hi]
            while lo < hi:
                mid = (lo + hi) // 2
                if cdf[mid] > u:
                    hi = mid
                else:
                    lo = mid + 1
            drawn = lo - start[j]
            yb[j] = 1.0 - (nj - drawn if flip[j] else drawn) / nj


@numba.njit(cache=True, nogil=True)
def _story_ok(x, n, k, a, b):
    """A story can be resampled: it has positions, each with judged endings, a
    count of matches within them and a finite pct."""
    if b <= a:
        return False
    for j in range(a, b):
        if n[j] <= 0 or k[j] < 0 or k[j] > n[j] or not math.isfinite(x[j]):
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _scratch(n, offsets):
    """Table space for the story with the most table entries, and its starts."""
    most = 0
    mmax = 0
    for i in range(offsets.shape[0] - 1):
        t = 0
        for j in range(offsets[i], offsets[i + 1]):
            if n[j] > 0:
                t += n[j] + 1
        most = max(most, t)
        mmax = max(mmax, offsets[i + 1] - offsets[i])
    return np.empty(most), np.empty(mmax, dtype=np.int64), np.zeros(mmax, dtype=np.bool_)


@numba.njit(cache=True, nogil=True)
def _draw_curves(x, n, k, offsets, seeds, n_resamples, draw, out):
    """out[r, j] = position j's no-rate in its story's resample r (the same stream
    `_resample` draws; NaN for a story that cannot be resampled)."""
    cdf, start, flip = _scratch(n, offsets)
    for i in range(offsets.shape[0] - 1):
        a = offsets[i]
        b = offsets[i + 1]
        if not _story_ok(x, n, k, a, b):
            out[:, a:b] = np.nan
            continue
        _tables(n, k, a, b - a, draw, cdf, start, flip)
        np.random.seed(seeds[i])
        for r in range(n_resamples):
            _draw_curve(n, k, a, b - a, draw, cdf, start, flip, out[r, a:b])


@numba.njit(cache=True, nogil=True)
def _resample(x, n, k, offsets, seeds, half, thresholds, late_threshold, retention_window,
              n_resamples, draw, out):
    """out[i, b, :] = the statistics of story i's resample b (NaN where the story has
    no position, a position without judged endings, or a non-finite pct)."""
    stories = offsets.shape[0] - 1
    cdf, start, flip = _scratch(n, offsets)
    mmax = start.shape[0]
    yb = np.empty(mmax)
    ys = np.empty(mmax)
    X = np.empty(mmax)
    Y = np.empty(mmax)
    for i in range(stories):
        a = offsets[i]
        b = offsets[i + 1]
        m = b - a
        if not _story_ok(x, n, k, a, b):
            out[i, :, :] = np.nan
            continue
        _tables(n, k, a, m, draw, cdf, start, flip)
        # numba keeps its own generator state; seeding per story makes a story's
        # resamples a pure function of (its verdicts, its seed, n_resamples)
        np.random.seed(seeds[i])
        xs = x[a:b]
        for r in range(n_resamples):
            _draw_curve(n, k, a, m, draw, cdf, start, flip, yb)
            stats_row(xs, yb[:m], half, thresholds, late_threshold, retention_window, ys, X, Y, out[i, r])


class StoryIntervals(msgspec.Struct, frozen=True, kw_only=True):
    """Interval bounds of many stories: ``lo`` and ``hi`` are n × s (the statistics in
    stories.csv's order: mean NR, late NR, Retain, convergence, one IR per threshold)."""

    lo: np.ndarray
    hi: np.ndarray
    n_resamples: int
    seed: int
    level: float


def story_seeds(ids: Sequence[str], seed: int) -> np.ndarray:
    """A 32-bit seed per story from the run's seed and the story's id (blake2b): the
    same story gets the same resamples wherever it stands in a corpus."""
    out = np.empty(len(ids), dtype=np.int64)
    for i, sid in enumerate(ids):
        h = hashlib.blake2b(f"{int(seed)}\x00{sid}".encode(), digest_size=4).digest()
        out[i] = int.from_bytes(h, "little")
    return out


def pack_counts(x, n, k, offsets):
    """The verdict counts as the kernels take them (pct, endings and matches a position; the
    stories' offsets), checked: equal lengths, offsets from 0 to len(x), non-decreasing."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    n = np.ascontiguousarray(n, dtype=np.int64)
    k = np.ascontiguousarray(k, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if not x.shape == n.shape == k.shape or x.ndim != 1:
        raise ValueError(f"x, n and k must be 1-D of equal length, got {x.shape}, {n.shape} and {k.shape}")
    if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(x):
        raise ValueError("offsets must start at 0 and end at len(x)")
    if np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must be non-decreasing")
    return x, n, k, offsets


def resample_stats(x, n, k, offsets, seeds, settings: CurveSettings = CurveSettings(),
                   n_resamples: int = N_INTERVAL_RESAMPLES, draw: Draw = Draw.EDGE) -> np.ndarray:
    """The statistics of every resample of every story: an array stories × n_resamples × s."""
    x, n, k, offsets = pack_counts(x, n, k, offsets)
    if n_resamples < 1:
        raise ValueError(f"n_resamples: expected an integer >= 1, got {n_resamples}")
    seeds = np.ascontiguousarray(seeds, dtype=np.int64)
    if len(seeds) != len(offsets) - 1:
        raise ValueError(f"{len(offsets) - 1} stories but {len(seeds)} seeds")
    thresholds = np.asarray(settings.thresholds, dtype=np.float64)
    out = np.empty((len(offsets) - 1, int(n_resamples), 4 + len(thresholds)))
    _resample(x, n, k, offsets, seeds, settings.window // 2, thresholds, float(settings.late_threshold),
              int(settings.retention_window), int(n_resamples), int(draw), out)
    return out


def resample_curves(x, n, k, offsets, seeds, n_resamples: int = N_INTERVAL_RESAMPLES,
                    draw: Draw = Draw.EDGE) -> np.ndarray:
    """The resampled no-rate curves themselves (n_resamples × positions, packed as `x`):
    the draws `resample_stats` computes its statistics from, for checking it against
    an independent computation of the statistics."""
    x, n, k, offsets = pack_counts(x, n, k, offsets)
    seeds = np.ascontiguousarray(seeds, dtype=np.int64)
    out = np.empty((int(n_resamples), len(x)))
    _draw_curves(x, n, k, offsets, seeds, int(n_resamples), int(draw), out)
    return out


# The values each statistic can take (mean NR, late NR, Retain %, convergence %, then
# each IR): a moved interval is cut to them.
def _ranges(t: int) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([0.0, 0.0, 0.0, -100.0] + [0.0] * t), np.array([1.0, 1.0, 100.0, 0.0] + [1.0] * t))


def shifted_interval(values: np.ndarray, points: np.ndarray, level: float = LEVEL,
                     cut: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of each story and statistic from its resamples `values` (stories × B × s)
    and its observed values `points` (stories × s): the percentiles (100 ∓ level)/2 of
    the finite resampled values (numpy's default, linear rule), moved by (observed −
    mean of the resamples), widened to hold the observed value, then cut to the
    statistic's range (`cut`; a difference of two runs' statistics is not cut). NaN
    where the observed value is NaN or fewer than MIN_DEFINED of the resamples define
    the statistic.

    Why moved (docs/metrics.md 1.6): a resample adds sampling noise to a curve that
    already holds it, so a statistic that noise moves (reversals, peaks) sits higher in
    the resamples than in the data; the plain percentile interval then misses the
    value it is for (on simulated stories, IR30 was covered in 54 % of them, Retain in
    under 1 %). Moved, it keeps the resamples' spread around the observed value."""
    tail = 100.0 * (1.0 - level) / 2.0
    finite = np.isfinite(values)
    share = finite.mean(axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN slice is NaN, which is the answer
        q_lo, q_hi = np.nanpercentile(values, [tail, 100.0 - tail], axis=1)
        centre = np.nanmean(values, axis=1)
    # widened to hold the observed value: a discrete statistic can have 97.5 % of its
    # resamples on one value and its mean beyond it, which would move both ends past it
    lo = np.minimum(points + (q_lo - centre), points)
    hi = np.maximum(points + (q_hi - centre), points)
    if cut:
        lo_cut, hi_cut = _ranges(values.shape[2] - 4)
        lo, hi = np.clip(lo, lo_cut, hi_cut), np.clip(hi, lo_cut, hi_cut)
    undefined = (share < MIN_DEFINED) | ~np.isfinite(points)
    lo[undefined] = np.nan
    hi[undefined] = np.nan
    return lo, hi


# Stories per call of the kernel: the resampled statistics of a chunk (chunk × B × s
# floats, 64 × 1000 × 7 × 8 B = 3.6 MB) are all that is held at once, whatever the corpus.
_CHUNK = 64


def story_intervals(ids: Sequence[str], x, n, k, offsets, points, settings: CurveSettings = CurveSettings(), *,
                    n_resamples: int = N_INTERVAL_RESAMPLES, seed: int = INTERVAL_SEED,
                    level: float = LEVEL, draw: Draw = Draw.EDGE) -> StoryIntervals:
    """The `level` interval of every statistic of every story of a packed batch;
    `points` (stories × s) are the observed statistics (stories.csv's values), which
    each interval is placed around."""
    x, n, k, offsets = pack_counts(x, n, k, offsets)
    points = np.asarray(points, dtype=np.float64)
    if len(ids) != len(offsets) - 1:
        raise ValueError(f"{len(offsets) - 1} stories but {len(ids)} ids")
    if points.shape != (len(ids), 4 + len(settings.thresholds)):
        raise ValueError(f"points: expected shape {(len(ids), 4 + len(settings.thresholds))}, got {points.shape}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: expected a number in (0, 1), got {level}")
    seeds = story_seeds(ids, seed)
    s = 4 + len(settings.thresholds)
    lo = np.full((len(ids), s), math.nan)
    hi = np.full((len(ids), s), math.nan)
    for c in range(0, len(ids), _CHUNK):
        e = min(len(ids), c + _CHUNK)
        a, b = offsets[c], offsets[e]
        draws = resample_stats(x[a:b], n[a:b], k[a:b], offsets[c:e + 1] - a, seeds[c:e], settings,
                               n_resamples, draw)
        lo[c:e], hi[c:e] = shifted_interval(draws, points[c:e], level)
    return StoryIntervals(lo=lo, hi=hi, n_resamples=int(n_resamples), seed=int(seed), level=float(level))
