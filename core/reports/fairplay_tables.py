"""The fair-play metrics' tables of groups and pooled curves, as written to
groups.csv, groups.md and curves.csv (core/reports/fairplay_metrics.py computes
them)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence

import msgspec

from tension.core.reports.rows import Rows, rows_csv
from tension.kernels.fairplay import READERS, FairPlaySettings, PooledCurves

__all__ = ["GroupRow", "cell", "groups_csv", "groups_md", "curves_csv", "groups_table"]


def cell(v: float) -> str:
    """A number as the CSV files write it: empty for NaN."""
    return "" if v is None or math.isnan(v) else f"{v:.10g}"


class GroupRow(msgspec.Struct, kw_only=True):
    group: str
    statistic: str
    mean: float
    lo: float
    hi: float
    interval: str  # "bootstrap" (means) or "clopper-pearson" (shares of stories)
    n: int
    n_nan: int


def groups_table(rows: Sequence[GroupRow]) -> Rows:
    """groups.csv's rows as computed (an undefined mean or bound None)."""
    def num(v: float) -> float | None:
        return None if v is None or math.isnan(v) else float(v)

    return Rows(columns=("group", "statistic", "mean", "lo", "hi", "interval", "n", "n_nan"),
                rows=[(r.group, r.statistic, num(r.mean), num(r.lo), num(r.hi), r.interval, r.n, r.n_nan)
                      for r in rows])


def groups_csv(rows: Sequence[GroupRow]) -> str:
    return rows_csv(groups_table(rows))


_MD_STATS = ("S", "C_UB", "FP_UB", "C_ER", "FP_ER", "C_AR", "FP_AR", "insufficient_gap")


def groups_md(rows: Sequence[GroupRow], statistics: Sequence[str] = _MD_STATS) -> str:
    """The headline table: one row per group, ``mean [lo, hi]`` per statistic."""
    by = {(r.group, r.statistic): r for r in rows}
    groups = list(dict.fromkeys(r.group for r in rows))

    def cell(r: GroupRow | None) -> str:
        if r is None or math.isnan(r.mean):
            return "—"
        if math.isnan(r.lo):
            return f"{r.mean:.3f}"
        return f"{r.mean:.3f} [{r.lo:.3f}, {r.hi:.3f}]"

    n = {g: max(by[(g, s)].n + by[(g, s)].n_nan for s in statistics if (g, s) in by) for g in groups}
    lines = ["| group | n | " + " | ".join(statistics) + " |", "|---|---|" + "---|" * len(statistics)]
    lines += [f"| {g} | {n[g]} | " + " | ".join(cell(by.get((g, s))) for s in statistics) + " |" for g in groups]
    return "\n".join(lines) + "\n"


def curves_csv(pooled: dict[str, PooledCurves], settings: FairPlaySettings, readers: Sequence[str] = READERS) -> str:
    """Pooled hit curves per group, reader and relative-position bin."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["group", "reader", "bin", "position", "n", "hits", "hit_rate", "cp_lo", "cp_hi",
                "p_true_mean_pw", "p_distractor_mean_pw", "n_distractor", "n_U", "U_mean", "SEff_mean",
                "dcoh_mean", "dintel_mean"])
    B = settings.bins
    for g, pc in pooled.items():
        for r, name in enumerate(readers):
            if not pc.n[r].any():
                continue
            for b in range(B):
                if not pc.n[r, b]:
                    continue
                w.writerow([g, name, b + 1, cell((b + 1) / B), int(pc.n[r, b]), cell(pc.hits[r, b]),
                            cell(pc.hit_rate[r, b]), cell(pc.cp_lo[r, b]), cell(pc.cp_hi[r, b]),
                            cell(pc.p_true_mean[r, b]), cell(pc.p_distractor_mean[r, b]),
                            int(pc.n_distractor[r, b]), int(pc.n_U[r, b]), cell(pc.U_mean[r, b]),
                            cell(pc.seff_mean[r, b]), cell(pc.dcoh_mean[r, b]), cell(pc.dintel_mean[r, b])])
    return buf.getvalue()
