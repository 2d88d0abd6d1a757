"""Group statistics over story values (METRICS.md 1.5): mean, sample sd, the normal
95% half-width ``1.96·sd/√n``, n, and how many NaNs were left out."""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np

__all__ = ["Z95", "GroupStat", "describe", "group_stats"]

Z95 = 1.96


class GroupStat(msgspec.Struct, frozen=True, kw_only=True):
    mean: float
    sd: float  # sample sd (ddof = 1); NaN when n < 2
    ci95: float  # half-width 1.96·sd/√n; NaN when n < 2
    n: int  # stories with a value
    n_nan: int  # stories whose value is NaN, excluded from the above


def describe(values) -> GroupStat:
    """Summary of one group's values, NaNs excluded and counted."""
    v = np.asarray(values, dtype=np.float64)
    ok = v[np.isfinite(v)]
    n = int(ok.size)
    n_nan = int(v.size - n)
    mean = float(ok.mean()) if n else math.nan
    sd = float(ok.std(ddof=1)) if n >= 2 else math.nan
    ci95 = Z95 * sd / math.sqrt(n) if n >= 2 else math.nan
    return GroupStat(mean=mean, sd=sd, ci95=ci95, n=n, n_nan=n_nan)


def group_stats(values, groups: Sequence[str]) -> dict[str, GroupStat]:
    """``describe`` per group label, groups in order of first appearance."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) != len(groups):
        raise ValueError(f"{len(v)} values but {len(groups)} group labels")
    index: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        index.setdefault(g, []).append(i)
    return {g: describe(v[idx]) for g, idx in index.items()}
