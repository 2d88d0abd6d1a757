"""How many endings a run's conclusions need (docs/metrics.md 1.8): every story and
group statistic recomputed from k of each position's n endings, from the run's own
verdicts, no LLM.

For each k of a grid: the first k endings of every position (what `score --endings k`
with the same seed draws on a seed-per-choice server), whose story statistics and
group summaries are computed exactly as stories.csv's and groups.csv's
(`reports.metrics.compute`), so the k = n row is the run's own; and `draws` random
subsets of k endings a position (kernels/subsample.py), whose group means give the
spread of that choice. Per statistic and group: the shift of the group mean from
the full-n value, the spread over subsets, the spread a rerun at k with another seed
would have, and the width of the group's 95 % interval against the full-n width.

A k passes for a statistic when, in every group, the first-k mean and a rerun's mean
(its mean shift plus 1.96 rerun spreads) both lie within `shift_tolerance` of the
full-n interval's half-width from the full-n mean, and the interval widens by at
most `width_tolerance`; the recommendation is the smallest k of the grid from which
every larger k passes too, for every statistic named.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import msgspec
import numpy as np

from tension.core.reports.metrics import Curve, compute, stat_columns
from tension.core.reports.story_intervals import stat_matrix
from tension.kernels.curves import CurveSettings
from tension.kernels.groups import Z95, GroupStat
from tension.kernels.intervals import story_seeds
from tension.kernels.settings import (
    SHIFT_TOLERANCE,
    SUBSAMPLE_DRAWS,
    SUBSAMPLE_KS,
    SUBSAMPLE_STATS,
    WIDTH_TOLERANCE,
)
from tension.kernels.subsample import first_k_counts, subsample_stats

__all__ = ["Verdicts", "StatRow", "NoiseRow", "Recommendation", "Subsampling", "subsample", "first_k",
           "format_subsampling", "DEFAULT_KS", "DEFAULT_STATS", "SHIFT_TOLERANCE", "WIDTH_TOLERANCE", "DRAWS",
           "HEADLINE", "SECOND_ORDER", "FLOOR_RESAMPLES"]

DEFAULT_KS = SUBSAMPLE_KS
HEADLINE = SUBSAMPLE_STATS  # the statistics a recommendation is for unless others are named
DEFAULT_STATS = HEADLINE
DRAWS = SUBSAMPLE_DRAWS


class Verdicts(msgspec.Struct, kw_only=True):
    """A run's verdicts as kernels/subsample.py packs them: stories (ids, groups, each
    story's positions `offsets[i]:offsets[i+1]`), each position's pct `x` and its
    endings `match[starts[j]:starts[j+1]]` (1 = a match) in ending order."""

    ids: list[str]
    groups: list[str]
    x: np.ndarray
    match: np.ndarray
    starts: np.ndarray
    offsets: np.ndarray

    def n_endings(self) -> np.ndarray:
        return np.diff(self.starts)


class StatRow(msgspec.Struct, kw_only=True):
    """One statistic of one group at one k."""

    k: int
    stat: str
    group: str
    full: float  # the group mean at the run's own n
    full_ci95: float  # its 95 % half-width
    first: float  # the group mean from the first k endings
    first_ci95: float
    shift: float  # first − full
    subset_mean: float  # mean over the random subsets of the group mean
    subset_shift: float  # subset_mean − full
    spread: float  # sd over the random subsets of the group mean
    rerun_spread: float  # the sd a rerun at k with another seed would have around the full-n mean
    width_ratio: float  # first_ci95 / full_ci95
    passes: bool


class NoiseRow(msgspec.Struct, kw_only=True):
    """How much of a second-order statistic's group mean the sampling of endings explains
    (docs/metrics.md 1.8): its value at the run's n, its value on curves resampled at
    that n (the noise floor: one more layer of the same noise), and its trend over k."""

    stat: str
    group: str
    value: float  # the group mean at n (groups.csv's, the paper's)
    floor: float  # the group mean over resampled curves at n (kernels/intervals.py's draws)
    floor_shift: float  # floor − value: what one more layer of noise moves it by
    slope: float  # d(group mean)/d(1/k) over the random subsets' means, k from 5 to n
    at_smallest: float  # the subsets' group mean at the smallest k ≥ 5 of the grid
    smallest_k: int
    # the group mean of the statistic of each story's de-noised curve (kernels/denoise.py): the corrected
    # estimate of the noise-free curve's value, beside the paper's, never in its place
    corrected: float = math.nan
    corrected_n: int = 0  # stories that define it


SECOND_ORDER = ("retain", "convergence")  # and every IR


class Recommendation(msgspec.Struct, kw_only=True):
    stats: list[str]
    k: int | None  # None: no k of the grid passes (or the run cannot tell: `why`)
    n: int  # the run's endings a position (the most)
    why: str
    endings_full: int = 0
    endings_at_k: int = 0


class Subsampling(msgspec.Struct, kw_only=True):
    n: int  # the most endings a position of the run holds
    positions: int
    n_stories: int
    ks: list[int]
    draws: int
    seed: int
    shift_tolerance: float
    width_tolerance: float
    rows: list[StatRow]
    recommendation: Recommendation
    # the first-k groups of every k: statistic -> group -> summary (groups.csv's numbers)
    groups: dict[int, dict[str, dict[str, GroupStat]]]
    # the first-k story statistics of every k: stories × s, stories.csv's columns
    story_stats: dict[int, list[list[float]]]
    stat_names: list[str]
    notes: list[str] = []
    noise: list[NoiseRow] = []  # the second-order statistics (Retain, convergence, IRs)


def first_k(v: Verdicts, k: int, settings: CurveSettings):
    """(curves, stats, groups) of the run from each position's first min(k, n) endings,
    computed as `score` computes stories.csv and groups.csv."""
    n, m = first_k_counts(v.match, v.starts, k)
    curves = []
    for i, sid in enumerate(v.ids):
        a, b = int(v.offsets[i]), int(v.offsets[i + 1])
        curves.append(Curve(id=sid, group=v.groups[i], x=v.x[a:b].tolist(),
                            y=[1.0 - int(mj) / int(nj) for nj, mj in zip(n[a:b], m[a:b])],
                            n_endings=n[a:b].tolist(), n_match=m[a:b].tolist()))
    stats, groups = compute(curves, settings)
    return curves, stats, groups


def _group_index(groups: Sequence[str]) -> dict[str, np.ndarray]:
    index: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        index.setdefault(g, []).append(i)
    return {g: np.array(ix, dtype=np.int64) for g, ix in index.items()}


def _rerun_factor(n: int, k: int) -> float:
    """sd of (a rerun at k − the run at n) over sd of (a subset of k − the run at n): a
    subset shares its endings with the full run (variance σ²(1/k − 1/n)), a rerun with
    another seed does not (σ²(1/k + 1/n)); 0 at k = n (nothing to draw)."""
    return math.sqrt((n + k) / (n - k)) if k < n else 0.0


def subsample(v: Verdicts, settings: CurveSettings = CurveSettings(), ks: Sequence[int] = DEFAULT_KS,
              stats: Sequence[str] = DEFAULT_STATS, draws: int = DRAWS, seed: int = 0,
              shift_tolerance: float = SHIFT_TOLERANCE, width_tolerance: float = WIDTH_TOLERANCE) -> Subsampling:
    names = stat_columns(settings)
    unknown = [s for s in stats if s not in names]
    if unknown:
        raise ValueError(f"statistics: expected some of {', '.join(names)}, got {', '.join(unknown)}")
    counts = v.n_endings()
    n = int(counts.max()) if len(counts) else 0
    typical = int(np.median(counts)) if len(counts) else 0
    grid = sorted({int(k) for k in ks if 1 <= k < n} | ({n} if n else set()))
    index = _group_index(v.groups)
    _, _, full_groups = first_k(v, n, settings) if n else (None, None, {})
    rows: list[StatRow] = []
    by_k_groups: dict[int, dict[str, dict[str, GroupStat]]] = {}
    by_k_stories: dict[int, list[list[float]]] = {}
    for k in grid:
        _, st, groups = first_k(v, k, settings)
        by_k_groups[k] = groups
        by_k_stories[k] = stat_matrix(st).tolist()
        draws_k = 1 if k >= n else draws
        sub = subsample_stats(v.x, v.match, v.starts, v.offsets, story_seeds(v.ids, seed + 7919 * k), k, draws_k,
                              settings)
        factor = _rerun_factor(typical, k) if k < typical else (0.0 if k >= n else 1.0)
        for j, name in enumerate(names):
            for g, ix in index.items():
                f, fk = full_groups[name][g], groups[name][g]
                with np.errstate(all="ignore"):
                    means = np.array([np.nanmean(sub[ix, r, j]) if np.isfinite(sub[ix, r, j]).any() else math.nan
                                      for r in range(draws_k)])
                ok = means[np.isfinite(means)]
                sm = float(ok.mean()) if len(ok) else math.nan
                spread = float(ok.std(ddof=1)) if len(ok) >= 2 else 0.0 if len(ok) else math.nan
                rerun = spread * factor
                ratio = fk.ci95 / f.ci95 if f.ci95 > 0 else math.nan
                tol = shift_tolerance * f.ci95
                passes = bool(math.isfinite(tol) and abs(fk.mean - f.mean) <= tol + 1e-12
                              and abs(sm - f.mean) + Z95 * rerun <= tol + 1e-12
                              and math.isfinite(ratio) and ratio <= 1.0 + width_tolerance + 1e-12)
                rows.append(StatRow(k=k, stat=name, group=g, full=f.mean, full_ci95=f.ci95, first=fk.mean,
                                    first_ci95=fk.ci95, shift=fk.mean - f.mean, subset_mean=sm,
                                    subset_shift=sm - f.mean, spread=spread, rerun_spread=rerun, width_ratio=ratio,
                                    passes=passes))
    rec = _recommend(rows, list(stats), grid, n, counts)
    noise = _noise(v, settings, rows, names, index, full_groups, seed) if n else []
    notes = []
    if len(set(counts.tolist())) > 1:
        notes.append(f"positions hold {int(counts.min())}–{n} endings (adaptive rounds): a position of fewer "
                     "than k endings uses all of them")
    return Subsampling(n=n, positions=len(counts), n_stories=len(v.ids), ks=grid, draws=draws, seed=seed,
                       shift_tolerance=shift_tolerance, width_tolerance=width_tolerance, rows=rows,
                       recommendation=rec, groups=by_k_groups, story_stats=by_k_stories, stat_names=names, notes=notes,
                       noise=noise)


# resamples at n for the noise floor: a group mean over them is known to well under its spread
FLOOR_RESAMPLES = 100


def _noise(v: Verdicts, settings: CurveSettings, rows: list[StatRow], names: list[str],
           index: dict[str, np.ndarray], full_groups, seed: int) -> list[NoiseRow]:
    from tension.kernels.denoise import corrected_stats
    from tension.kernels.intervals import Draw, resample_stats

    n_all, m_all = first_k_counts(v.match, v.starts, int(np.diff(v.starts).max()))
    draws = resample_stats(v.x, n_all, m_all, v.offsets, story_seeds(v.ids, seed + 1), settings, FLOOR_RESAMPLES,
                           Draw.BINOMIAL)
    corrected = corrected_stats(v.x, n_all, m_all, v.offsets, settings)  # stories × s
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a story no resample defines: NaN, left out
        per_story = np.nanmean(draws, axis=1)  # stories × s
    out = []
    for j, name in enumerate(names):
        if name not in SECOND_ORDER and not name.startswith("ir"):
            continue
        for g, ix in index.items():
            vals = per_story[ix, j]
            floor = float(np.nanmean(vals)) if np.isfinite(vals).any() else math.nan
            value = full_groups[name][g].mean
            cv = corrected[ix, j]
            cn = int(np.isfinite(cv).sum())
            sub = [r for r in rows if r.stat == name and r.group == g and r.k >= 5 and math.isfinite(r.subset_mean)]
            slope = math.nan
            if len(sub) >= 2:
                inv = np.array([1.0 / r.k for r in sub])
                mu = np.array([r.subset_mean for r in sub])
                slope = float(np.polyfit(inv, mu, 1)[0])
            out.append(NoiseRow(stat=name, group=g, value=value, floor=floor, floor_shift=floor - value, slope=slope,
                                at_smallest=sub[0].subset_mean if sub else math.nan,
                                smallest_k=sub[0].k if sub else 0,
                                corrected=float(np.nanmean(cv)) if cn else math.nan, corrected_n=cn))
    return out


def _recommend(rows: list[StatRow], stats: list[str], grid: list[int], n: int, counts: np.ndarray) -> Recommendation:
    full = int(counts.sum())
    if not grid:
        return Recommendation(stats=stats, k=None, n=n, why="the run has no position with endings")
    named = [r for r in rows if r.stat in stats]
    if not any(math.isfinite(r.full_ci95) and r.full_ci95 > 0 for r in named):
        # an interval of zero width over two stories or more is not one of one story: say which
        why = (f"every group's 95 % interval of {', '.join(stats)} has zero width: its stories agree exactly "
               "(every no-rate 0 or 1?), so the tolerances, relative to it, leave no room"
               if any(math.isfinite(r.full_ci95) for r in named) else
               "no group has two stories or more: a group's interval, which the tolerances are relative to, "
               "needs them")
        return Recommendation(stats=stats, k=None, n=n, endings_full=full, endings_at_k=full, why=why)
    ok = {k: all(r.passes for r in named if r.k == k) for k in grid}
    best = None
    for k in reversed(grid):
        if not ok[k]:
            break
        best = k
    if best is None or best >= n:
        return Recommendation(stats=stats, k=None, n=n, endings_full=full, endings_at_k=full,
                              why=f"no k below the run's {n} keeps {', '.join(stats)} within the tolerances")
    at = int(np.minimum(counts, best).sum())
    return Recommendation(stats=stats, k=best, n=n, endings_full=full, endings_at_k=at,
                          why=f"from k = {best} on, every group mean of {', '.join(stats)} stays within the "
                              "tolerances")


def _f(v: float, digits: int = 4) -> str:
    return "—" if not math.isfinite(v) else f"{v:.{digits}f}"


def format_subsampling(s: Subsampling, stats: Sequence[str] | None = None) -> str:
    """The terminal table: per statistic named (the recommendation's by default) and
    group, each k's first-k mean, its shift from the full-n mean, the spread of a rerun
    at k, the interval's width against the full-n width, and ✓ where k passes."""
    stats = list(stats or s.recommendation.stats)
    out = [f"subsampling {s.n_stories} stories, {s.positions:,} positions, up to {s.n} endings each; {s.draws} "
           f"random subsets per k (seed {s.seed}); tolerances: a group mean within {s.shift_tolerance:g} × its "
           f"full-n 95 % half-width, the interval at most {s.width_tolerance:.0%} wider"]
    groups = list(dict.fromkeys(r.group for r in s.rows))
    for stat in stats:
        for g in groups:
            rows = [r for r in s.rows if r.stat == stat and r.group == g]
            if not rows:
                continue
            full = rows[-1]
            out.append(f"\n{stat}, group {g}: {_f(full.full)} ± {_f(full.full_ci95)} at n = {s.n}")
            out.append(f"  {'k':>4}  {'first k':>8}  {'shift':>8}  {'subsets':>8}  {'rerun sd':>8}  {'width':>6}")
            for r in rows:
                out.append(f"  {r.k:>4}  {_f(r.first):>8}  {r.shift:>+8.4f}  {r.subset_shift:>+8.4f}  "
                           f"{_f(r.rerun_spread):>8}  {_f(r.width_ratio, 3):>6}  {'✓' if r.passes else ''}")
    if s.noise:
        out.append(f"\nsecond-order statistics and their noise (docs/metrics.md 1.8): the group mean at n = {s.n}, on "
                   f"curves resampled at n (noise floor), at the smallest k of the grid, and corrected (the "
                   f"comparable statistic of docs/metrics.md 1.9: turns beyond the endings' noise)")
        out.append(f"  {'statistic':<12} {'group':<16} {'at n':>9} {'floor':>9} {'floor − n':>10} {'at k':>14} "
                   f"{'corrected':>10}")
        for nr in s.noise:
            out.append(f"  {nr.stat:<12} {nr.group[:16]:<16} {_f(nr.value):>9} {_f(nr.floor):>9} "
                       f"{nr.floor_shift:>+10.4f} {_f(nr.at_smallest):>9} (k={nr.smallest_k}) "
                       f"{_f(nr.corrected):>10}")
    rec = s.recommendation
    if rec.k is None:
        out.append(f"\nrecommended endings for {', '.join(rec.stats)}: none below {rec.n} ({rec.why})")
    else:
        out.append(f"\nrecommended endings for {', '.join(rec.stats)}: {rec.k} a position ({rec.why}); "
                   f"{rec.endings_at_k:,} endings instead of {rec.endings_full:,}")
    out.extend(f"note: {n}" for n in s.notes)
    return "\n".join(out)
