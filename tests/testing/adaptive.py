"""Adaptive endings on simulated stories (docs/metrics.md 1.7): each story draws the
fixed run's M endings a position in order (binomial verdicts on a ground-truth shape of
`tension.testing.precision`), and the adaptive run at a target uses the first k of
them, k by the stopping rule (kernels/stopping.py): the pairing a seeded server gives.
Compared with the fixed run's statistics and their 95 % intervals (kernels/intervals.py).
The kernel test (tests/kernels/test_adaptive_simulation.py) and bench/precision.py share it."""

from __future__ import annotations

import msgspec
import numpy as np

from tension.kernels import curves, intervals
from tension.kernels.curves import CurveSettings
from tension.kernels.stopping import stop_counts
from tension.testing.precision import shape

__all__ = ["STATS", "Paired", "Outcome", "draw_stories", "at_target"]

STATS = ["mean_nr", "late_nr", "retain", "convergence", "ir30", "ir60", "ir120"]


def _stats(x: np.ndarray, y: np.ndarray, offsets: np.ndarray, settings: CurveSettings) -> np.ndarray:
    b = curves.batch_stats(x, y, offsets, settings)
    return np.column_stack([b.mean_nr, b.late_nr, b.retain, b.convergence, b.ir])


class Paired(msgspec.Struct, frozen=True, kw_only=True):
    """Stories of one shape: their endings' no's in draw order, the fixed run's
    statistics and intervals."""

    x: np.ndarray  # positions' pct, tiled over the stories
    p_no: np.ndarray  # the true no-rate of each position, tiled
    offsets: np.ndarray
    draws: np.ndarray  # (stories × positions) × M, 1 = a no
    fixed: np.ndarray  # stories × statistics
    lo: np.ndarray
    hi: np.ndarray


def draw_stories(name: str, stories: int, positions: int, max_endings: int, settings: CurveSettings,
                 resamples: int, seed: int) -> Paired:
    rng = np.random.default_rng(seed)
    x, p = shape(name, positions)
    draws = (rng.random((stories, positions, max_endings)) < p[None, :, None]).reshape(-1, max_endings)
    xs = np.tile(x, stories)
    off = np.arange(stories + 1, dtype=np.int64) * positions
    no = draws.sum(axis=1)
    fixed = _stats(xs, no / max_endings, off, settings)
    nn = np.full(len(no), max_endings, dtype=np.int64)
    r = intervals.story_intervals([f"{seed}-{i}" for i in range(stories)], xs, nn, max_endings - no, off, fixed,
                                  settings, n_resamples=resamples, seed=seed)
    return Paired(x=xs, p_no=np.tile(p, stories), offsets=off, draws=draws.astype(np.int8), fixed=fixed,
                  lo=r.lo, hi=r.hi)


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """An adaptive run at one target against the fixed run, over one shape's stories."""

    share_of_fixed: float  # endings used / the fixed run's
    inside: np.ndarray  # per statistic: share of stories whose adaptive value is in the fixed interval
    dist_over_width: np.ndarray  # per statistic: |adaptive − fixed| / interval width, quantiles 0.5, 0.9, max
    stat_bias: np.ndarray  # per statistic: mean(adaptive − fixed)
    no_rate_bias: float  # mean(adaptive no-rate − true), over positions
    fixed_no_rate_bias: float  # the same of the fixed run: its noise floor


def at_target(s: Paired, target: float, round_endings: int, max_endings: int, settings: CurveSettings) -> Outcome:
    used = stop_counts(s.draws, round_endings, max_endings, target)
    cum = np.cumsum(s.draws, axis=1)
    no = cum[np.arange(len(used)), used - 1]
    y = no / used
    adaptive = _stats(s.x, y, s.offsets, settings)
    has = np.isfinite(s.lo) & np.isfinite(adaptive)
    inside = has & (s.lo - 1e-12 <= adaptive) & (adaptive <= s.hi + 1e-12)
    width = s.hi - s.lo
    with np.errstate(all="ignore"):
        ratio = np.where(has, np.abs(adaptive - s.fixed) / np.where(width > 0, width, np.nan), np.nan)
        dist = np.column_stack([np.nanquantile(ratio, q, axis=0) for q in (0.5, 0.9, 1.0)])
        bias = np.nanmean(np.where(has, adaptive - s.fixed, np.nan), axis=0)
    return Outcome(share_of_fixed=float(used.sum() / (len(used) * max_endings)),
                   inside=inside.sum(axis=0) / np.maximum(has.sum(axis=0), 1), dist_over_width=dist,
                   stat_bias=bias, no_rate_bias=float(np.mean(y - s.p_no)),
                   fixed_no_rate_bias=float(np.mean(s.draws.mean(axis=1) - s.p_no)))
