"""Paired comparisons of two runs (`tension-run compare`): B − A for every story
statistic over stories paired by id or a metadata field, with a paired bootstrap
95% interval and a paired t-test; and its table (001 Table 19 layout). Per pair of
stories, B − A of each statistic with its 95% interval over both runs' own verdicts
(core/reports/story_intervals.py, docs/metrics.md 1.6)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from tension.core.errors import ConfigError, InputError
from tension.core.reports.comparable import SUFFIX as COMPARABLE
from tension.core.reports.comparable import comparable_columns, finding_refusal, min_endings
from tension.core.reports.metrics import stat_columns
from tension.core.reports.run_folder import RunData, load_run, settings_from_config
from tension.core.reports.run_setups import (
    MEASUREMENT_SETTINGS,
    RunAbout,
    curve_notes,
    flagged,
    other_texts,
    record_about,
    run_about,
    setup_warnings,
    unknown_setups,
)
from tension.core.reports.story_intervals import StoryDiff, paired_differences, stat_matrix
from tension.core.reports.tables import fmt_stat, render_table
from tension.kernels.bootstrap import N_RESAMPLES, percentile_ci
from tension.kernels.curves import CurveSettings
from tension.kernels.settings import MIN_INTERVAL_RESAMPLES, check_interval_resamples

__all__ = ["compare", "second_order", "second_order_note", "SECOND_ORDER_MARK", "MEASUREMENT_SETTINGS",
           "Comparison", "ComparisonRow", "RunAbout", "run_about", "record_about", "setup_warnings",
           "comparison_table", "story_table"]


class ComparisonRow(msgspec.Struct, kw_only=True):
    stat: str
    n_pairs: int
    mean_a: float
    mean_b: float
    diff: float  # mean of (B − A) over pairs
    lo: float
    hi: float
    t: float
    p: float
    significant: bool  # p < 0.05 and the bootstrap interval excludes 0
    finding: bool = False  # significant, and a statistic the study lets compare at these endings
    why_not: str | None = None  # why a significant difference is no finding (comparable.finding_refusal)


def second_order(stat: str) -> bool:
    """Retain, convergence and the IRs, the paper's and the comparable ones: the statistics
    the noise of the endings moves (docs/metrics.md 1.6, 1.8, 1.9), so that their values
    depend on how many endings a run paid for."""
    base = stat.removesuffix(COMPARABLE)
    return base in ("retain", "convergence") or base.startswith("ir")


SECOND_ORDER_MARK = "†"
REFUSED_MARK = "‡"
LEGEND = ("✓: a finding: p < 0.05 in the paired t-test and the paired bootstrap 95% interval excludes 0, for a "
          "statistic the study lets compare at these runs' endings (docs/metrics.md 1.9); n.s.: not significant; "
          f"no finding {REFUSED_MARK}: significant, but the statistic cannot support the comparison (why below).")


def second_order_note(a: RunAbout, b: RunAbout) -> str | None:
    """The footnote of the rows of second-order statistics when A and B used different
    numbers of endings; None when they used the same."""
    if a.endings == b.endings or not (a.known and b.known):
        return None
    return (f"{SECOND_ORDER_MARK} a second-order statistic compared across different numbers of endings (A: "
            f"{a.endings}, B: {b.endings}): noise of the endings adds reversals and peaks, more or fewer with n, so "
            "part of this difference is the endings' and not the stories' (docs/metrics.md 1.8; the comparable "
            "statistics allow for each story's noise, 1.9, but their bias still moves with n); compare runs of the "
            "same endings, or each run's statistics from its first k endings, at a k both hold, which "
            "`tension-run subsample` gives")


class Comparison(msgspec.Struct, kw_only=True):
    run_a: str
    run_b: str
    pair_by: str
    n_pairs: int
    unpaired_a: int
    unpaired_b: int
    rows: list[ComparisonRow]
    stories: list[StoryDiff] = []  # per pair and statistic, in pair order
    interval_resamples: int = 0
    interval_seed: int = 0
    about_a: RunAbout | None = None
    about_b: RunAbout | None = None
    warnings: list[str] = []  # the setups differ (setup_warnings)
    notes: list[str] = []  # a run recomputed with curve settings other than its own (curve_notes)


def _pair_keys(data: RunData, field: str) -> dict[Any, int]:
    keys: dict[Any, int] = {}
    for i, c in enumerate(data.curves):
        if field == "id":
            key = c.id
        elif field == "group":
            raise InputError(data.dir, 0, field, "cannot pair by `group`: it is shared by many stories")
        else:
            m = data.meta.get(c.id)
            if m is None:
                raise InputError(str(Path(data.dir) / "meta.jsonl"), 0, None,
                                 f"story {c.id!r} has no metadata (was the run made by an older version?)")
            if field not in m.get("meta", {}):
                raise InputError(str(Path(data.dir) / "meta.jsonl"), 0, field,
                                 f"story {c.id!r} has no field `{field}` to pair by")
            key = json.dumps(m["meta"][field], sort_keys=True)
        if key in keys:
            raise InputError(data.dir, 0, field, f"two stories share the pairing value {key}; pairs must be unique")
        keys[key] = i
    return keys


def paired_t(b: np.ndarray, a: np.ndarray) -> tuple[float, float]:
    """The paired t-test of b − a (two or more finite pairs): `scipy.stats.ttest_rel(b, a)`'s
    statistic and two-sided p-value bit for bit, by its own operations (ttest_1samp of the
    differences: the mean, the second central moment times n / (n − 1), the t
    distribution's survival function `scipy.special.stdtr`), without importing
    scipy.stats, ≈ 1 s of CPU at each start of `compare` and of the view (which compares
    its two runs). Identical runs give zero variance: NaN (0 / 0), as scipy gives, the
    honest answer (tests/core/test_report.py checks it against scipy on random pairs)."""
    from scipy.special import stdtr

    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    n = d.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        var = np.mean((d - np.mean(d, keepdims=True)) ** 2) * (np.float64(n) / (np.float64(n) - 1))
        t = np.mean(d) / np.sqrt(var / n)
        p = 2 * stdtr(np.float64(n - 1), -np.abs(t))
    return float(t), float(p)


def compare(run_a: str | os.PathLike, run_b: str | os.PathLike, pair_by: str = "id",
            n_resamples: int = N_RESAMPLES, seed: int = 0, settings: CurveSettings | None = None,
            interval_resamples: int | None = None, interval_seed: int | None = None) -> Comparison:
    """B − A for every story statistic over stories paired by `pair_by`: mean
    difference, paired bootstrap 95% interval, paired t-test; and per pair of stories
    the difference with its interval (`interval_resamples`, `interval_seed`: run A's
    recorded settings when None; 0 resamples: no per-story interval)."""
    if n_resamples < MIN_INTERVAL_RESAMPLES:  # a finding needs its bootstrap interval, whose ends need 100
        raise ConfigError(f"resamples: expected at least {MIN_INTERVAL_RESAMPLES}, got {n_resamples}: a finding "
                          "needs its bootstrap interval, whose 2.5th and 97.5th percentiles fewer resamples cannot "
                          "place")
    if interval_resamples is not None:  # told before either run is read
        try:
            check_interval_resamples(interval_resamples, "--interval-resamples")
        except ValueError as e:
            raise ConfigError(str(e)) from None
    a = load_run(run_a, settings, n_resamples=0, intervals=False)
    s = a.settings
    if interval_resamples is not None or interval_seed is not None:
        s = msgspec.structs.replace(s, interval_resamples=s.interval_resamples if interval_resamples is None
                                    else interval_resamples,
                                    interval_seed=s.interval_seed if interval_seed is None else interval_seed)
    b = load_run(run_b, settings or s, n_resamples=0, intervals=False)
    ka, kb = _pair_keys(a, pair_by), _pair_keys(b, pair_by)
    shared = [k for k in ka if k in kb]
    ia = np.array([ka[k] for k in shared], dtype=np.int64)
    ib = np.array([kb[k] for k in shared], dtype=np.int64)
    rows = []
    names = stat_columns(a.settings)
    endings_a, endings_b = min_endings(a.curves), min_endings(b.curves)
    for stat in [*names, *comparable_columns(names)]:
        va, vb = a.values(stat)[ia], b.values(stat)[ib]
        ok = np.isfinite(va) & np.isfinite(vb)
        va, vb = va[ok], vb[ok]
        d = vb - va
        lo, hi = percentile_ci(d, n_resamples, seed)
        t, p = paired_t(vb, va) if len(d) >= 2 else (math.nan, math.nan)
        significant = bool((lo > 0 or hi < 0) and p < 0.05)
        why_not = finding_refusal(stat, endings_a, endings_b)
        rows.append(ComparisonRow(stat=stat, n_pairs=int(len(d)), mean_a=float(va.mean()) if len(d) else math.nan,
                                  mean_b=float(vb.mean()) if len(d) else math.nan,
                                  diff=float(d.mean()) if len(d) else math.nan, lo=lo, hi=hi, t=float(t),
                                  p=float(p), significant=significant, finding=significant and why_not is None,
                                  why_not=why_not))
    names = stat_columns(s)
    about_a, about_b = record_about(a.record), record_about(b.record)
    stories = paired_differences([_key_text(k, pair_by) for k in shared], [a.curves[i] for i in ia],
                                 stat_matrix(a.stats)[ia], [b.curves[i] for i in ib], stat_matrix(b.stats)[ib],
                                 names, s)
    return Comparison(run_a=str(run_a), run_b=str(run_b), pair_by=pair_by, n_pairs=len(shared),
                      unpaired_a=len(ka) - len(shared), unpaired_b=len(kb) - len(shared), rows=rows,
                      stories=stories, interval_resamples=s.interval_resamples, interval_seed=s.interval_seed,
                      about_a=about_a, about_b=about_b,
                      warnings=[*flagged("A", run_a, a.record), *flagged("B", run_b, b.record),
                                *unknown_setups({"A": (run_a, about_a), "B": (run_b, about_b)}),
                                *setup_warnings(about_a, about_b),
                                *(other_texts([str(k) for k in shared], _words(a), _words(b)) if pair_by == "id"
                                  else [])],
                      notes=curve_notes(a.settings, {"A": _own(a), "B": _own(b)}))


def _own(data: RunData) -> CurveSettings | None:
    """The curve settings a run was scored with (None: no record)."""
    return None if data.record is None else settings_from_config(data.record.header.config)


def _words(data: RunData) -> dict[str, Any]:
    """Each story's word count as its run's meta.jsonl holds it."""
    return {sid: m.get("words") for sid, m in data.meta.items()}


def _key_text(key: Any, pair_by: str) -> str:
    """A pairing value as a table shows it: the id, or the metadata value (a string without JSON's quotes)."""
    if pair_by == "id":
        return str(key)
    value = json.loads(key)
    return value if isinstance(value, str) else str(key)


def story_table(c: Comparison, fmt: str = "md", max_pairs: int | None = None) -> str:
    """B − A per pair of stories: `Δ [lo, hi] ✓` per statistic (md), or one row per pair
    and statistic (csv: compare_stories.csv)."""
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["pair", "statistic", "a", "b", "diff", "lo", "hi", "significant"])
        for d in c.stories:
            w.writerow([d.key, d.stat, *(("" if math.isnan(v) else f"{v:.10g}") for v in (d.a, d.b, d.diff, d.lo,
                                                                                         d.hi)),
                        int(d.significant)])
        return buf.getvalue()
    by_pair: dict[str, list[StoryDiff]] = {}
    for d in c.stories:
        by_pair.setdefault(d.key, []).append(d)
    # the statistics the per-pair differences hold: the paper's (the comparable ones have no
    # paired interval, docs/metrics.md 1.6), so that every row has a cell under every column
    names = list(dict.fromkeys(d.stat for d in c.stories)) or [r.stat for r in c.rows if COMPARABLE not in r.stat]
    rows = []
    for key, diffs in list(by_pair.items())[:max_pairs]:
        row = [key]
        for d in diffs:
            cell = fmt_stat(d.stat, d.diff, signed=True)
            if not math.isnan(d.lo):
                cell += (f" [{fmt_stat(d.stat, d.lo, signed=True)}, {fmt_stat(d.stat, d.hi, signed=True)}]"
                         + (" ✓" if d.significant else ""))
            row.append(cell)
        rows.append(row)
    # across different endings, a story's ✓ on IR, Retain or convergence is partly the endings' (the note below)
    note = second_order_note(c.about_a, c.about_b) if c.about_a is not None and c.about_b is not None else None
    header = [f"{n} {SECOND_ORDER_MARK}" if note and second_order(n) else n for n in names]
    return render_table([c.pair_by, *header], rows, "md") + (f"\n{note}\n" if note else "")


def comparison_table(c: Comparison, fmt: str = "md") -> str:
    """001 Table 19 layout, one row per statistic: `Δ [lo, hi] ✓/n.s.` plus the t-test."""
    header = ["Statistic", "pairs", "A", "B", "B − A [95% CI]", "", "t", "p"]
    rows = []
    note = second_order_note(c.about_a, c.about_b) if c.about_a is not None and c.about_b is not None else None
    refused = {r.stat: r.why_not for r in c.rows if r.significant and r.why_not}
    for r in c.rows:
        mark = "✓" if r.finding else f"no finding {REFUSED_MARK}" if r.stat in refused else "n.s."
        cell = fmt_stat(r.stat, r.diff, signed=True)
        if not math.isnan(r.lo):
            cell += f" [{fmt_stat(r.stat, r.lo, signed=True)}, {fmt_stat(r.stat, r.hi, signed=True)}]"
        rows.append([f"{r.stat} {SECOND_ORDER_MARK}" if note and second_order(r.stat) else r.stat,
                     str(r.n_pairs), fmt_stat(r.stat, r.mean_a).rstrip("%"),
                     fmt_stat(r.stat, r.mean_b).rstrip("%"), cell, mark,
                     "—" if math.isnan(r.t) else f"{r.t:.2f}",
                     "—" if math.isnan(r.p) else f"{r.p:.3g}"])
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["statistic", "n_pairs", "mean_a", "mean_b", "diff", "boot_lo", "boot_hi", "significant", "t", "p",
                    "finding", "why_not"])
        for r in c.rows:
            w.writerow([r.stat, r.n_pairs,
                        *(("" if math.isnan(v) else f"{v:.10g}") for v in (r.mean_a, r.mean_b, r.diff, r.lo, r.hi)),
                        int(r.significant), *(("" if math.isnan(v) else f"{v:.10g}") for v in (r.t, r.p)),
                        int(r.finding), r.why_not or ""])
        return buf.getvalue()
    head = ""
    if c.about_a is not None and c.about_b is not None:
        head = (f"Run A: {c.run_a} ({c.about_a.text()})\n\nRun B: {c.run_b} ({c.about_b.text()})\n\n"
                + "".join(f"**Warning:** {w}\n\n" for w in c.warnings)
                + "".join(f"Note: {n}\n\n" for n in c.notes))
    legend = (f"\n{LEGEND}\n" + "".join(f"\n{REFUSED_MARK} {stat}: {why}\n" for stat, why in refused.items()))
    return head + render_table(header, rows, "md") + legend + (f"\n{note}\n" if note else "")


