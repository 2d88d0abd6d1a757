"""The audit of a score run's judge (issue 60; docs/metrics.md 1.10), from its folder alone:
audit/sample.json, audit/labels.jsonl, stories.csv and groups.csv. No LLM, no cache.

`audit_report` computes it (core/reports/judge_audit.py's statistics, judge_correction.py's
corrected means); `audit_markdown` is the section report.md and audit.md hold, `audit_rows` the
rows of audit.csv, `audit_text` what `tension-run audit report` prints. Its figure, audit.png,
is core/reports/audit_figure.py's, written with audit.md and audit.csv; the markdown shows it
when the folder has it, and says so when it was drawn from other numbers than the section's
(labels added since).
"""

from __future__ import annotations

import csv
import math
import shlex
from pathlib import Path

import msgspec
import numpy as np

from tension.core.errors import InputError
from tension.core.inputs.labels import LABELS, Sample, latest, read_labels, read_sample
from tension.core.inputs.verdict_counts import sample_mismatch
from tension.core.reports import judge_audit as ja
from tension.core.reports import judge_correction as jc
from tension.core.reports.rows import Cell, Rows

__all__ = ["AuditReport", "Agreement", "CorrectedStat", "audit_report", "audit_markdown", "audit_rows",
           "audit_text", "audit_section", "CORRECTED", "NOT_CORRECTED", "FIGURE"]

FIGURE = "audit.png"  # the audit's figure, in the run folder beside audit.md and audit.csv

# the group statistics that are means of no-rates: corrected (Rogan–Gladen is affine, so the
# mean of corrected no-rates is the corrected mean)
CORRECTED = ("mean_nr", "late_nr")
# the others, and why not (docs/metrics.md 1.10)
NOT_CORRECTED = {
    "retain": "a ratio of two no-rates of one curve (low / peak): the correction shifts both, so the ratio moves "
              "by an amount that depends on each story's levels, not by one affine map of the group mean",
    "convergence": "Retain − 100: as Retain",
    "ir": "the inflection rates are angles of the curve in the unit square after min-max scaling, which an affine "
          "map of the no-rates with a positive slope (the correction, unclipped) leaves as they are: they need none",
    "comparable": "the comparable second-order statistics count turns of at least 0.1 no-rate beyond each story's "
                  "own binomial noise: the correction rescales both the turns and the noise, so the count changes "
                  "story by story; not corrected",
}


class Agreement(msgspec.Struct, frozen=True, kw_only=True):
    """The judge against people on the items of one scope (all, a group, a part)."""

    scope: str  # "all", "group", "part"
    name: str
    population: tuple[int, int]  # the run's judge-no and judge-yes verdicts in this scope
    result: ja.JudgeAgreement


class CorrectedStat(msgspec.Struct, frozen=True, kw_only=True):
    group: str
    statistic: str
    mean: float  # groups.csv's (the run's uncorrected)
    lo: float  # groups.csv's bootstrap interval
    hi: float
    n: int
    corrected: jc.CorrectedMean


class AuditReport(msgspec.Struct, kw_only=True):
    run: str
    judge_model: str
    items: int  # in the sample
    shared: int
    labels: int  # lines read
    annotators: dict[str, int]  # annotator -> items labelled (latest label per item)
    labelled_items: int  # items with any label
    decisive_items: int  # items with a matches / does-not-match label
    cant_tell: int  # labels (latest per annotator and item) saying can't tell
    judge: Agreement
    by_group: list[Agreement]
    by_part: list[Agreement]
    people: list[ja.PeopleAgreement]
    corrected: list[CorrectedStat]
    not_corrected: dict[str, str]
    warnings: list[str]
    errors: list[str]  # bad lines of labels.jsonl (file:line field: …)
    method: str = "delta"
    n_resamples: int = ja.N_RESAMPLES
    seed: int = 0
    figure: str | None = None  # FIGURE when the run folder holds the audit's figure (`tension-run audit report`)
    figure_current: bool = False  # it plots these numbers: the audit.csv written with it holds this report's rows


def _floats(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


def _stories(run_dir: Path) -> list[dict[str, str]]:
    """stories.csv's rows; an InputError naming it when it is missing, or one the correction
    cannot read (a report of no corrected statistics, said by nothing, was what that gave)."""
    path = run_dir / "stories.csv"
    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            header = list(reader.fieldnames or [])
    except FileNotFoundError:
        raise InputError(str(run_dir), 0, None, "no stories.csv: the audit corrects a finished run's statistics; "
                                                f"write it from positions.jsonl with the run's settings: "
                                                f"{_metrics_command(run_dir)}") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise InputError(str(path), 0, None, f"cannot be read ({e}): {_unreadable(run_dir)}") from None
    if missing := [c for c in ("group", *CORRECTED) if c not in header]:
        raise InputError(str(path), 1, None, f"no column {', '.join(missing)} in its header (its columns: "
                                             f"{', '.join(header) or 'none'}): {_unreadable(run_dir)}")
    return rows


def _unreadable(run_dir: Path) -> str:
    return (f"the corrected statistics read its columns group, {', '.join(CORRECTED)}; write it again from "
            f"positions.jsonl: {_metrics_command(run_dir)}")


def _metrics_command(run_dir: Path) -> str:
    """`tension-run metrics` writing the run's stories.csv and groups.csv again, with the curve
    settings its run.json records (the paper's where it records none): `report` writes neither."""
    from tension.core.reports.run_folder import recorded_settings
    from tension.kernels.settings import CurveSettings

    c = CurveSettings(**recorded_settings(run_dir))  # the run's own, the paper's where it records none
    q = shlex.quote(str(run_dir))
    return (f"tension-run metrics {q} --out {q} --window {c.window} --thresholds "
            f"{','.join(f'{t:g}' for t in c.thresholds)} --late-threshold {c.late_threshold:g} "
            f"--retention-window {c.retention_window} --interval-resamples {c.interval_resamples} "
            f"--interval-seed {c.interval_seed}")


def _groups(run_dir: Path) -> dict[tuple[str, str], dict[str, str]]:
    path = run_dir / "groups.csv"
    try:
        with path.open(encoding="utf-8", newline="") as f:
            return {(r["group"], r["statistic"]): r for r in csv.DictReader(f)}
    except (FileNotFoundError, KeyError):
        return {}


def _person_no(sample: Sample, labels) -> tuple[np.ndarray, np.ndarray, dict[str, dict[str, str]], int]:
    """Per item: the judge said no; the share of its annotators' decisive latest labels that
    say no (NaN: none); the latest labels by item and annotator; the can't-tell count."""
    have = latest(labels)
    judge_no = np.array([it.judge != "match" for it in sample.items], dtype=bool)
    share = np.full(len(sample.items), np.nan)
    by_item: dict[str, dict[str, str]] = {}
    cant = 0
    for i, it in enumerate(sample.items):
        got = {who: lab.label for who, lab in have.get(it.key, {}).items()}
        by_item[it.key] = got
        decisive = [v for v in got.values() if v != LABELS[2]]
        cant += len(got) - len(decisive)
        if decisive:
            share[i] = sum(v == LABELS[1] for v in decisive) / len(decisive)
    return judge_no, share, by_item, cant


def audit_report(run_dir: str | Path, *, n_resamples: int = ja.N_RESAMPLES, seed: int = 0) -> AuditReport:
    """The audit of the run in `run_dir` from its sample and labels (InputError: no sample, or
    a sample of other verdicts than the run's positions.jsonl holds now)."""
    d = Path(run_dir)
    sample = read_sample(d)
    if (why := sample_mismatch(d, sample)) is not None:  # its error rates are another run's: no number of it holds
        raise InputError(str(d), 0, None, why)
    labels, bad = read_labels(d, [it.key for it in sample.items])
    judge_no, share, by_item, cant = _person_no(sample, labels)
    kw = {"n_resamples": n_resamples, "seed": seed}

    def agreement(scope: str, name: str, mask: np.ndarray, pop: tuple[int, int]) -> Agreement:
        return Agreement(scope=scope, name=name, population=pop,
                         result=ja.judge_agreement(judge_no[mask], share[mask], pop, **kw))

    everything = np.ones(len(sample.items), dtype=bool)
    judge = agreement("all", "all", everything, sample.population())
    groups = list(dict.fromkeys(c.group for c in sample.counts))
    by_group = [agreement("group", g, np.array([it.group == g for it in sample.items], dtype=bool),
                          sample.population(group=g)) for g in groups]
    parts = [p for p in ("early", "middle", "late") if any(c.part == p for c in sample.counts)]
    by_part = [agreement("part", p, np.array([it.part == p for it in sample.items], dtype=bool),
                         sample.population(part=p)) for p in parts]
    stories = _stories(d)
    recorded = _groups(d)
    corrected = []
    for g in dict.fromkeys(r.get("group", "") for r in stories):
        for stat in CORRECTED:
            values = np.array([_floats(r.get(stat)) for r in stories if r.get("group", "") == g])
            cm = jc.corrected_mean(values, judge_no, share, sample.population(), n_resamples=n_resamples, seed=seed)
            row = recorded.get((g, stat))
            mean, lo, hi = ((_floats(row.get("mean")), _floats(row.get("boot_lo")), _floats(row.get("boot_hi")))
                            if row else (cm.observed.value, cm.observed.lo, cm.observed.hi))
            corrected.append(CorrectedStat(group=g, statistic=stat, mean=mean, lo=lo, hi=hi, n=cm.n, corrected=cm))
    annotators: dict[str, int] = {}
    for got in by_item.values():
        for who in got:
            annotators[who] = annotators.get(who, 0) + 1
    report = AuditReport(
        run=str(d), judge_model=sample.judge_model, items=len(sample.items), shared=sample.shared, labels=len(labels),
        annotators=dict(sorted(annotators.items())), labelled_items=sum(bool(v) for v in by_item.values()),
        decisive_items=int(np.isfinite(share).sum()), cant_tell=cant, judge=judge, by_group=by_group,
        by_part=by_part, people=ja.people_agreement({k: v for k, v in by_item.items() if len(v) > 1}, **kw),
        corrected=corrected, not_corrected=NOT_CORRECTED, warnings=ja.agreement_warnings(judge.result),
        errors=[str(e) for e in bad], n_resamples=n_resamples, seed=seed)
    if (d / FIGURE).is_file():  # drawn by `audit report` with audit.csv: current while the file holds these rows
        from tension.core.reports.rows import rows_csv

        try:
            current = (d / "audit.csv").read_text(encoding="utf-8") == rows_csv(audit_rows(report))
        except (OSError, UnicodeDecodeError):
            current = False
        report.figure, report.figure_current = FIGURE, current
    return report


# -- text ---------------------------------------------------------------------------------------


def _f(v: float, digits: int = 3) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


def _iv(iv: ja.Interval) -> str:
    if not math.isfinite(iv.value):
        return "undefined"
    if not (math.isfinite(iv.lo) and math.isfinite(iv.hi)):
        return f"{_f(iv.value)} [no interval]"
    return f"{_f(iv.value)} [{_f(iv.lo)}, {_f(iv.hi)}]"


def _agreement_table(rows: list[Agreement]) -> list[str]:
    out = ["| scope | items (judge no / yes) | run's verdicts (no / yes) | agreement | κ | sensitivity | "
           "specificity |", "|---|---:|---:|---|---|---|---|"]
    for a in rows:
        r = a.result
        name = "all" if a.scope == "all" else f"{a.scope} {a.name}"
        out.append(f"| {name} | {r.items} ({r.judge_no_items} / {r.judge_yes_items}) | {a.population[0]:,} / "
                   f"{a.population[1]:,} | {_iv(r.agreement)} | {_iv(r.kappa)} | {_iv(r.sensitivity)} | "
                   f"{_iv(r.specificity)} |")
    return out


def audit_markdown(r: AuditReport, heading: str = "##") -> str:
    """The audit as a markdown section (report.md's and audit.md's)."""
    lines = [f"{heading} The judge against people", ""]
    who = ", ".join(f"{k} ({v})" for k, v in r.annotators.items()) or "nobody yet"
    lines += [f"Judge `{r.judge_model}`; a sample of {r.items} of the run's verdicts ({r.shared} shown to every "
              f"annotator), drawn by the judge's answer and weighted back to the run (docs/metrics.md 1.10). "
              f"Labelled: {r.labelled_items} items by {who}; {r.decisive_items} with a decisive label "
              f"({r.cant_tell} can't-tell labels left out). 95 % intervals: sensitivity and specificity Wilson "
              f"(MOVER-R over the two judge answers' labelled items), agreement, κ and J Wilson–MOVER over the same "
              f"items; the uncorrected group means' are groups.csv's bootstrap.", ""]
    for w in r.warnings:
        lines.append(f"**Warning:** {w}.")
    if r.warnings:
        lines.append("")
    lines += _agreement_table([r.judge])
    lines += ["", f"Sensitivity + specificity − 1 (J) = {_iv(r.judge.result.youden)}; warnings below κ "
              f"{ja.WARN_KAPPA} or J {ja.WARN_YOUDEN}.", ""]
    lines += [f"{heading}# By story group and by part of the story", "",
              "The correction assumes the judge errs at the same rates everywhere: these should agree within "
              "their intervals.", ""]
    lines += _agreement_table(r.by_group + r.by_part)
    lines += ["", f"{heading}# People against people (items labelled by two)", ""]
    if r.people:
        lines += ["| annotators | items both decided | can't tell | agreement | κ |", "|---|---:|---:|---|---|"]
        for p in r.people:
            lines.append(f"| {p.a} / {p.b} | {p.items} | {p.cant_tell} | {_iv(p.agreement)} | {_iv(p.kappa)} |")
    else:
        lines.append("No item is labelled by two people yet.")
    lines += ["", f"{heading}# Group statistics corrected for the judge's errors", "",
              "Rogan–Gladen with the run's sensitivity and specificity; the interval carries the stories' sampling "
              "and the audit's (delta method).", "",
              "| group | statistic | n | uncorrected [95 %] | corrected [95 %] | note |", "|---|---|---:|---|---|---|"]
    for c in r.corrected:
        cm = c.corrected
        note = cm.undefined or ("clipped to [0, 1]" if cm.clipped else "")
        lines.append(f"| {c.group} | {c.statistic} | {c.n} | {_iv(ja.Interval(c.mean, c.lo, c.hi))} | "
                     f"{_iv(cm.corrected)} | {note} |")
    lines += ["", "Not corrected: " + "; ".join(f"**{k}**: {v}" for k, v in r.not_corrected.items()) + "."]
    lines += ["", *_figure_lines(r)]
    if r.errors:
        lines += ["", f"{len(r.errors)} line(s) of audit/labels.jsonl could not be read and were left out:"]
        lines += [f"- {e}" for e in r.errors[:10]]
    return "\n".join(lines) + "\n"


def audit_section(run_dir: str | Path) -> str:
    """report.md's section of the run's audit (it has a sample): the audit, or, when it cannot
    be computed (a sample of other verdicts than the run's, a sample.json that is not one),
    why, so that the run's own report still stands."""
    try:
        return audit_markdown(audit_report(run_dir))
    except InputError as e:
        return f"## The judge against people\n\nNot computed: {e}\n"


def _figure_lines(r: AuditReport) -> list[str]:
    """The figure (FIGURE, beside audit.md and report.md), or how to draw it."""
    if r.figure is None:
        return [f"`tension-run audit report {shlex.quote(r.run)}` draws the figure: these group statistics beside "
                "their corrections, and sensitivity and specificity by part and group."]
    out = [f"![Group no-rates uncorrected and corrected; the judge's sensitivity and specificity by part and "
           f"group, with 95 % intervals]({r.figure})", ""]
    if r.figure_current:
        return out + ["Top: each group's mean and late NR beside the same corrected for the judge's errors. Bottom: "
                      "the judge's sensitivity and specificity over all items, per part and per group; the "
                      "correction assumes them the same everywhere (bars whose intervals do not overlap say "
                      "it fails)."]
    return out + ["The figure is from the last `tension-run audit report`, whose numbers (audit.csv) are not these "
                  "(labels given since, or other --resamples or --seed): run it again to redraw it."]


def audit_text(r: AuditReport) -> str:
    """What `tension-run audit report` prints: the markdown, which reads as text too."""
    return audit_markdown(r, "#")


def audit_rows(r: AuditReport) -> Rows:
    """audit.csv: one row per figure (kind, scope, name, statistic, value, lo, hi, n)."""
    rows: list[tuple[Cell, ...]] = []

    def num(v: float) -> float | None:
        return float(v) if v is not None and math.isfinite(v) else None

    for a in [r.judge, *r.by_group, *r.by_part]:
        res = a.result
        for stat in ("agreement", "kappa", "sensitivity", "specificity", "youden"):
            iv = getattr(res, stat)
            rows.append(("judge", a.scope, a.name, stat, num(iv.value), num(iv.lo), num(iv.hi), res.items))
    for p in r.people:
        for stat in ("agreement", "kappa"):
            iv = getattr(p, stat)
            rows.append(("people", "pair", f"{p.a}/{p.b}", stat, num(iv.value), num(iv.lo), num(iv.hi), p.items))
    for c in r.corrected:
        rows.append(("uncorrected", "group", c.group, c.statistic, num(c.mean), num(c.lo), num(c.hi), c.n))
        iv = c.corrected.corrected
        rows.append(("corrected", "group", c.group, c.statistic, num(iv.value), num(iv.lo), num(iv.hi), c.n))
    return Rows(columns=("kind", "scope", "name", "statistic", "value", "lo", "hi", "n"), rows=rows)
