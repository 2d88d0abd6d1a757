"""The comparable second-order statistics a run's reports carry beside the paper's
(docs/metrics.md 1.9, issue 57): Retain, convergence and the IRs of the turns a rerun
would see again (`kernels/turns.py`, through `kernels.denoise.corrected_stats`), and
when a difference of them between two runs may be called a finding.

The paper's columns stay as they are (the paper's numbers are reproduced from them);
these are extra columns of stories.csv (`<stat>_comparable`, with intervals) and extra
statistics of groups.csv. A story without verdict counts gets none: the estimate needs
each position's standard error.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection, Sequence

import msgspec
import numpy as np

from tension.core.reports.story_intervals import has_counts, packed_counts
from tension.kernels.curves import CurveSettings
from tension.kernels.groups import GroupStat

__all__ = ["SUFFIX", "FINDING_MIN_ENDINGS", "finding_min_endings", "comparable_columns", "comparable_matrix",
           "comparable_intervals", "comparable_floor", "widened", "stat_range", "is_comparable", "paper_second_order",
           "min_endings", "finding_refusal"]

SUFFIX = "_comparable"
# The fewest endings a position from which the study (bench/second_order.py, docs/metrics.md
# 1.9) found each comparable statistic's group comparisons within every bar it was held to
# (true order ≥ 90 %, false positives ≤ 10 %, median bias 0.7–1.4×, widened coverage ≥ 90 %,
# at 60 and 120 positions); None: at no number of endings the study tried. An IR at an angle
# the study did not try takes the strictest of the IRs'.
FINDING_MIN_ENDINGS: dict[str, int | None] = {
    "ir30": 50, "ir60": 50, "ir120": 100, "retain": None, "convergence": None,
}
_STRICTEST_IR = 100


def finding_min_endings(stat: str) -> int | None:
    """The fewest endings a position from which a difference of the comparable `stat`
    may be a finding (FINDING_MIN_ENDINGS)."""
    base = stat.removesuffix(SUFFIX)
    return FINDING_MIN_ENDINGS.get(base, _STRICTEST_IR if base.startswith("ir") else None)


def comparable_columns(stat_names: Sequence[str]) -> list[str]:
    """Names of the comparable statistics, in output order, from the paper's statistics'
    names (`metrics.stat_columns`: mean and late NR, then the second-order ones)."""
    return [f"{name}{SUFFIX}" for name in stat_names[2:]]


def is_comparable(stat: str) -> bool:
    return stat.endswith(SUFFIX)


def paper_second_order(stat: str) -> bool:
    """The paper's Retain, convergence and IRs: for reproduction, never a finding."""
    return stat in ("retain", "convergence") or (stat.startswith("ir") and not is_comparable(stat))


def comparable_matrix(curves: Sequence, settings: CurveSettings, failed: Collection[str] = ()) -> np.ndarray:
    """stories × (Retain, convergence, IRs…) comparable; NaN for a story without counts
    or in `failed`."""
    from tension.kernels.turns import turn_stats

    x, n, k, offsets = packed_counts(curves, failed)
    return turn_stats(x, n, k, offsets, settings)  # corrected_stats' second-order columns, without its NR


def comparable_intervals(curves: Sequence, values: np.ndarray, settings: CurveSettings,
                         failed: Collection[str] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Each story's 95 % interval of each comparable statistic, as the paper's columns get
    theirs (docs/metrics.md 1.6): the story's verdicts redrawn `interval_resamples` times
    (the edge rule, its own seed), the estimate recomputed on each, the percentile
    interval moved by the observed value minus the resamples' mean."""
    from tension.kernels.intervals import resample_curves, shifted_interval, story_seeds
    from tension.kernels.turns import turn_stats

    lo = np.full(values.shape, np.nan)
    hi = np.full(values.shape, np.nan)
    b = settings.interval_resamples
    if b == 0 or not len(curves):
        return lo, hi
    x, n, k, offsets = packed_counts(curves, failed)
    seeds = story_seeds([c.id for c in curves], settings.interval_seed + 1)
    top = np.array([100.0, 0.0] + [1.0] * (values.shape[1] - 2))
    bottom = np.array([0.0, -100.0] + [0.0] * (values.shape[1] - 2))
    for i in range(len(curves)):
        a, e = int(offsets[i]), int(offsets[i + 1])
        m = e - a
        if m == 0 or not np.isfinite(values[i]).any():
            continue
        one = np.array([0, m], dtype=np.int64)
        ys = resample_curves(x[a:e], n[a:e], k[a:e], one, seeds[i:i + 1], b)  # b × m
        nb = np.tile(n[a:e], b)
        kb = np.rint((1.0 - ys.ravel()) * nb).astype(np.int64)
        draws = turn_stats(np.tile(x[a:e], b), nb, kb, np.arange(b + 1, dtype=np.int64) * m, settings)
        lo_i, hi_i = shifted_interval(draws[None], values[i][None], cut=False)
        lo[i], hi[i] = np.clip(lo_i[0], bottom, top), np.clip(hi_i[0], bottom, top)
    return lo, hi


def comparable_floor(curves: Sequence, settings: CurveSettings, failed: Collection[str] = ()) -> np.ndarray:
    """Each story's comparable statistics averaged over FLOOR_DRAWS redraws of its
    verdicts (each position's matches drawn anew from Binomial(n, n_match/n), a stream
    per story): how far one more layer of the endings' noise moves the estimate. The
    group interval widens by the group's shift (`widened`), as the study measured it."""
    from tension.kernels.intervals import story_seeds
    from tension.kernels.turns import FLOOR_DRAWS, turn_stats

    x, n, k, offsets = packed_counts(curves, failed)
    seeds = story_seeds([c.id for c in curves], settings.interval_seed + 2)
    kb = np.empty((FLOOR_DRAWS, len(k)), dtype=np.int64)
    for i in range(len(curves)):
        a, e = int(offsets[i]), int(offsets[i + 1])
        if e > a:
            kb[:, a:e] = np.random.default_rng(int(seeds[i])).binomial(n[a:e], k[a:e] / n[a:e], (FLOOR_DRAWS, e - a))
    draws = np.array([turn_stats(x, n, kb[d], offsets, settings) for d in range(FLOOR_DRAWS)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a story no draw defines: NaN
        return np.nanmean(draws, axis=0)


def stat_range(stat: str) -> tuple[float, float]:
    """The values a (comparable) statistic can take: Retain in percent, convergence =
    Retain − 100, the no-rates and IRs rates in [0, 1]."""
    base = stat.removesuffix(SUFFIX)
    return (0.0, 100.0) if base == "retain" else (-100.0, 0.0) if base == "convergence" else (0.0, 1.0)


def widened(stat: GroupStat, values: np.ndarray, floor: np.ndarray, name: str = "") -> GroupStat:
    """A group's summary with its intervals (ci95, the bootstrap's) widened on each side
    by |mean of the floor − mean of the values| over the group's stories; the bootstrap's
    ends cut to the range of the statistic `name` (an IR of few turns widened below 0 said
    a negative rate; ci95 is a half-width and stays as it is)."""
    ok = np.isfinite(values) & np.isfinite(floor)
    if not ok.any() or math.isnan(stat.mean):
        return stat
    shift = abs(float(floor[ok].mean() - values[ok].mean()))
    low, high = stat_range(name)
    # np.clip keeps a NaN end (a group of one story has no interval); max/min would not
    return msgspec.structs.replace(stat, ci95=stat.ci95 + shift,
                                   boot_lo=float(np.clip(stat.boot_lo - shift, low, high)),
                                   boot_hi=float(np.clip(stat.boot_hi + shift, low, high)))


def min_endings(curves: Sequence) -> int | None:
    """The fewest endings any position of the run's stories holds; None without counts."""
    counts = [min(c.n_endings) for c in curves if has_counts(c) and c.n_endings]
    return min(counts) if counts else None


def finding_refusal(stat: str, endings_a: int | None, endings_b: int | None) -> str | None:
    """Why a difference of `stat` between two runs cannot be called a finding, or None
    when it can (if significant): the paper's second-order statistics never; the
    comparable ones only from their FINDING_MIN_ENDINGS endings a position in both runs."""
    if paper_second_order(stat):
        return ("the paper's value, for reproduction: sampling noise and the curve's level move it more than "
                f"the story (docs/metrics.md 1.9); read {stat}{SUFFIX}")
    if not is_comparable(stat):
        return None
    fewest = [e for e in (endings_a, endings_b) if e is not None]
    if len(fewest) < 2:
        return "a run without verdict counts has no comparable estimate"
    need = finding_min_endings(stat)
    if need is None:
        return ("the study found no number of endings at which this estimate's group comparisons hold "
                "(docs/metrics.md 1.9): read it as a description")
    if min(fewest) < need:
        return (f"{min(fewest)} endings a position: the study holds this estimate's comparisons only from {need} "
                "(docs/metrics.md 1.9)")
    return None
