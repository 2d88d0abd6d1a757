"""Group statistics over story values (docs/metrics.md 1.5): mean, sample sd, the normal
95% half-width ``1.96·sd/√n``, the percentile-bootstrap 95% interval, n, and how
many NaNs were left out."""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np

from .bootstrap import N_RESAMPLES, percentile_ci

__all__ = ["Z95", "GroupStat", "describe", "group_stats"]

Z95 = 1.96


class GroupStat(msgspec.Struct, frozen=True, kw_only=True):
    mean: float
    sd: float  # sample sd (ddof = 1); NaN when n < 2
    ci95: float  # half-width 1.96·sd/√n; NaN when n < 2
    n: int  # stories with a value
    n_nan: int  # stories whose value is NaN, excluded from the above
    boot_lo: float = math.nan  # percentile bootstrap 95% interval of the mean;
    boot_hi: float = math.nan  # NaN when n < 2 or not asked for


def describe(values, n_resamples: int = N_RESAMPLES, seed: int = 0) -> GroupStat:
    """Summary of one group's values, NaNs excluded and counted. ``n_resamples=0``
    skips the bootstrap."""
    v = np.asarray(values, dtype=np.float64)
    ok = v[np.isfinite(v)]
    n = int(ok.size)
    n_nan = int(v.size - n)
    mean = float(ok.mean()) if n else math.nan
    sd = float(ok.std(ddof=1)) if n >= 2 else math.nan
    ci95 = Z95 * sd / math.sqrt(n) if n >= 2 else math.nan
    lo, hi = percentile_ci(ok, n_resamples, seed) if n_resamples and n >= 2 else (math.nan, math.nan)
    return GroupStat(mean=mean, sd=sd, ci95=ci95, n=n, n_nan=n_nan, boot_lo=lo, boot_hi=hi)


def group_stats(values, groups: Sequence[str], n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict[str, GroupStat]:
    """``describe`` per group label, groups in order of first appearance."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) != len(groups):
        raise ValueError(f"{len(v)} values but {len(groups)} group labels")
    index: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        index.setdefault(g, []).append(i)
    return {g: describe(v[idx], n_resamples, seed) for g, idx in index.items()}
