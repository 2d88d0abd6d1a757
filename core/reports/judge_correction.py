"""A no-rate corrected for the judge's errors (issue 60; docs/metrics.md 1.10): Rogan–Gladen
on a prevalence and on a group's mean, with the mean's interval. Pure functions, no file and
no LLM; the judge's sensitivity and specificity are core/reports/judge_audit.py's.

The corrected prevalence (Rogan–Gladen): p_true = (p_obs + spec − 1) / J, clipped to
[0, 1]; undefined (said, never computed) when J ≤ 0: a judge no better than a coin
carries nothing to correct with.

A corrected group mean gets the delta method over the group's stories and the audit's two
shares q1, q0 (judge_audit.py's module docstring; their variances at Agresti–Coull's smoothed
shares): the study in bench/judge_audit.py chose it over a joint bootstrap, the sample's table
unweighted, the audit taken as exact and predictive values carried to the group
(docs/metrics.md 1.10 has the figures).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np

from tension.core.reports.judge_audit import (
    LEVEL,
    N_RESAMPLES,
    Z95,
    Interval,
    percentile_interval,
    resampled_means,
    share_stats,
    youden,
)

__all__ = ["Corrected", "rogan_gladen", "CorrectedMean", "corrected_mean"]


class Corrected(msgspec.Struct, frozen=True, kw_only=True):
    """A prevalence corrected for the judge's errors: `value` in [0, 1] (`raw` before
    clipping, `clipped` when they differ), or NaN with `undefined` saying why."""

    value: float
    raw: float
    clipped: bool = False
    undefined: str | None = None


def rogan_gladen(p_obs: float, sens: float, spec: float) -> Corrected:
    """Rogan–Gladen: p_true = (p_obs + spec − 1) / (sens + spec − 1), clipped to [0, 1].
    Undefined when an input is NaN or sens + spec ≤ 1 (said, not computed)."""
    if not all(math.isfinite(v) for v in (p_obs, sens, spec)):
        return Corrected(value=math.nan, raw=math.nan, undefined="an input is undefined (no labels of one kind)")
    j = youden(sens, spec)
    if j <= 0:
        return Corrected(value=math.nan, raw=math.nan,
                         undefined=f"sensitivity + specificity = {sens + spec:.3f} ≤ 1: the judge is no better "
                                   "than chance against people, so its errors cannot be corrected for")
    raw = (p_obs + spec - 1.0) / j
    value = min(1.0, max(0.0, raw))
    return Corrected(value=value, raw=raw, clipped=value != raw)


# -- a group statistic corrected for the judge's errors ----------------------------------------


class CorrectedMean(msgspec.Struct, frozen=True, kw_only=True):
    """A group's mean of a no-rate statistic, as the run has it and corrected."""

    n: int  # stories with a value
    observed: Interval  # the mean and its bootstrap interval over stories
    corrected: Interval  # Rogan–Gladen on the mean; interval over stories and the audit's items
    clipped: bool = False
    undefined: str | None = None
    undefined_resamples: int = 0  # resamples where J ≤ 0 (their correction has no value)


def _q_variance(f: np.ndarray) -> float:
    """The variance of q (the mean of `f`, each in [0, 1]) at Agresti–Coull's (x + 2) / (n + 4):
    never 0 at q = 0 or 1, where a plain binomial variance would say the audit knows q exactly."""
    q = (float(f.sum()) + 2.0) / (f.size + 4.0)
    return q * (1.0 - q) / (f.size + 4.0)


def _delta(values: np.ndarray, f1: np.ndarray, f0: np.ndarray, a: float, raw: float, j: float) -> tuple[float, float]:
    """The delta-method 95 % interval of the Rogan–Gladen correction `raw` of the mean of
    `values` (docs/metrics.md 1.10): the mean's variance over stories, and q1's and q0's
    (Agresti–Coull), through the derivatives of (m + spec − 1) / J."""
    q1, q0 = float(f1.mean()), float(f0.mean())
    p = a * q1 + (1 - a) * q0
    ab = a * (1 - a)
    d_sens = (ab * q0 / p**2, -ab * q1 / p**2)
    d_spec = (ab * (1 - q0) / (1 - p) ** 2, -ab * (1 - q1) / (1 - p) ** 2)
    grad = [((1 - raw) * d_spec[k] - raw * d_sens[k]) / j for k in range(2)]
    var = (values.var(ddof=1) / values.size / j**2 if values.size >= 2 else math.nan) \
        + grad[0] ** 2 * _q_variance(f1) + grad[1] ** 2 * _q_variance(f0)
    half = Z95 * math.sqrt(var)
    return max(0.0, raw - half), min(1.0, raw + half)


def corrected_mean(values: Sequence[float] | np.ndarray, judge_no: Sequence[bool] | np.ndarray,
                   person_no: Sequence[float] | np.ndarray, population: tuple[float, float], *,
                   method: str = "delta", n_resamples: int = N_RESAMPLES, seed: int = 0) -> CorrectedMean:
    """A group's mean of story values that are means of no-rates (mean NR, late NR),
    corrected with the audit's sensitivity and specificity (Rogan–Gladen on the mean: the
    correction is affine, so the mean of corrected no-rates is the corrected mean, before
    clipping). `observed` is the mean with its percentile bootstrap over stories (seeded).

    The corrected interval carries the run's sampling and the audit's: `method="delta"`
    (the study's choice, bench/judge_audit.py) is the delta method with the mean's variance
    over stories and q1's and q0's at Agresti–Coull's smoothed shares; `"bootstrap"`
    resamples the stories and the audit's items (within each judge answer) together, and
    a resample where J ≤ 0 has no value: more than 2.5 % of those and the interval is
    undefined, and said so."""
    if method not in ("delta", "bootstrap"):
        raise ValueError(f"method: expected 'delta' or 'bootstrap', got {method!r}")
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    j = np.asarray(judge_no, dtype=bool)
    f = np.asarray(person_no, dtype=np.float64)
    keep = np.isfinite(f)
    f1, f0 = f[keep & j], f[keep & ~j]
    a = population[0] / (population[0] + population[1]) if sum(population) > 0 else math.nan
    rng = np.random.default_rng(seed)
    mean = float(v.mean()) if v.size else math.nan
    means = resampled_means(v, rng, n_resamples) if v.size >= 2 else np.full(n_resamples, np.nan)
    observed = Interval(mean, *percentile_interval(means))
    q1 = float(f1.mean()) if f1.size else math.nan
    q0 = float(f0.mean()) if f0.size else math.nan
    s = share_stats(np.array(q1), np.array(q0), a)
    point = rogan_gladen(mean, float(s["sensitivity"]), float(s["specificity"]))
    if point.undefined is not None:
        return CorrectedMean(n=int(v.size), observed=observed, corrected=Interval(math.nan, math.nan, math.nan),
                             undefined=point.undefined)
    if method == "delta":
        lo, hi = _delta(v, f1, f0, a, point.raw, float(s["youden"]))
        return CorrectedMean(n=int(v.size), observed=observed, corrected=Interval(point.value, lo, hi),
                             clipped=point.clipped)
    b = share_stats(resampled_means(f1, rng, n_resamples), resampled_means(f0, rng, n_resamples), a)
    jb = b["youden"]
    with np.errstate(divide="ignore", invalid="ignore"):
        raw = np.where(jb > 0, (means + b["specificity"] - 1.0) / jb, np.nan)
    bad = int((~(jb > 0)).sum())
    if bad > n_resamples * (1.0 - LEVEL) / 2.0:
        why = (f"in {bad} of {n_resamples} resamples of the audit the judge is no better than chance "
               "(sensitivity + specificity ≤ 1): the interval has no bound; label more items")
        return CorrectedMean(n=int(v.size), observed=observed, corrected=Interval(point.value, math.nan, math.nan),
                             clipped=point.clipped, undefined=why, undefined_resamples=bad)
    lo, hi = percentile_interval(np.clip(raw, 0.0, 1.0))
    return CorrectedMean(n=int(v.size), observed=observed, corrected=Interval(point.value, lo, hi),
                         clipped=point.clipped, undefined_resamples=bad)
