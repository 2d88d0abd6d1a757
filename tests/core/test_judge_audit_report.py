"""`tension-run audit report` on an audit without a disagreement (issue 60; docs/metrics.md 1.10),
through the real CLI on a run scored against the test server: agreement, κ and J are 1 with an
interval below 1 in audit.csv and audit.md (the bootstrap printed 1.000 [1.000, 1.000]), and a
pair of annotators who both said no to everything has κ "undefined" in the text, not a number."""

from __future__ import annotations

import csv
from pathlib import Path

from audit_run import scored_run  # tests/audit_run.py

from tension.core.inputs import labels as lab
from tension.testing.cli import run_here


def test_no_disagreement_prints_an_interval_and_undefined_kappa_is_said(tmp_path: Path):
    run = scored_run(tmp_path)
    assert run_here("audit", "sample", run, "--size", 20, "--shared", 4, "--seed", 1).returncode == 0
    s = lab.read_sample(run)
    said = {it.key: "does-not-match" if it.judge != "match" else "matches" for it in s.items}
    labels = [lab.Label(key=k, annotator="ann", label=v, time=lab.now()) for k, v in said.items()]
    # cy and di both label three of the judge's no items "does-not-match": their κ has p_e = 1
    judge_no = [it.key for it in s.items if it.judge != "match"][:3]
    labels += [lab.Label(key=k, annotator=who, label="does-not-match", time=lab.now())
               for k in judge_no for who in ("cy", "di")]
    lab.append_labels(run, labels)
    r = run_here("audit", "report", run, "--resamples", 200)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader((run / "audit.csv").read_text().splitlines()))
    for stat in ("agreement", "kappa", "youden"):
        (row,) = [x for x in rows if x["kind"] == "judge" and x["scope"] == "all" and x["statistic"] == stat]
        assert float(row["value"]) == 1.0 and float(row["hi"]) == 1.0, row
        assert 0.0 < float(row["lo"]) < 0.99, row
    text = (run / "audit.md").read_text()
    table = [ln for ln in text.splitlines() if ln.startswith("| all |")]
    assert table and "1.000 [1.000, 1.000]" not in table[0], table
    (pair,) = [ln for ln in text.splitlines() if ln.startswith("| cy / di |")]
    assert pair.rstrip().endswith("| undefined |"), pair
    (kappa,) = [x for x in rows if x["kind"] == "people" and x["name"] == "cy/di" and x["statistic"] == "kappa"]
    assert kappa["value"] == kappa["lo"] == kappa["hi"] == "", kappa
