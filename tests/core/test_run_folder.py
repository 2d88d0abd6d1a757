"""A score run's folder read back (core/reports/run_folder.py): run.json as the typed
run record, the record the run holds taken instead of its file, an earlier
version's record read with what it does not say, and the comparable statistics
computed once per folder (issue 59)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tension.cache.records import Usage
from tension.core.errors import InputError
from tension.core.reports import metrics, run_folder
from tension.core.reports.report import report
from tension.core.reports.run_folder import load_run, read_record, record_of_doc
from tension.core.run.record import CacheFigures, Http, RunHeader, RunRecord, write_record


def _positions(d: Path, n: int = 6, seed: int = 1) -> Path:
    """positions.jsonl of `n` stories in two groups, with verdict counts (20 endings a position)."""
    rng = random.Random(seed)
    d.mkdir(parents=True, exist_ok=True)
    with (d / "positions.jsonl").open("w") as f:
        for i in range(n):
            for k, x in enumerate(sorted({round(rng.uniform(0.05, 0.99), 3) for _ in range(25)}), start=1):
                match = rng.randint(0, 20)
                f.write(json.dumps({"id": f"s{i}", "group": "ab"[i % 2], "k": k, "pct": x, "n_endings": 20,
                                    "n_match": match, "n_empty": 0, "n_malformed": 0,
                                    "no_rate": 1 - match / 20}) + "\n")
    return d


def _record() -> RunRecord:
    header = RunHeader(command="score", status="complete", error=None, exit_status=1, argv=["tension-run", "score"],
                       started=1.7e9, wall_seconds=12.25, config={"endings": 20, "seed": 3, "window": 3,
                                                                   "base_url": "http://127.0.0.1:1/v1"},
                       models={"generation": "g", "judge": "j"}, versions={"python": "3.11"},
                       requests={"generation": 4, "judge": 80}, http=Http(attempts=90, retries=2),
                       usage_this_run=Usage(prompt_tokens=1000, completion_tokens=400, cached_tokens=300, requests=84),
                       usage_all_answers=Usage(prompt_tokens=2000, completion_tokens=800, requests=168),
                       cache=CacheFigures(path="/c", hits={"endings": 2, "verdicts": 40}, misses={}, writes={},
                                          damaged={}), lanes={})
    body = {"corpus": "/data/c.jsonl", "corpus_given": "c.jsonl",
            "invocations": {"count": 2, "wall_seconds": 30.5},
            "stories": {"kept": 7, "skipped": [], "input_errors": ["c.jsonl:3 field `text`: expected `str`"],
                        "failed": [{"id": "s9", "stage": "judge", "error": "boom"}]},
            "warnings": []}
    return RunRecord(header=header, body=body)


def test_the_report_of_the_record_the_run_holds_is_the_report_of_its_file(tmp_path):
    """`report(..., record=)` takes the record the run wrote rather than read its run.json
    again: the same report.md, with the file gone bad after it was written."""
    run = _positions(tmp_path / "r")
    record = _record()
    write_record(run / "run.json", record.doc())
    assert read_record(run / "run.json") == record_of_doc(record.doc(), run / "run.json")
    from_file = report(run, gpu_hour_usd=2.0, usd_per_mtok=(1.0, 2.0)).read_text()
    assert "Status **complete**, exit status 1" in from_file and "(2 retries)" in from_file
    (run / "run.json").write_text("{not json\n")
    with pytest.raises(InputError, match="not valid JSON"):
        report(run)
    assert report(run, gpu_hour_usd=2.0, usd_per_mtok=(1.0, 2.0), record=record).read_text() == from_file


def test_a_record_of_an_earlier_version_is_read_with_what_it_does_not_say(tmp_path):
    """A run.json written before the shared header (or by hand) gets the header fields it
    lacks as a record that says nothing of them, and its exit status from its stories."""
    doc = {"status": "complete", "wall_seconds": 7200, "corpus": "c.jsonl",
           "stories": {"kept": 3, "failed": [{"id": "x", "stage": "judge", "error": "e"}], "input_errors": []},
           "config": {"window": 5}}
    rec = record_of_doc(doc, tmp_path / "run.json", stories=3)
    h = rec.header
    assert (h.command, h.status, h.exit_status, h.wall_seconds) == ("score", "complete", 1, 7200.0)
    assert (h.http.retries, h.usage_this_run, h.cache.hits, h.models) == (0, Usage(), {}, {})
    assert rec.body == {"corpus": "c.jsonl", "stories": doc["stories"]}
    assert record_of_doc({**doc, "stories": {"kept": 3}}, tmp_path / "run.json").header.exit_status == 0


def test_a_header_field_of_another_type_is_an_input_error_naming_the_file_and_field(tmp_path):
    with pytest.raises(InputError) as e:
        record_of_doc({"status": "complete", "http": {"retries": "two"}}, tmp_path / "run.json")
    assert str(tmp_path / "run.json") in str(e.value) and "$.http.retries" in str(e.value)


def test_a_folder_without_a_record_has_none(tmp_path):
    run = _positions(tmp_path / "r")
    assert load_run(run, n_resamples=0, intervals=False).record is None
    (run / "run.json").write_text("{}")
    assert load_run(run, n_resamples=0, intervals=False).record is None


def test_the_comparable_statistics_are_computed_once_per_folder_and_per_metrics(tmp_path, monkeypatch):
    calls = []
    real = metrics.comparable_matrix

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(metrics, "comparable_matrix", counted)
    monkeypatch.setattr(run_folder, "comparable_matrix", counted)
    run = _positions(tmp_path / "r")
    data = load_run(run, n_resamples=50)
    assert len(data.values("retain_comparable")) == 6 and len(calls) == 1
    computed = metrics.metrics(run, tmp_path / "m")
    assert computed.stories() is not None and len(calls) == 2
