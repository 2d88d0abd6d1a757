"""Per-story 95% intervals of the curve statistics (docs/metrics.md 1.6) from the
verdict counts of each position (`kernels.intervals`), the columns stories.csv holds
them in, and the per-story paired difference of two runs that `compare` reports.

A story's interval needs every position's counts (n_endings judged, n_match): a curve
read without them (a saved curve of x and y only, a positions.jsonl line written before
the counts) gets none, and its cells stay empty.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import msgspec
import numpy as np

from tension.kernels.curves import BatchStats, CurveSettings
from tension.kernels.intervals import (
    Draw,
    StoryIntervals,
    resample_stats,
    shifted_interval,
    story_intervals,
    story_seeds,
)

__all__ = ["interval_columns", "has_counts", "packed_counts", "compute_intervals", "stat_matrix", "StoryDiff",
           "paired_differences", "PAIRED_SEED_B"]

# Run B's resamples in `compare` use a stream of their own (the seed + this), independent
# of run A's: the verdicts of two runs are different draws, nothing pairs them resample by resample.
PAIRED_SEED_B = 0x9E3779B9


def interval_columns(stat_names: Sequence[str]) -> list[str]:
    """stories.csv's interval columns: `<stat>_lo`, `<stat>_hi` for each statistic, in order."""
    return [f"{name}_{end}" for name in stat_names for end in ("lo", "hi")]


def has_counts(c) -> bool:
    """A curve whose every position has its verdict counts."""
    return c.n_endings is not None and c.n_match is not None and len(c.n_endings) == len(c.x) and all(
        n > 0 for n in c.n_endings)


def stat_matrix(stats: BatchStats) -> np.ndarray:
    """The story statistics as one matrix, stories × (mean NR, late NR, Retain, convergence, IRs…)."""
    return np.column_stack([stats.mean_nr, stats.late_nr, stats.retain, stats.convergence, stats.ir])


def packed_counts(curves: Sequence, skip: Collection[str] = ()) -> tuple[np.ndarray, ...]:
    """x, n, k and offsets of the curves; a curve without counts, or whose id is in
    `skip`, is packed with no position (the kernel gives it NaN)."""
    used = [has_counts(c) and c.id not in skip for c in curves]
    lengths = np.fromiter((len(c.x) if u else 0 for c, u in zip(curves, used)), dtype=np.int64, count=len(curves))
    offsets = np.zeros(len(curves) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    with_counts = [c for c, u in zip(curves, used) if u]
    x = np.fromiter((v for c in with_counts for v in c.x), dtype=np.float64, count=total)
    n = np.fromiter((v for c in with_counts for v in c.n_endings), dtype=np.int64, count=total)
    k = np.fromiter((v for c in with_counts for v in c.n_match), dtype=np.int64, count=total)
    return x, n, k, offsets


def compute_intervals(curves: Sequence, stats: BatchStats, settings: CurveSettings,
                      failed: Collection[str] = ()) -> StoryIntervals | None:
    """Every story's intervals (None when `settings.interval_resamples` is 0); a failed
    story (id in `failed`) or one without counts gets NaN."""
    if settings.interval_resamples == 0:
        return None
    x, n, k, offsets = packed_counts(curves, failed)
    return story_intervals([c.id for c in curves], x, n, k, offsets, stat_matrix(stats), settings,
                           n_resamples=settings.interval_resamples, seed=settings.interval_seed)


class StoryDiff(msgspec.Struct, kw_only=True):
    """B − A of one statistic of one story held by both runs, with the 95% interval of
    the difference of the two runs' independent resamples (docs/metrics.md 1.6)."""

    key: str  # the pairing value (the story id, or the metadata field's value)
    stat: str
    a: float
    b: float
    diff: float
    lo: float
    hi: float
    significant: bool  # the interval excludes 0


def _resampled(curves: Sequence, settings: CurveSettings, seed: int) -> np.ndarray:
    x, n, k, offsets = packed_counts(curves)
    return resample_stats(x, n, k, offsets, story_seeds([c.id for c in curves], seed), settings,
                          settings.interval_resamples, Draw.EDGE)


# Pairs per call of the kernel: two chunks of resamples (chunk × B × s) are all that is held.
_CHUNK = 64


def paired_differences(keys: Sequence[str], curves_a: Sequence, stats_a: np.ndarray, curves_b: Sequence,
                       stats_b: np.ndarray, names: Sequence[str], settings: CurveSettings) -> list[StoryDiff]:
    """B − A per shared story and statistic (`curves_a[i]` pairs with `curves_b[i]`;
    `stats_*` are their stat matrices). Each run's verdicts are resampled on their own
    (run B's with a seed of its own), the differences of the i-th resamples taken, and
    the interval placed around the observed difference as a story's own interval is
    (`shifted_interval`). Pairs without counts in either run get no interval."""
    if not keys:
        return []
    diff = stats_b - stats_a
    if settings.interval_resamples == 0:
        lo = hi = np.full(diff.shape, math.nan)
    else:
        seed = settings.interval_seed
        lo, hi = np.full(diff.shape, math.nan), np.full(diff.shape, math.nan)
        for c in range(0, len(keys), _CHUNK):
            e = min(len(keys), c + _CHUNK)
            draws = (_resampled(curves_b[c:e], settings, seed + PAIRED_SEED_B)
                     - _resampled(curves_a[c:e], settings, seed))
            lo[c:e], hi[c:e] = shifted_interval(draws, diff[c:e], cut=False)
    out = []
    for i, key in enumerate(keys):
        for j, name in enumerate(names):
            out.append(StoryDiff(key=key, stat=name, a=float(stats_a[i, j]), b=float(stats_b[i, j]),
                                 diff=float(diff[i, j]), lo=float(lo[i, j]), hi=float(hi[i, j]),
                                 significant=bool(lo[i, j] > 0 or hi[i, j] < 0)))
    return out
