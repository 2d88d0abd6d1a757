"""The audit's figure, `RUN_DIR/audit.png` (issue 60; docs/metrics.md 1.10): two panels of
group bars with their 95 % intervals, drawn as the report's bars are (core/reports/figures.py
`draw_bars`), one above the other so each has the report's bar width:

    top     each story group's mean NR and late NR as the run has them, beside the same
            corrected for the judge's errors
    bottom  the judge's sensitivity and specificity against people, over all labelled items,
            per part of the story and per group: the correction assumes they are the same
            everywhere, and this shows whether they are

Every bar is a row of audit.csv (`audit_bars` picks them from `audit_rows`), so the figure
plots exactly what the file holds. `write_audit` writes audit.md, audit.csv and the figure
together (core/inputs/jsonl.py `write_together`: a stop leaves all three or none new).
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from tension.core.reports.audit_report import FIGURE, AuditReport, audit_markdown, audit_rows
from tension.core.reports.figures import BARS_SIZE, draw_bars, glyphs_quiet, new_figure, save_png
from tension.kernels.groups import GroupStat

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["Bar", "audit_bars", "audit_figure", "audit_png", "write_audit", "PANELS"]

# panel -> (title, y label)
PANELS = {
    "groups": ("Group no-rates as the run has them and corrected for the judge's errors (95% intervals)",
               "no-rate"),
    "judge": ("The judge's sensitivity and specificity against people, by part and group (95% intervals)",
              "share"),
}
# the bars of each panel in the legend's order: (audit.csv's kind, statistic) -> legend entry
_SERIES = {
    "groups": {("uncorrected", "mean_nr"): "Mean NR", ("corrected", "mean_nr"): "Mean NR, corrected",
               ("uncorrected", "late_nr"): "Late NR", ("corrected", "late_nr"): "Late NR, corrected"},
    "judge": {("judge", "sensitivity"): "Sensitivity", ("judge", "specificity"): "Specificity"},
}


class Bar(msgspec.Struct, frozen=True, kw_only=True):
    """One bar of the figure: where it stands (panel, the place on the x axis, the legend's
    entry) and the audit.csv row it plots (kind, scope, name, statistic, value, lo, hi, n;
    NaN where the file's cell is empty)."""

    panel: str
    x: str
    series: str
    kind: str
    scope: str
    name: str
    statistic: str
    value: float
    lo: float
    hi: float
    n: int


def _place(scope: str, name: str) -> str:
    """The label under a judge bar: all items, a part of the story, or a group (named as
    such, so that a group called "early" is not the early part)."""
    return "all items" if scope == "all" else f"{name} part" if scope == "part" else f"group {name}"


def audit_bars(r: AuditReport) -> list[Bar]:
    """The figure's bars, each an audit.csv row (`audit_rows`): per story group its
    uncorrected and corrected mean NR and late NR; then sensitivity and specificity over all
    labelled items, per part and per group. In the figure's order: audit.csv's, the parts
    before the groups."""
    out = []
    for row in audit_rows(r).rows:
        kind, scope, name, stat, value, lo, hi, n = row
        for panel, series in _SERIES.items():
            label = series.get((str(kind), str(stat)))
            if label is None:
                continue
            out.append(Bar(panel=panel, x=str(name) if panel == "groups" else _place(str(scope), str(name)),
                           series=label, kind=str(kind), scope=str(scope), name=str(name), statistic=str(stat),
                           value=math.nan if value is None else float(value),
                           lo=math.nan if lo is None else float(lo), hi=math.nan if hi is None else float(hi),
                           n=int(n or 0)))
    order = {(p, s): i for p, series in _SERIES.items() for i, s in enumerate(series.values())}
    scopes = {"all": 0, "part": 1}  # then the groups
    first: dict[str, int] = {}
    for b in out:
        first.setdefault(b.x, len(first))
    return sorted(out, key=lambda b: (list(_SERIES).index(b.panel), scopes.get(b.scope, 2), first[b.x],
                                      order[b.panel, b.series]))


def _panel(ax: Axes, bars: list[Bar], panel: str) -> None:
    """One panel by `draw_bars`: the x places in their order, a series per legend entry;
    a bar with no value (a correction the audit cannot make, a rate with no labels of one
    kind) says "undefined" where it would stand."""
    names = list(_SERIES[panel].values())
    mine = [b for b in bars if b.panel == panel]
    places = list(dict.fromkeys(b.x for b in mine))
    nan = math.nan
    groups = {s: {x: GroupStat(mean=nan, sd=nan, ci95=nan, n=0, n_nan=0) for x in places} for s in names}
    for b in mine:
        groups[b.series][b.x] = GroupStat(mean=b.value, sd=nan, ci95=nan, n=b.n, n_nan=0, boot_lo=b.lo, boot_hi=b.hi)
    title, ylabel = PANELS[panel]
    draw_bars(ax, groups if places else {}, names, names, title, ylabel, top=1.0)
    from matplotlib.container import BarContainer

    for container, series in zip([c for c in ax.containers if isinstance(c, BarContainer)], names):
        for patch, x in zip(container.patches, places):
            if math.isnan(groups[series][x].mean):
                ax.text(patch.get_x() + patch.get_width() / 2, 0.01, "undefined", rotation=90, ha="center",
                        va="bottom", fontsize=6.5, color="0.3")


@glyphs_quiet
def audit_figure(r: AuditReport) -> Figure:
    """The audit's figure (module docstring), drawn by Agg outside pyplot (`new_figure`)."""
    bars = audit_bars(r)
    fig = new_figure((BARS_SIZE[0], 2 * BARS_SIZE[1]))
    top, bottom = fig.subplots(2, 1)
    _panel(top, bars, "groups")
    _panel(bottom, bars, "judge")
    return fig


def audit_png(r: AuditReport) -> bytes:
    """The audit's figure as PNG bytes (`save_png`)."""
    buf = io.BytesIO()
    save_png(audit_figure(r), buf)
    return buf.getvalue()


def write_audit(run_dir: str | Path, r: AuditReport) -> AuditReport:
    """RUN_DIR/audit.md, audit.csv and the figure (audit.png) written together
    (`write_together`: all three new, or, stopped, the ones before); returns the report as
    audit.md has it (its figure current)."""
    from tension.core.inputs.jsonl import write_together
    from tension.core.reports.rows import rows_csv

    d = Path(run_dir)
    r = msgspec.structs.replace(r, figure=FIGURE, figure_current=True)
    write_together({d / "audit.md": "# Audit of the judge\n\n" + audit_markdown(r),
                    d / "audit.csv": rows_csv(audit_rows(r)), d / FIGURE: audit_png(r)})
    return r
