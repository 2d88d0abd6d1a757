"""The audit of a run's judge by people (issue 60), through the real CLI on a run scored
against the test server (its in-process door): the sample (stratified, seeded, drawn once,
each item's texts as the judge saw them and its key the verdict's own), the labels file
(appends from two processes at once, a cut line, resumable), CSV export and import
(validated: file, line, column), and `audit report` (its figures against
core/reports/judge_audit.py on the same items, audit.md, audit.csv and the figure audit.png
written together, the figure's bars audit.csv's rows)."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import multiprocessing
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from audit_run import scored_run  # tests/audit_run.py

from tension.core.inputs import labels as lab
from tension.core.inputs.segment import split_sentences
from tension.core.reports import judge_audit as ja
from tension.core.reports import judge_correction as jc
from tension.testing.cli import run_here


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> Path:
    """A finished score run (4 stories, 5 endings a position) and its cache."""
    return scored_run(tmp_path_factory.mktemp("audit-run"))


@pytest.fixture
def run(scored, tmp_path) -> Path:
    """A copy of the scored run's folder (its cache shared): each spec audits its own."""
    import shutil

    d = tmp_path / "run"
    shutil.copytree(scored, d)
    return d


def positions(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "positions.jsonl").read_text().splitlines()]


def test_the_sample_is_stratified_seeded_and_drawn_once(run):
    r = run_here("audit", "sample", run, "--size", 40, "--shared", 10, "--seed", 3)
    assert r.returncode == 0, r.stderr
    assert "40 verdicts (20 the judge called no, 20 yes; 10 shown to every annotator)" in r.stdout
    assert f"label it: tension-run audit label {run}" in r.stdout
    s = lab.read_sample(run)
    assert len(s.items) == 40 and len({it.key for it in s.items}) == 40
    assert sum(it.judge == "match" for it in s.items) == 20
    shared = [it for it in s.items if it.shared]
    assert len(shared) == 10 and s.items[:10] == shared  # first
    assert sum(it.judge == "match" for it in shared) == 5
    # the population is the run's judged verdicts, by the judge's answer
    lines = positions(run)
    assert s.population() == (sum(p["n_endings"] - p["n_match"] - p["n_empty"] for p in lines),
                              sum(p["n_match"] for p in lines))
    assert {it.part for it in s.items} >= {"early", "late"} and len({it.story for it in s.items}) == 4
    # each item: what the judge saw, and its key the verdict's own cache key
    from tension.cache.store import Store
    from tension.core.pipelines.score.recall import ScoreRecall, run_record

    record = run_record(run)
    with Store(Path(record["config"]["cache"]), readonly=True) as store:
        reads = ScoreRecall(record, store).reads
        for it in s.items[:6]:
            rec = reads.store.get("verdicts", bytes.fromhex(it.key))
            assert rec is not None and rec.text == it.judge_raw
            anchor = split_sentences(it.prefix)[-1]  # the judge's blocks both begin with the anchor
            assert it.continuation.startswith(anchor + " ") and it.predicted.startswith(anchor + " ")
            assert len(split_sentences(it.prefix)) == it.k
    # drawn once: the same command says what is there; --redraw with the same seed draws the same
    again = run_here("audit", "sample", run, "--size", 10)
    assert again.returncode == 0 and "40 verdicts" in again.stdout
    assert lab.read_sample(run).items == s.items
    run_here("audit", "sample", run, "--size", 40, "--shared", 10, "--seed", 3, "--redraw")
    assert [it.key for it in lab.read_sample(run).items] == [it.key for it in s.items]


def test_a_labelled_sample_is_never_drawn_again(run):
    run_here("audit", "sample", run, "--size", 12)
    s = lab.read_sample(run)
    lab.append_labels(run, [lab.Label(key=s.items[0].key, annotator="ann", label="matches", time=lab.now())])
    r = run_here("audit", "sample", run, "--redraw")
    assert r.returncode == 2 and "a labelled sample is never drawn again" in r.stderr


def test_no_sample_or_no_run_is_said_without_a_traceback(run, tmp_path):
    r = run_here("audit", "report", run)
    assert r.returncode == 1 and "no audit sample here" in r.stderr and "audit sample" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_here("audit", "sample", tmp_path / "nothing")
    assert r.returncode == 1 and "not a score run folder" in r.stderr


def _append(run: str, who: str, keys: list[str]) -> None:
    for k in keys:
        lab.append_labels(run, [lab.Label(key=k, annotator=who, label="does-not-match", time=lab.now())])


def test_two_writers_at_once_lose_nothing_and_a_cut_line_is_one_error(run):
    run_here("audit", "sample", run, "--size", 40)
    keys = [it.key for it in lab.read_sample(run).items]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append, args=(str(run), who, keys * 5)) for who in ("ann", "bo")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    got, errors = lab.read_labels(run, keys)
    assert errors == [] and len(got) == 2 * 5 * 40
    # a crash mid-line: that line is one error, the next append starts on a line of its own
    with lab.labels_path(run).open("ab") as f:
        f.write(b'{"key": "ab')
    lab.append_labels(run, [lab.Label(key=keys[0], annotator="cy", label="matches", time=lab.now())])
    got, errors = lab.read_labels(run, keys)
    assert len(got) == 401 and len(errors) == 1 and f"labels.jsonl:{401}" in str(errors[0])
    assert lab.latest(got)[keys[0]]["cy"].label == "matches"


def test_export_then_import_round_trip_and_bad_rows_named(run, tmp_path):
    run_here("audit", "sample", run, "--size", 20, "--shared", 4)
    out = tmp_path / "sample.csv"
    r = run_here("audit", "export", run, "--out", out)
    assert r.returncode == 0 and f"tension-run audit import {run} {out}" in r.stdout
    rows = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))
    assert len(rows) == 20 and list(rows[0]) == list(lab.CSV_COLUMNS)
    assert "judge" not in out.read_text()  # the judge's answer is not in it
    for i, row in enumerate(rows):
        row["annotator"] = "ann"
        row["label"] = ["matches", "does-not-match", "n", ""][i % 4]
    rows[5]["label"] = "perhaps"
    rows[6]["key"] = "0" * 64
    rows[9]["annotator"] = ""
    rows.append(dict(rows[0]))  # a second label of the same key by the same person
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=lab.CSV_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    r = run_here("audit", "import", run, out)
    assert r.returncode == 1
    err = r.stderr
    assert (f"{out}:7 field `label`: expected one of matches, does-not-match, cant-tell (or y, n, s; yes, no; "
            "does not match, can't tell), got 'perhaps'") in err
    assert f"{out}:8 field `key`: '{'0' * 64}' is no verdict of the audit sample" in err
    assert f"{out}:11 field `annotator`: missing" in err
    assert f"{out}:22 field `key`: a second label of" in err and "(the first on line 2)" in err
    assert "imported 12 label(s)" in r.stdout and "5 row(s) without a label" in r.stdout
    got, errors = lab.read_labels(run, [it.key for it in lab.read_sample(run).items])
    assert len(got) == 12 and errors == [] and {g.source for g in got} == {"csv:sample.csv"}
    # the same file again adds nothing; fixed rows are then imported
    rows[5]["label"], rows[9]["annotator"] = "cant-tell", "bo"
    rows.pop()
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=lab.CSV_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    r = run_here("audit", "import", run, out)
    assert "imported 2 label(s)" in r.stdout and "12 already there" in r.stdout and r.returncode == 1  # row 8 still bad
    # export for one person carries their labels
    run_here("audit", "export", run, "--out", tmp_path / "ann.csv", "--annotator", "ann")
    mine = list(csv.DictReader((tmp_path / "ann.csv").read_text(encoding="utf-8").splitlines()))
    assert sum(bool(x["label"]) for x in mine) == 13


def _labelled(run: Path) -> tuple[lab.Sample, list[lab.Label]]:
    """A sample of 40 (10 shared) labelled by two annotators: ann labels the truth as the items' judge
    answer with one error each way, bo agrees on the shared items but one; a can't-tell too."""
    run_here("audit", "sample", run, "--size", 40, "--shared", 10, "--seed", 1)
    s = lab.read_sample(run)
    labels = []
    for i, it in enumerate(s.items):
        said = "does-not-match" if it.judge != "match" else "matches"
        if i in (12, 13):
            said = "matches" if said == "does-not-match" else "does-not-match"
        labels.append(lab.Label(key=it.key, annotator="ann", label=said, time=lab.now()))
        if it.shared:
            other = said if i != 3 else ("matches" if said == "does-not-match" else "does-not-match")
            labels.append(lab.Label(key=it.key, annotator="bo", label="cant-tell" if i == 4 else other,
                                    time=lab.now()))
    lab.append_labels(run, labels)
    return s, labels


def test_the_report_prints_and_writes_the_audit(run):
    s, labels = _labelled(run)
    r = run_here("audit", "report", run, "--resamples", 500)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for words in ("The judge against people", "agreement", "κ", "sensitivity", "specificity",
                  "People against people", "ann / bo", "corrected for the judge's errors", "mean_nr", "late_nr",
                  "Not corrected", f"written: {run}/audit.md, {run}/audit.csv, {run}/audit.png"):
        assert words in out, words
    assert (run / "audit.md").read_text().startswith("# Audit of the judge")
    rows = list(csv.DictReader((run / "audit.csv").read_text().splitlines()))
    # the figures are core/reports/judge_audit.py's on the same items
    share = {}
    for it in s.items:
        said = [x.label for x in labels if x.key == it.key and x.label != "cant-tell"]
        share[it.key] = sum(x == "does-not-match" for x in said) / len(said)
    judge_no = [it.judge != "match" for it in s.items]
    want = ja.judge_agreement(judge_no, [share[it.key] for it in s.items], s.population(), n_resamples=500)
    kappa = next(x for x in rows if x["kind"] == "judge" and x["scope"] == "all" and x["statistic"] == "kappa")
    assert abs(float(kappa["value"]) - want.kappa.value) < 1e-9
    assert abs(float(kappa["lo"]) - want.kappa.lo) < 1e-9
    stories = list(csv.DictReader((run / "stories.csv").read_text().splitlines()))
    groups = {x["group"] for x in stories}
    for g in groups:
        values = [float(x["mean_nr"]) for x in stories if x["group"] == g]
        cm = jc.corrected_mean(values, judge_no, [share[it.key] for it in s.items], s.population())
        got = next(x for x in rows if x["kind"] == "corrected" and x["name"] == g and x["statistic"] == "mean_nr")
        assert abs(float(got["value"]) - cm.corrected.value) < 1e-9
        unc = next(x for x in rows if x["kind"] == "uncorrected" and x["name"] == g and x["statistic"] == "mean_nr")
        assert abs(float(unc["value"]) - sum(values) / len(values)) < 1e-9
    pair = next(x for x in rows if x["kind"] == "people" and x["statistic"] == "agreement")
    assert pair["name"] == "ann/bo" and int(pair["n"]) == 9 and abs(float(pair["value"]) - 8 / 9) < 1e-9


def test_the_report_section_for_report_md(run):
    import tension

    assert tension.audit_section(run) is None
    tension.audit_sample(run, size=10, shared=2)
    section = tension.audit_section(run)
    assert section.startswith("## The judge against people")
    assert "no item has a decisive label yet" in section
    assert f"`tension-run audit report {run}` draws the figure" in section and "](audit.png)" not in section


def test_report_md_carries_the_audit_once_a_sample_is_drawn(run):
    """`tension-run report` (and score's own report): the audit's section in report.md
    when the run has a sample, and nothing of it before (issue 60)."""
    run_here("report", run)
    assert "The judge against people" not in (run / "report.md").read_text(encoding="utf-8")
    run_here("audit", "sample", run, "--size", 10, "--shared", 2)
    run_here("report", run)
    md = (run / "report.md").read_text(encoding="utf-8")
    assert "## The judge against people" in md and md.index("## The judge against people") < md.index("Files: ")


# -- the figure, audit.png ---------------------------------------------------------------------------------

def _png_size(data: bytes) -> tuple[int, int]:
    """A PNG's width and height from its header (the signature, then the IHDR chunk first)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    return struct.unpack(">II", data[16:24])


def test_the_figure_is_a_png_of_the_audits_own_numbers(run):
    """`audit report` draws audit.png beside audit.md and audit.csv: a valid PNG of a sensible size, whose
    bars are audit.csv's rows (value and interval), every corrected and uncorrected group statistic and
    sensitivity and specificity over all items, per part and per group; what is drawn is those bars;
    audit.md and report.md show it, and say so once labels given since make it older than the numbers."""
    from matplotlib.container import BarContainer
    from PIL import Image

    from tension.core.reports.audit_figure import audit_bars, audit_figure
    from tension.core.reports.audit_report import audit_markdown, audit_report

    s, _ = _labelled(run)
    assert run_here("audit", "report", run, "--resamples", 500).returncode == 0
    data = (run / "audit.png").read_bytes()
    width, height = _png_size(data)
    assert 600 <= width <= 2000 and 600 <= height <= 2000 and len(data) > 20_000
    with Image.open(run / "audit.png") as im:
        im.verify()  # its chunks and checksums whole
    with Image.open(run / "audit.png") as im:
        assert im.size == (width, height) and len(im.convert("L").getcolors(1 << 16) or ()) > 10  # drawn, not blank

    report = audit_report(run, n_resamples=500)
    assert report.figure == "audit.png" and report.figure_current
    bars = audit_bars(report)
    rows = {(x["kind"], x["scope"], x["name"], x["statistic"]): x
            for x in csv.DictReader((run / "audit.csv").read_text().splitlines())}

    def cell(text: str) -> float:
        return float(text) if text else math.nan

    for b in bars:
        row = rows[b.kind, b.scope, b.name, b.statistic]
        for got, want in ((b.value, row["value"]), (b.lo, row["lo"]), (b.hi, row["hi"])):
            assert (math.isnan(got) and math.isnan(cell(want))) or abs(got - cell(want)) < 1e-9, (b, row)
        assert b.n == int(row["n"])
    assert {(b.kind, b.scope, b.name, b.statistic) for b in bars} == {
        k for k in rows if k[0] in ("uncorrected", "corrected")
        or (k[0] == "judge" and k[3] in ("sensitivity", "specificity"))}
    groups = sorted({it.group for it in s.items})
    top = [b for b in bars if b.panel == "groups"]
    assert sorted({b.x for b in top}) == groups and len(top) == 4 * len(groups)
    assert [b.series for b in top[:4]] == ["Mean NR", "Mean NR, corrected", "Late NR", "Late NR, corrected"]
    places = list(dict.fromkeys(b.x for b in bars if b.panel == "judge"))
    parts = [p for p in ("early", "middle", "late") if any(it.part == p for it in s.items)]
    assert places == ["all items", *(f"{p} part" for p in parts), *(f"group {g}" for g in groups)]
    # what is drawn: each panel's bars, series by series, at the heights of those rows
    fig = audit_figure(report)
    for ax, panel in zip(fig.axes, ("groups", "judge")):
        mine = [b for b in bars if b.panel == panel]
        series = list(dict.fromkeys(b.series for b in mine))
        drawn = [c for c in ax.containers if isinstance(c, BarContainer)]
        assert len(drawn) == len(series)
        for container, name in zip(drawn, series):
            want = [b.value for b in mine if b.series == name]
            got = [p.get_height() for p in container.patches]
            assert got == pytest.approx(want, nan_ok=True, abs=1e-12)

    md = (run / "audit.md").read_text(encoding="utf-8")
    assert "](audit.png)" in md and "Top: each group's mean and late NR" in md
    run_here("report", run)
    assert "](audit.png)" in (run / "report.md").read_text(encoding="utf-8")
    # a label given since: the section still shows the figure, and says it is the last report's
    item = s.items[0]
    lab.append_labels(run, [lab.Label(key=item.key, annotator="cy", label="cant-tell", time=lab.now())])
    later = audit_report(run, n_resamples=500)
    assert later.figure == "audit.png" and not later.figure_current
    assert "The figure is from the last `tension-run audit report`" in audit_markdown(later)


REPORT_FILES = ["audit.csv", "audit.md", "audit.png"]
# while it draws the figure (its font's first read; nothing written yet), as it writes its last file
# under its hidden name (the other two are aside by then), as it renames the first into place
STOPS = {"drawing": {"opens": "*.ttf"}, "writing": {"opens": ".audit.png.*.tmp"},
         "renaming": {"renames": ".audit.md.*.tmp"}}


def _stopped_when(r: subprocess.CompletedProcess, moment: str) -> None:
    """The process stopped itself at `moment` (its hook says where) and said so: interrupted, exit 130."""
    import fnmatch

    said = r.stderr.splitlines()[0] if r.stderr else ""
    assert fnmatch.fnmatch(said, f"stopping at * '*/{next(iter(STOPS[moment].values()))}'"), (moment, r.stderr)
    assert r.returncode == 130 and "interrupted" in r.stderr and "Traceback" not in r.stderr, (moment, r.stderr)


def _report_stopped(run: Path, tmp: Path, moment: str | None) -> subprocess.CompletedProcess:
    """`tension-run audit report RUN` in a process of its own, stopping itself (Ctrl-C) at `moment`
    (tension.testing.interrupt `stopped_at`), or not at all (None)."""
    from tension.testing.interrupt import stopped_at

    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "PYTHONPATH")}
    env.update(HOME=str(tmp / "home"), XDG_CACHE_HOME=str(tmp / "home" / ".cache"),
               PYTHONPATH=os.pathsep.join(sys.path))
    if moment is not None:
        env = stopped_at(tmp / f"hook-{moment}", "SIGINT", **STOPS[moment], env=env)
    cmd = [sys.executable, str(Path(__file__).resolve().parents[2] / "bin" / "tension-run"), "audit", "report",
           str(run), "--resamples", "200"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=120)


def _digests(run: Path) -> dict[str, str]:
    return {name: hashlib.sha256((run / name).read_bytes()).hexdigest() for name in REPORT_FILES
            if (run / name).exists()}


def test_audit_report_writes_its_three_files_together_or_none(run, tmp_path):
    """Stopped while it draws or writes, `audit report` leaves none of audit.md, audit.csv and audit.png
    new: none where there were none, the earlier three byte for byte over an earlier report; stopped at
    the first rename, all three are new (the stop obeyed once they are in place). No hidden file is left."""
    s, labels = _labelled(run)
    _stopped_when(_report_stopped(run, tmp_path, "drawing"), "drawing")
    assert _digests(run) == {}
    assert _report_stopped(run, tmp_path, None).returncode == 0
    before = _digests(run)
    assert sorted(before) == REPORT_FILES
    # ann changes her mind on an item only she labelled: every number of the next report, and its figure, differ
    alone = {it.key for it in s.items if not it.shared}
    mine = next(x for x in labels if x.key in alone)
    other = "matches" if mine.label == "does-not-match" else "does-not-match"
    lab.append_labels(run, [lab.Label(key=mine.key, annotator="ann", label=other, time=lab.now())])
    for moment in ("drawing", "writing"):
        _stopped_when(_report_stopped(run, tmp_path, moment), moment)
        assert _digests(run) == before, moment
    _stopped_when(_report_stopped(run, tmp_path, "renaming"), "renaming")
    after = _digests(run)
    assert sorted(after) == REPORT_FILES and all(after[n] != before[n] for n in REPORT_FILES)
    assert not [p for p in run.iterdir() if p.name.startswith(".audit")]
