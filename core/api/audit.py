"""The audit of a score run's judge by people (issue 60; docs/metrics.md 1.10), as functions:
the one door the CLI's `audit` verbs and a script share.

    audit_sample(run, size=100, shared=None, seed=0)   draw the sample (once) into RUN/audit/sample.json
    audit_export(run, out, annotator=None)             the sample as CSV for a spreadsheet
    audit_import(run, path, annotator=None)            labels from such a CSV, into RUN/audit/labels.jsonl
    audit(run)                                         the audit: agreement, κ, sensitivity, specificity,
                                                       people's agreement, corrected group statistics;
                                                       writes RUN/audit.md, RUN/audit.csv, RUN/audit.png
    audit_section(run)                                 the markdown section report.md holds (None: no sample)

People label in the view's labelling page (`tension-run audit label RUN`, docs/view.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from tension.core.api.calls import PathLike

if TYPE_CHECKING:
    from tension.core.inputs.labels import Sample
    from tension.core.reports.audit_report import AuditReport

__all__ = ["audit", "audit_sample", "audit_export", "audit_import", "audit_section", "ImportResult"]


class ImportResult(msgspec.Struct, kw_only=True):
    """What `audit_import` did: labels appended (new, or changed since the same person's
    last), rows already there as they are (skipped), rows left blank, and the bad rows'
    errors (file:line column: …), which were not imported."""

    added: int
    unchanged: int
    blank: int
    errors: list[str]
    labels_file: str
    superseded: int = 0  # of `unchanged`: rows this file said before, since changed by the same person elsewhere
    bad_rows: int = 0  # of `errors`, those of a row (the others are the file's: empty, missing, a column missing)


def audit_sample(run: PathLike, *, size: int = 100, shared: int | None = None, seed: int = 0,
                 cache: PathLike | None = None, redraw: bool = False) -> Sample:
    """Draw the audit sample of a finished score run (half among the judge's no, half among
    its yes; `shared` of them, default a fifth, shown to every annotator) into
    RUN/audit/sample.json, once: a sample already there is returned as it is (`redraw`
    draws anew while nobody has labelled it). Reads the run's cache; sends nothing."""
    from tension.core.pipelines.audit_sample import draw_sample

    return draw_sample(run, size=size, shared=shared, seed=seed, cache=cache, redraw=redraw)


def audit_export(run: PathLike, out: PathLike, *, annotator: str | None = None) -> Path:
    """Write the run's audit sample as CSV to `out` (the judge's answers left out; columns
    `annotator` and `label` to fill in; with `annotator`, that person's labels so far)."""
    from tension.core.inputs.jsonl import atomic_write
    from tension.core.inputs.labels import check_annotator, names_of, person, read_labels, read_sample, sample_csv

    if Path(out).is_dir():  # the atomic write's rename would name its hidden temporary file instead
        from tension.core.errors import ConfigError

        raise ConfigError(f"--out {out}: a folder; give the CSV file to write (e.g. {Path(out) / 'audit.csv'})")
    sample = read_sample(run)
    labels, _ = read_labels(run, [it.key for it in sample.items])
    who = person(check_annotator("--annotator", 0, annotator), names_of(labels)) if annotator is not None else None
    atomic_write(out, sample_csv(sample, who, labels))
    return Path(out)


def audit_import(run: PathLike, path: PathLike, *, annotator: str | None = None) -> ImportResult:
    """Read labels from a CSV (columns `key`, `label`, `annotator`; `annotator` may be given
    here for the whole file) and append the good rows to RUN/audit/labels.jsonl: a row the
    same person already gave the same label is skipped, and so is a row this file (by its
    name) already imported that the person has changed since (in the page, another file),
    so a file imported twice adds nothing and undoes nothing. Bad rows are returned as
    errors and not imported; nothing else is lost."""
    from tension.core.inputs.jsonl import FileError
    from tension.core.inputs.labels import (
        append_labels,
        labels_path,
        latest,
        names_of,
        read_label_csv,
        read_labels,
        read_sample,
    )

    sample = read_sample(run)
    keys = [it.key for it in sample.items]
    given = read_labels(run, keys)[0]
    got = read_label_csv(path, keys, annotator, people=names_of(given))
    have = latest(given)
    # what this file said when it was imported before: a row still saying it is not news, even when the
    # person has changed the answer since in the page (importing the file again must not undo that)
    before = latest(x for x in given if got.labels and x.source == got.labels[0].source)
    new, superseded = [], 0
    for lab in got.labels:
        old = have.get(lab.key, {}).get(lab.annotator)
        if old is not None and old.label == lab.label:
            continue
        was = before.get(lab.key, {}).get(lab.annotator)
        if was is not None and was.label == lab.label:
            superseded += 1
            continue
        new.append(lab)
    append_labels(run, new)
    return ImportResult(added=len(new), unchanged=len(got.labels) - len(new), blank=got.blank,
                        errors=[str(e) for e in got.errors], labels_file=str(labels_path(run)),
                        superseded=superseded,
                        bad_rows=sum(1 for e in got.errors if e.line > 0 and not isinstance(e, FileError)))


def audit(run: PathLike, *, resamples: int = 2000, seed: int = 0, write: bool = True) -> AuditReport:
    """The audit of the run's judge from its sample and labels (docs/metrics.md 1.10); with
    `write`, RUN/audit.md, RUN/audit.csv and its figure RUN/audit.png, together."""
    from tension.core.reports.audit_report import audit_report

    report = audit_report(run, n_resamples=resamples, seed=seed)
    if write:
        from tension.core.reports.audit_figure import write_audit

        report = write_audit(run, report)
    return report


def audit_section(run: PathLike) -> str | None:
    """The audit's section of report.md (markdown), or None when the run has no audit sample;
    a sample of other verdicts than the run holds now (scored again since) is said there."""
    from tension.core.inputs.labels import sample_path
    from tension.core.reports.audit_report import audit_section as section

    if not sample_path(run).is_file():
        return None
    return section(run)
