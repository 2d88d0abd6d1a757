"""The paper's tables of a run's groups (000, Table 6; 001, Table 18; the comparable
statistics in Table 18's layout), and their numbers formatted for tables
(`fmt_stat`, `render_table`: Markdown or CSV), shared with report.md's other tables
and core/reports/comparison.py's (`tension-run compare`)."""

from __future__ import annotations

import csv
import io
import math

from tension.core.reports.comparable import SUFFIX, comparable_columns
from tension.core.reports.markdown import md_text
from tension.core.reports.metrics import stat_columns
from tension.kernels.curves import CurveSettings
from tension.kernels.groups import GroupStat

__all__ = ["table_columns", "fmt_stat", "fewer", "table6", "table18", "comparable_table", "render_table"]

_TABLE_STATS = [("mean_nr", "Mean NR"), ("late_nr", "Late NR"), ("retain", "Retain")]


def table_columns(settings: CurveSettings) -> list[tuple[str, str]]:
    """The statistics of the paper's tables, with their names there: Mean NR, Late NR, Retain, IR30, …"""
    irs = [(c, c.upper()) for c in stat_columns(settings)[4:]]
    return _TABLE_STATS + irs


def fmt_stat(stat: str, v: float, signed: bool = False) -> str:
    """A statistic's value as the tables print it (a comparable one as its paper's namesake)."""
    stat = stat.removesuffix(SUFFIX)
    if math.isnan(v):
        return "—"
    sign = "+" if signed else ""
    return f"{v:{sign}.1f}%" if stat == "retain" and not signed else (
        f"{v:{sign}.1f}" if stat in ("retain", "convergence") else f"{v:{sign}.3f}")


def _n(groups, g) -> int:
    s = groups["mean_nr"][g]
    return s.n + s.n_nan


def fewer(s: GroupStat, n: int) -> str:
    """` (n = k)` after a group's value that rests on k of its n stories (the others leave
    the statistic undefined, METRICS 1.5), so that the table's n is not read as its n."""
    return f" (n = {s.n})" if s.n < n and not math.isnan(s.mean) else ""


def table6(groups: dict[str, dict[str, GroupStat]], settings: CurveSettings, fmt: str = "md") -> str:
    """000 Table 6: `Corpus, n, Mean NR, Late NR, Retain, IR30, IR60, IR120` (in Markdown,
    a value of fewer stories than n says how many; the CSV keeps the paper's cells)."""
    cols = table_columns(settings)
    header = ["Corpus", "n"] + [label for _, label in cols]
    rows = [[g, str(_n(groups, g))] + [fmt_stat(stat, groups[stat][g].mean)
                                       + (fewer(groups[stat][g], _n(groups, g)) if fmt == "md" else "")
                                       for stat, _ in cols]
            for g in groups["mean_nr"]]
    return render_table(header, rows, fmt)


def table18(groups: dict[str, dict[str, GroupStat]], settings: CurveSettings, fmt: str = "md") -> str:
    """001 Table 18 layout: every cell is `mean [bootstrap 95% interval]`."""
    return _interval_table(groups, table_columns(settings), fmt)


def comparable_table(groups: dict[str, dict[str, GroupStat]], settings: CurveSettings, fmt: str = "md") -> str:
    """The comparable second-order statistics (docs/metrics.md 1.9) of every group, each
    cell `mean [bootstrap 95% interval]` as Table 18's."""
    label = dict(table_columns(settings))  # Table 6's names: Retain, IR30, …
    cols = [(name, label[name.removesuffix(SUFFIX)]) for name in comparable_columns(stat_columns(settings))
            if name.removesuffix(SUFFIX) in label]
    return _interval_table(groups, cols, fmt)


def _interval_table(groups: dict[str, dict[str, GroupStat]], cols: list[tuple[str, str]], fmt: str) -> str:
    header = ["Corpus", "n"] + [label for _, label in cols]
    rows = []
    for g in groups["mean_nr"]:
        row = [g, str(_n(groups, g))]
        for stat, _ in cols:
            s = groups[stat][g]
            cell = fmt_stat(stat, s.mean)
            if not math.isnan(s.boot_lo):
                cell += f" [{fmt_stat(stat, s.boot_lo).rstrip('%')}, {fmt_stat(stat, s.boot_hi).rstrip('%')}]"
            row.append(cell + (fewer(s, _n(groups, g)) if fmt == "md" else ""))
        rows.append(row)
    return render_table(header, rows, fmt)


def render_table(header: list[str], rows: list[list[str]], fmt: str) -> str:
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
        return buf.getvalue()
    lines = ["| " + " | ".join(map(md_text, header)) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(map(md_text, r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"
