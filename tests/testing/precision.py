"""Simulated stories for the precision of the story statistics (docs/metrics.md 1.6):
ground-truth no-rate curves of documented shapes, binomial verdicts drawn from them,
and the coverage of the per-story intervals. The coverage test
(tests/kernels/test_interval_coverage.py) and bench/intervals.py share them.

A curve's ground truth is the no-rate an infinite number of endings would give at
each position. A story's statistic is then compared with what it estimates: for mean
and late NR, the statistic of the true curve; for Retain, convergence and the IRs,
which sampling noise moves (noise adds reversals and peaks), the statistic's mean over
many reruns of the endings at the same n (`expected_stats`), the value an interval of
the sampling of endings and verdicts is about."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
import numpy as np

from tension.kernels import curves, intervals
from tension.kernels.curves import CurveSettings

__all__ = ["SHAPES", "EXTRA_SHAPES", "NEAR_CERTAIN", "shape", "expected_stats", "Simulated", "simulate", "coverage",
           "simulated_verdicts"]


def _flat_high(x: np.ndarray) -> np.ndarray:
    return np.full_like(x, 0.95)


def _falling(x: np.ndarray) -> np.ndarray:
    return 0.97 - 0.42 * (x - x[0]) / (x[-1] - x[0])


def _late_twist(x: np.ndarray) -> np.ndarray:
    return np.where(x < 0.75, 0.9, 0.5)


def _spiky(x: np.ndarray) -> np.ndarray:
    return 0.8 + 0.12 * np.sin(40.0 * x)


# name -> the true no-rate at each pct
SHAPES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "flat high (0.95)": _flat_high,
    "steadily falling (0.97 → 0.55)": _falling,
    "late twist (0.9, then 0.5 from 75 %)": _late_twist,
    "spiky (0.8 ± 0.12, reversals)": _spiky,
}
# A curve near the edge, where the plain bootstrap has no spread (most positions all
# non-matches): not one of the four shapes, shown beside them by bench/intervals.py.
NEAR_CERTAIN = "near certain (0.995)"
EXTRA_SHAPES: dict[str, Callable[[np.ndarray], np.ndarray]] = {NEAR_CERTAIN: lambda x: np.full_like(x, 0.995)}


def shape(name: str, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(pct, true no-rate) of `m` positions evenly over [0.1, 0.99]."""
    x = np.linspace(0.1, 0.99, m)
    return x, np.clip({**SHAPES, **EXTRA_SHAPES}[name](x), 0.0, 1.0)


def _stat_matrix(b: curves.BatchStats) -> np.ndarray:
    return np.column_stack([b.mean_nr, b.late_nr, b.retain, b.convergence, b.ir])


def _tile(x: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    return np.tile(x, count), np.arange(count + 1, dtype=np.int64) * len(x)


def expected_stats(x: np.ndarray, p: np.ndarray, n: int, settings: CurveSettings, reruns: int,
                   rng: np.random.Generator) -> np.ndarray:
    """What each statistic estimates (module docstring): the true curve's mean and late
    NR; the mean over `reruns` simulated runs of n endings of the others."""
    truth = _stat_matrix(curves.batch_stats(x, p, np.array([0, len(x)]), settings))[0]
    k = rng.binomial(n, 1.0 - p, size=(reruns, len(x)))
    xs, off = _tile(x, reruns)
    runs = _stat_matrix(curves.batch_stats(xs, (1.0 - k / n).ravel(), off, settings))
    with np.errstate(all="ignore"):
        mean = np.nanmean(runs, axis=0)
    return np.concatenate([truth[:2], mean[2:]])


class Simulated(msgspec.Struct, frozen=True, kw_only=True):
    """Stories drawn from one shape: their statistics, intervals and the target."""

    target: np.ndarray  # s
    points: np.ndarray  # stories × s
    lo: np.ndarray
    hi: np.ndarray


def simulate(name: str, stories: int, m: int, n: int, settings: CurveSettings, resamples: int, seed: int,
             reruns: int = 20_000, draw: intervals.Draw = intervals.Draw.EDGE) -> Simulated:
    """`stories` runs of `n` endings a position on the shape, each with its intervals."""
    rng = np.random.default_rng(seed)
    x, p = shape(name, m)
    target = expected_stats(x, p, n, settings, reruns, rng)
    k = rng.binomial(n, 1.0 - p, size=(stories, m)).ravel()
    xs, off = _tile(x, stories)
    nn = np.full(len(k), n, dtype=np.int64)
    points = _stat_matrix(curves.batch_stats(xs, 1.0 - k / n, off, settings))
    r = intervals.story_intervals([f"{seed}-{i}" for i in range(stories)], xs, nn, k, off, points, settings,
                                  n_resamples=resamples, seed=seed, draw=draw)
    return Simulated(target=target, points=points, lo=r.lo, hi=r.hi)


def coverage(sim: Simulated) -> tuple[np.ndarray, np.ndarray]:
    """(covered, with an interval) per statistic: how many stories' intervals hold the
    target, and how many stories have an interval at all."""
    has = np.isfinite(sim.lo)
    held = has & (sim.lo <= sim.target + 1e-12) & (sim.target - 1e-12 <= sim.hi)
    return held.sum(axis=0), has.sum(axis=0)


# The sd of the stories' levels within a group: the paper's Table 7 interval of a group of
# 32 stories, ±0.05–0.06 on mean and late NR, is 1.96 · sd / √32 with sd ≈ 0.15.
LEVEL_SD = 0.15


def simulated_verdicts(stories: int, m: int, n: int, seed: int, shapes: Sequence[str] | None = None,
                       groups: Sequence[str] | None = None):
    """A corpus of `stories` stories per shape (SHAPES by default), each of `m`
    positions with `n` endings whose verdicts are drawn from the shape's true
    no-rate, each shape its own group (or `groups[i]` for shape i), as
    `reports.subsampling.Verdicts`; and the true curves (ids → (x, p))."""
    from tension.core.reports.subsampling import Verdicts

    rng = np.random.default_rng(seed)
    names = list(shapes or SHAPES)
    ids, labels, xs, matches, truth = [], [], [], [], {}
    for si, name in enumerate(names):
        x, p = shape(name, m)
        for i in range(stories):
            sid = f"{si}-{i}"
            # a story's own level: the shape's true curve shifted per story by LEVEL_SD, so that a
            # group's stories differ as the paper's do
            pi = np.clip(p + rng.normal(0.0, LEVEL_SD), 0.02, 0.99)
            ids.append(sid)
            labels.append(groups[si] if groups else name)
            xs.append(x)
            matches.append((rng.random((m, n)) >= pi[:, None]).astype(np.int64).ravel())
            truth[sid] = (x, pi)
    offsets = np.arange(len(ids) + 1, dtype=np.int64) * m
    starts = np.arange(len(ids) * m + 1, dtype=np.int64) * n
    v = Verdicts(ids=ids, groups=labels, x=np.concatenate(xs), match=np.concatenate(matches), starts=starts,
                 offsets=offsets)
    return v, truth
