"""The audit of a run's judge (issue 60) walked as a researcher walks it, and what went wrong
there (review of 2026-12-07): a label spelled otherwise in labels.jsonl counted as the
opposite answer, an audit kept over a run scored again, the intervals' method misnamed,
advice that did not work as printed, flags dropped silently (the labels' findings:
tests/core/test_audit_label_findings.py)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from audit_run import sampled, scored_run, truth, write_csv  # tests/audit_run.py

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
    s = sampled(run)
    plain, spelled = [], []
    for i, it in enumerate(s.items):
        want = truth(it, i)
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


def _rescore(run: Path, *extra: object) -> None:
    """`score` again into the run folder with other settings (its corpus and cache, the test server)."""
    from tension.testing.inprocess import InProcessServer

    root = run.parent
    shutil.copy(Path(json.loads((run / "run.json").read_text())["corpus"]), root / "corpus.jsonl")
    home = {"HOME": str(root / "home"), "XDG_CACHE_HOME": str(root / "home" / ".cache"), "OPENAI_API_KEY": None}
    with InProcessServer(["test-gen", "test-judge"]).serving() as srv:
        done = run_here("score", root / "corpus.jsonl", "--out", run, "--base-url", srv.base_url, "--model", "test-gen",
                        "--judge-model", "test-judge", "--cache", root / "cache", "--no-progress", "--no-report",
                        *extra, env=home)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("how", ["scored again", "another run's sample"])
def test_an_audit_of_other_verdicts_than_the_runs_is_refused_and_its_advice_works(run, scored, tmp_path, how):
    """A run scored again into its folder with other settings keeps its audit folder, and a sample.json
    copied from another run reads as well as its own: the audit's error rates are then of verdicts the
    run no longer holds, and corrected this run's stories.csv silently (the review's run: 2,520
    verdicts in the sample's counts, 1,512 in the run). Every door says so instead: `audit report`
    (exit 1, nothing written), `audit sample` without --redraw, `audit label` (before it serves),
    report.md's section and
    tension.audit_section (the run's own report still written). The advice, run as printed, works."""
    import shlex
    import subprocess

    import tension

    s = sampled(run)
    lab.append_labels(run, [lab.Label(key=it.key, annotator="ann", label=truth(it, i), time=lab.now())
                            for i, it in enumerate(s.items) if truth(it, i) != "cant-tell"])
    if how == "scored again":
        (run.parent / "cache").symlink_to(Path(json.loads((run / "run.json").read_text())["config"]["cache"]))
        _rescore(run, "--endings", 3)
    else:
        other = tmp_path / "other"
        shutil.copytree(run, other)
        shutil.rmtree(other / "audit")
        lines = [json.loads(x) for x in (other / "positions.jsonl").read_text().splitlines()]
        (other / "positions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines[::2]))
        shutil.copytree(run / "audit", other / "audit")
        run = other
    r = run_here("audit", "report", run)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "sample.json was drawn from other verdicts than the run holds now" in r.stderr, r.stderr
    assert not list(run.glob("audit.*"))
    again = run_here("audit", "sample", run)
    assert again.returncode == 1 and "sample.json was drawn from other verdicts" in again.stderr
    assert "label it:" not in again.stdout
    page = run_here("audit", "label", run, "--port", 0)  # no page for labels no audit could use
    assert page.returncode == 1 and "sample.json was drawn from other verdicts" in page.stderr
    assert run_here("report", run).returncode == 0
    md = (run / "report.md").read_text(encoding="utf-8")
    assert "## The judge against people\n\nNot computed: " in md and "other verdicts than the run holds" in md
    assert "mean_nr | 2 |" not in md.split("## The judge against people")[1].split("##")[0]
    assert "Not computed: " in tension.audit_section(run)
    # the advice, as printed: move the audit away, draw a new sample; then the audit is of this run
    said = r.stderr.split("move the audit away (")[1].split(")")[0]
    assert said.startswith("mv ")
    subprocess.run(shlex.split(said), check=True, cwd=Path.cwd())
    draw = r.stderr.split("draw a new sample (")[1].split(")")[0]
    assert draw.startswith("tension-run ")
    assert run_here(*shlex.split(draw)[1:]).returncode == 0
    assert run_here("audit", "report", run).returncode == 0
    assert (run / "audit.md").is_file() and (run / "audit.old" / "labels.jsonl").is_file()  # the labels kept aside


def test_the_same_run_copied_or_moved_keeps_its_audit(run, tmp_path):
    """The check compares the verdicts, not the path: a run folder copied or moved with its audit
    is audited as before."""
    s = sampled(run)
    lab.append_labels(run, [lab.Label(key=it.key, annotator="ann", label=truth(it, i), time=lab.now())
                            for i, it in enumerate(s.items)])
    moved = tmp_path / "moved"
    shutil.move(run, moved)
    r = run_here("audit", "report", moved)
    assert r.returncode == 0, r.stderr
    assert run_here("audit", "sample", moved).returncode == 0


def test_the_report_names_the_intervals_its_numbers_have(run):
    """audit.md, report.md's section and the printed audit said agreement's, κ's and J's intervals were
    a "bootstrap over the labelled items (N resamples, seed S)", and `audit report --help` "Cohen's κ (95%
    bootstrap intervals)": they are Wilson–MOVER's (docs/metrics.md 1.10), which no --resamples or --seed
    moves. A paper citing the method would cite the wrong one."""
    s = sampled(run)
    lab.append_labels(run, [lab.Label(key=it.key, annotator="ann", label=truth(it, i), time=lab.now())
                            for i, it in enumerate(s.items)])
    outs = []
    for resamples, seed in ((200, 1), (700, 9)):
        r = run_here("audit", "report", run, "--resamples", resamples, "--seed", seed)
        assert r.returncode == 0, r.stderr
        rows = [x for x in csv.DictReader((run / "audit.csv").read_text().splitlines())
                if x["kind"] in ("judge", "people")]
        outs.append((rows, r.stdout, (run / "audit.md").read_text(encoding="utf-8")))
    assert outs[0][0] == outs[1][0]  # the judge's and people's intervals: no resampling in them
    for _, printed, md in outs:
        for text in (printed, md):
            said = text.split("95 % intervals:")[1].split("\n")[0]
            assert "bootstrap" not in said.split("uncorrected")[0] and "Wilson–MOVER" in said, said
    helped = run_here("audit", "report", "--help").stdout
    assert "bootstrap intervals" not in helped.split("positional arguments")[0] and "Wilson" in helped


@pytest.mark.parametrize("verb", [["export", "--out", "x.csv"], ["import", "x.csv"], ["report"]])
def test_a_folder_that_is_no_run_is_said_so_and_the_advice_for_a_run_works(run, tmp_path, verb):
    """`audit export|import|report` of a folder that is no run said `draw one with `tension-run audit
    sample DIR``, which, run as printed, only said the folder is no run. Now they say that at once; for
    a run without a sample the advice, run as printed (a name with a space in it), draws one."""
    import shlex

    (tmp_path / "x.csv").write_text("key,label,annotator\n")
    empty = tmp_path / "not a run"
    empty.mkdir()
    r = run_here("audit", verb[0], empty, *verb[1:], cwd=tmp_path)
    assert r.returncode == 1 and "not a score run folder (no run.json in it)" in r.stderr, r.stderr
    assert "audit sample" not in r.stderr and "Traceback" not in r.stderr
    spaced = tmp_path / "my run"
    shutil.move(run, spaced)
    r = run_here("audit", verb[0], spaced, *verb[1:], cwd=tmp_path)
    assert r.returncode == 1 and "no audit sample here" in r.stderr
    advice = r.stderr.split("draw one with `")[1].split("`")[0]
    assert run_here(*shlex.split(advice)[1:], cwd=tmp_path).returncode == 0
    assert lab.sample_path(spaced).is_file()


def test_every_command_the_audit_prints_runs_as_printed_for_a_folder_with_a_space(run, tmp_path):
    """`label it: tension-run audit label DIR`, `read back with: tension-run audit import DIR CSV` and
    the section's `tension-run audit report DIR` printed the folder unquoted: for `my run` each split
    into other arguments. Each, run as printed, now does what it says (the labelling server's own
    arguments checked without serving)."""
    import shlex

    spaced = tmp_path / "my run"
    shutil.move(run, spaced)
    r = run_here("audit", "sample", spaced, "--size", 12, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    label = shlex.split(r.stdout.split("label it: ")[1].splitlines()[0])
    assert label == ["tension-run", "audit", "label", str(spaced)]
    out = tmp_path / "the labels.csv"
    r = run_here("audit", "export", spaced, "--out", out, cwd=tmp_path)
    rows = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))
    for row in rows:
        row["annotator"], row["label"] = "ann", "no"
    write_csv(out, rows)
    advice = shlex.split(r.stdout.split("read back with: ")[1].rsplit(")", 1)[0])
    done = run_here(*advice[1:], cwd=tmp_path)
    assert done.returncode == 0 and f"imported {len(rows)} label(s)" in done.stdout, done.stderr
    import tension

    section = tension.audit_section(spaced)
    draw = shlex.split(section.split("`tension-run audit report ")[1].split("`")[0])
    assert draw == [str(spaced)]
    assert run_here("audit", "report", *draw, cwd=tmp_path).returncode == 0 and (spaced / "audit.png").is_file()


def test_a_run_without_stories_csv_is_told_a_command_that_writes_it_as_the_run_had_it(run):
    """`audit report` of a run without stories.csv said `tension-run report RUN_DIR writes it`, which,
    run as printed, writes report.md and no stories.csv. Now it prints a `tension-run metrics` with the
    run's own curve settings (a run scored with --window 3 and --late-threshold 0.7 here): run as
    printed, it writes the same stories.csv and groups.csv, and the audit reports."""
    import shlex

    (run.parent / "cache").symlink_to(Path(json.loads((run / "run.json").read_text())["config"]["cache"]))
    _rescore(run, "--window", 3, "--late-threshold", 0.7)
    sampled(run)
    stories, groups = (run / "stories.csv").read_text(), (run / "groups.csv").read_text()
    (run / "stories.csv").unlink()
    r = run_here("audit", "report", run)
    assert r.returncode == 1 and "no stories.csv" in r.stderr and "Traceback" not in r.stderr
    advice = shlex.split(r.stderr.split("with the run's settings: ")[1].strip())
    assert advice[:2] == ["tension-run", "metrics"] and "--window" in advice
    done = run_here(*advice[1:])
    assert done.returncode == 0, done.stderr
    assert (run / "stories.csv").read_text() == stories and (run / "groups.csv").read_text() == groups
    assert run_here("audit", "report", run).returncode == 0


def test_flags_asking_for_another_sample_than_the_one_kept_are_said_and_the_advice_draws_it(run):
    """`audit sample RUN --size 60` over a sample of 24 printed the 24 and nothing else: the --size
    was dropped without a word (so was `audit label`'s). Now a note names what is kept and the
    command that draws what was asked, which, run as printed, does; flags not given say nothing."""
    import shlex

    sampled(run)
    plain = run_here("audit", "sample", run)
    assert plain.returncode == 0 and "note:" not in plain.stderr
    r = run_here("audit", "sample", run, "--size", 30, "--seed", 2)
    assert r.returncode == 0 and len(lab.read_sample(run).items) == 24
    assert "note: the run's sample was drawn before (--size 24) and is kept" in r.stderr, r.stderr
    assert "--seed" not in r.stderr.split("is kept")[0]  # the seed asked is the one it has
    advice = shlex.split(r.stderr.split("while nobody has labelled it: ")[1].strip())
    assert advice[:3] == ["tension-run", "audit", "sample"] and advice[-1] == "--redraw"
    assert run_here(*advice[1:]).returncode == 0
    s = lab.read_sample(run)
    assert (s.size, s.seed, len(s.items)) == (30, 2, 30)


@pytest.mark.parametrize("damage", ["columns renamed", "not UTF-8", "empty"])
def test_a_stories_csv_the_correction_cannot_read_is_said_and_the_advice_writes_it_again(run, damage):
    """A stories.csv without the columns the correction reads (`group`, `mean_nr`, `late_nr`:
    renamed in a spreadsheet, another tool's file) gave a report with no corrected statistics
    and no word, exit 0; a file that is not UTF-8 was a traceback. Now it is an error naming the
    file and what it lacks, with the command that writes it again, which works as printed."""
    import shlex

    sampled(run)
    stories = run / "stories.csv"
    good = stories.read_bytes()
    if damage == "columns renamed":
        header, rest = good.split(b"\n", 1)
        stories.write_bytes(header.replace(b"mean_nr", b"Mean NR") + b"\n" + rest)
    elif damage == "not UTF-8":
        stories.write_bytes(good.replace(b"id", b"\xe9d", 1))
    else:
        stories.write_bytes(b"")
    r = run_here("audit", "report", run)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{stories}" in r.stderr and "the corrected statistics read" in r.stderr, r.stderr
    advice = shlex.split(r.stderr.split("write it again from positions.jsonl: ")[1].strip())
    assert advice[:2] == ["tension-run", "metrics"]
    assert run_here(*advice[1:]).returncode == 0
    assert stories.read_bytes() == good
    assert run_here("audit", "report", run).returncode == 0


@pytest.mark.parametrize("csv_file", ["empty", "missing", "no label column"])
def test_a_label_csv_that_cannot_be_read_is_not_counted_as_a_bad_row(run, tmp_path, csv_file):
    """`audit import` of an empty or missing file said "1 bad row(s) not imported (fix them …)":
    no row was read. The file's own error is said as it is, with nothing imported."""
    sampled(run)
    p = tmp_path / "labels.csv"
    if csv_file == "empty":
        p.write_text("")
    elif csv_file == "no label column":
        p.write_text("key,verdict\nk1,matches\n")
    r = run_here("audit", "import", run, p, "--annotator", "ann")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"error: {p}" in r.stderr
    assert "bad row" not in r.stdout + r.stderr
    assert f"nothing imported: {p} could not be read (above)" in r.stdout, r.stdout
