"""The audit of a run's judge (issue 60) walked as a researcher walks it, and what went wrong
there (review of 2026-12-07): a label spelled otherwise in labels.jsonl counted as the
opposite answer, an audit kept over a run scored again, the intervals' method misnamed,
an import undoing later answers, and the page's own wording refused in a spreadsheet."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from audit_run import scored_run  # tests/audit_run.py

from tension.core.inputs import labels as lab
from tension.core.reports.audit_report import audit_report, audit_rows
from tension.testing.cli import run_here


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> Path:
    return scored_run(tmp_path_factory.mktemp("audit-findings"))


@pytest.fixture
def run(scored, tmp_path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(scored, d)
    return d


def _sampled(run: Path, size: int = 24) -> lab.Sample:
    r = run_here("audit", "sample", run, "--size", size, "--shared", 4, "--seed", 2)
    assert r.returncode == 0, r.stderr
    return lab.read_sample(run)


def _truth(it: lab.SampleItem, i: int) -> str:
    """People's answer: the judge's, but wrong on every fifth item and unsure on every seventh."""
    said = "does-not-match" if it.judge != "match" else "matches"
    if i % 5 == 0:
        said = "matches" if said == "does-not-match" else "does-not-match"
    return "cant-tell" if i % 7 == 3 else said


# what a person or a script may write for each label, as the readers accept it (core/inputs/labels.py)
SPELLINGS = {"matches": ["yes", "Yes", "Y", " y ", "Matches", "MATCHES"],
             "does-not-match": ["no", "No", "N", "n ", "Does-Not-Match", "NO"],
             "cant-tell": ["s", "S", "can't tell", "Cant Tell", "Cant-Tell"]}


def _write_labels(run: Path, lines: list[dict]) -> None:
    lab.labels_path(run).write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_every_spelling_labels_jsonl_accepts_counts_as_the_label_it_stands_for(run):
    """A line of labels.jsonl the reader accepts ("no", "Yes", "s", "Anna ") is the label and the
    person it stands for: the audit's every number equals the one of the same labels spelled as the
    page writes them. (Before, the check's answer was thrown away and the raw text compared with
    "does-not-match": a "no" counted as a match, a "s" as a decisive match, silently.)"""
    s = _sampled(run)
    plain, spelled = [], []
    for i, it in enumerate(s.items):
        want = _truth(it, i)
        for who in ("ann", "bo") if it.shared else ("ann",):
            plain.append({"key": it.key, "annotator": who, "label": want, "time": "t"})
            variants = SPELLINGS[want]
            spelled.append({"key": it.key, "annotator": f" {who} " if i % 2 else who,
                            "label": variants[i % len(variants)], "time": "t"})
    _write_labels(run, plain)
    want = audit_rows(audit_report(run, n_resamples=200))
    _write_labels(run, spelled)
    got_labels, errors = lab.read_labels(run, [it.key for it in s.items])
    assert errors == []
    assert {x.label for x in got_labels} <= set(lab.LABELS) and {x.annotator for x in got_labels} == {"ann", "bo"}
    got = audit_report(run, n_resamples=200)
    assert got.errors == [] and sorted(got.annotators) == ["ann", "bo"]
    assert audit_rows(got) == want
    # the export for one person fills in their labels as the canonical words
    out = run / "ann.csv"
    assert run_here("audit", "export", run, "--out", out, "--annotator", "ann").returncode == 0
    rows = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))
    assert {r["label"] for r in rows} <= set(lab.LABELS) and all(r["label"] for r in rows)
