"""Per-story intervals on the user's paths (issue 27, docs/metrics.md 1.6): `score` on
the test server (its in-process door: the statistics are the subject, not the wire) writes them into stories.csv and report.md; `metrics` recomputes
them from a run folder or from saved curves carrying their verdict counts; `compare`
gives each pair of stories its difference with an interval; the settings are flags,
config keys and Python keywords, seeded and reproducible."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

import tension
from tension.core.cli import main
from tension.testing.corpus import make_corpus

STATS = ["mean_nr", "late_nr", "retain", "convergence", "ir30", "ir60", "ir120"]
OLD_HEADER = ["id", "group", "n_positions", *STATS, "nan_reasons"]


def rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text().splitlines()))


def score(server, tmp: Path, name: str, *extra: str, judge: str = "test-judge") -> Path:
    corpus = tmp / "corpus.jsonl"
    if not corpus.exists():
        make_corpus(corpus, 3, seed=11)
    out = tmp / name
    rc = main(["score", str(corpus), "--out", str(out), "--base-url", server.base_url, "--model", "test-gen",
               "--judge-model", judge, "--endings", "6", "--seed", "5", "--no-progress", "--cache",
               str(tmp / "cache"), *extra])
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from tension.testing.inprocess import InProcessServer

    tmp = tmp_path_factory.mktemp("intervals")
    with InProcessServer(["test-gen", "test-judge"]).serving() as srv:
        a = score(srv, tmp, "a")
        b = score(srv, tmp, "b", judge="test-gen")  # another judge: other verdicts on the same endings
        none = score(srv, tmp, "none", "--interval-resamples", "0")
    return tmp, a, b, none


def test_score_writes_an_interval_beside_every_statistic(run):
    _, a, _, _ = run
    header = (a / "stories.csv").read_text().splitlines()[0].split(",")
    assert header[:len(OLD_HEADER)] == OLD_HEADER  # the columns before keep their order
    intervals = [f"{s}_{e}" for s in STATS for e in ("lo", "hi")]
    assert header[len(OLD_HEADER):len(OLD_HEADER) + len(intervals)] == intervals
    comparable = [f"{s}_comparable" for s in STATS[2:]]  # issue 57's, appended after them
    assert header[len(OLD_HEADER) + len(intervals):] == comparable + [f"{s}_{e}" for s in comparable
                                                                       for e in ("lo", "hi")]
    positions = [json.loads(line) for line in (a / "positions.jsonl").read_text().splitlines()]
    for r in rows(a / "stories.csv"):
        for s in STATS:
            if r[s] == "":
                assert r[f"{s}_lo"] == r[f"{s}_hi"] == ""
                continue
            lo, v, hi = float(r[f"{s}_lo"]), float(r[s]), float(r[f"{s}_hi"])
            assert lo <= v <= hi, (r["id"], s)
        # six endings a position: the mean no-rate is known to about ±1.96·√(p(1−p)/6)/√m
        ps = [p for p in positions if p["id"] == r["id"]]
        width = float(r["mean_nr_hi"]) - float(r["mean_nr_lo"])
        se = math.sqrt(sum(p["no_rate"] * (1 - p["no_rate"]) / p["n_endings"] for p in ps)) / len(ps)
        assert 2.5 * se < width < 5.5 * se, (width, se)
    cfg = json.loads((a / "run.json").read_text())["config"]
    assert cfg["interval_resamples"] == 1000 and cfg["interval_seed"] == 0


def test_report_md_shows_each_story_with_its_intervals(run):
    _, a, _, none = run
    text = (a / "report.md").read_text()
    assert "## Stories, with 95% intervals over their own verdicts" in text
    assert "not the choice of story, model or prompt" in text
    r = rows(a / "stories.csv")[0]
    cell = f"{float(r['mean_nr']):.3f} [{float(r['mean_nr_lo']):.3f}, {float(r['mean_nr_hi']):.3f}]"
    line = next(x for x in text.splitlines() if x.startswith(f"| {r['id']} |"))
    assert cell in line
    assert "No per-story intervals (`--interval-resamples 0`)" in (none / "report.md").read_text()


def test_metrics_on_a_run_folder_gives_the_same_intervals_and_the_seed_moves_them(run, tmp_path):
    _, a, _, none = run
    assert main(["metrics", str(a), "--out", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m" / "stories.csv").read_bytes() == (a / "stories.csv").read_bytes()
    assert main(["metrics", str(a), "--out", str(tmp_path / "s"), "--interval-seed", "3"]) == 0
    moved, same = rows(tmp_path / "s" / "stories.csv"), rows(a / "stories.csv")
    assert [[r[c] for c in OLD_HEADER] for r in moved] == [[r[c] for c in OLD_HEADER] for r in same]
    assert [r["mean_nr_lo"] for r in moved] != [r["mean_nr_lo"] for r in same]
    for r in rows(none / "stories.csv"):
        assert all(r[f"{s}_{e}"] == "" for s in STATS for e in ("lo", "hi"))


def test_metrics_on_saved_curves_with_and_without_counts(tmp_path, capsys):
    curves = tmp_path / "curves.jsonl"
    with_counts = {"id": "c", "group": "g", "x": [0.1, 0.3, 0.5, 0.7, 0.9], "y": [0.9, 0.5, 0.8, 0.6, 0.7],
                   "n_endings": [10, 10, 10, 20, 10], "n_match": [1, 5, 2, 8, 3]}
    plain = {"id": "p", "x": [0.1, 0.5, 0.9], "y": [0.4, 0.5, 0.6]}
    curves.write_text(json.dumps(with_counts) + "\n" + json.dumps(plain) + "\n")
    assert main(["metrics", str(curves), "--out", str(tmp_path / "o"), "--interval-resamples", "500"]) == 0
    got = {r["id"]: r for r in rows(tmp_path / "o" / "stories.csv")}
    assert float(got["c"]["mean_nr_lo"]) < float(got["c"]["mean_nr"]) < float(got["c"]["mean_nr_hi"])
    assert got["p"]["mean_nr_lo"] == got["p"]["mean_nr_hi"] == ""  # no counts, no interval
    r = tension.metrics(curves, out=tmp_path / "api", interval_resamples=500)
    assert r.computed.intervals.lo.shape == (2, 7)
    # the API table holds the computed value; the CSV its 10-digit text (docs/python.md)
    assert r.stories.records()[0]["mean_nr_lo"] == pytest.approx(float(got["c"]["mean_nr_lo"]), abs=1e-9)


@pytest.mark.parametrize("change, field, words", [
    ({"n_match": [1, 5, 2, 8]}, "n_match", "expected 5 counts"),
    ({"n_match": [1, 5, 2, 21, 3]}, "n_match[3]", "in [0, n_endings = 20]"),
    ({"n_endings": [10, 10, -1, 20, 10]}, "n_endings[2]", "expected a count >= 0"),
    ({"y": [0.9, 0.5, 0.8, 0.6, 0.75]}, "y[4]", "expected 1 − n_match/n_endings = 0.7"),
    ({"n_endings": None}, "n_endings", "beside `n_match`"),
])
def test_bad_counts_are_an_error_naming_the_line_and_field(tmp_path, capsys, change, field, words):
    good = {"id": "ok", "x": [0.1, 0.5], "y": [0.5, 0.5], "n_endings": [2, 2], "n_match": [1, 1]}
    bad = {"id": "bad", "x": [0.1, 0.3, 0.5, 0.7, 0.9], "y": [0.9, 0.5, 0.8, 0.6, 0.7],
           "n_endings": [10, 10, 10, 20, 10], "n_match": [1, 5, 2, 8, 3], **change}
    bad = {k: v for k, v in bad.items() if v is not None}
    curves = tmp_path / "curves.jsonl"
    curves.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    rc = main(["metrics", str(curves), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 1 and "curves.jsonl:2" in err and f"`{field}`" in err and words in err, err
    assert [r["id"] for r in rows(tmp_path / "o" / "stories.csv")] == ["ok"]  # the rest is computed


@pytest.mark.parametrize("flag, value", [("--interval-resamples", "-1"), ("--interval-resamples", "100001"),
                                         ("--interval-seed", "-2"), ("--interval-seed", "x")])
def test_bad_interval_flags_are_usage_errors(tmp_path, tension_run, flag, value):
    curves = tmp_path / "c.jsonl"
    curves.write_text(json.dumps({"id": "a", "x": [0.5], "y": [0.5]}) + "\n")
    r = tension_run("metrics", str(curves), "--out", str(tmp_path / "o"), flag, value)
    assert r.returncode == 2 and flag in r.stderr
    assert not (tmp_path / "o").exists()


def test_compare_gives_each_story_its_difference_with_an_interval(run, tmp_path, capsys):
    _, a, b, _ = run
    assert main(["compare", str(a), str(b), "--out", str(tmp_path), "--resamples", "200"]) == 0
    printed = capsys.readouterr().out
    assert "Per pair of stories, B − A with its 95% interval over both runs' own verdicts" in printed
    sa, sb = {r["id"]: r for r in rows(a / "stories.csv")}, {r["id"]: r for r in rows(b / "stories.csv")}
    diffs = rows(tmp_path / "compare_stories.csv")
    assert len(diffs) == 3 * len(STATS)
    for d in diffs:
        if d["diff"] == "":
            continue
        assert float(d["diff"]) == pytest.approx(float(sb[d["pair"]][d["statistic"]])
                                                 - float(sa[d["pair"]][d["statistic"]]), abs=1e-8)
        assert float(d["lo"]) <= float(d["diff"]) <= float(d["hi"])
        assert d["significant"] == str(int(float(d["lo"]) > 0 or float(d["hi"]) < 0))
    # the difference's interval is wider than either story's own: both runs' sampling adds up
    mean = next(d for d in diffs if d["statistic"] == "mean_nr")
    r = sa[mean["pair"]]
    assert float(mean["hi"]) - float(mean["lo"]) > float(r["mean_nr_hi"]) - float(r["mean_nr_lo"])
    # a run against itself: every difference is 0, inside its interval, not significant
    c = tension.compare(a, a, resamples=200, interval_resamples=300, interval_seed=4).comparison
    assert c.interval_resamples == 300 and c.interval_seed == 4
    assert all(d.diff == 0 and d.lo <= 0 <= d.hi and not d.significant for d in c.stories if not math.isnan(d.lo))
    again = tension.compare(a, a, resamples=200, interval_resamples=300, interval_seed=4).comparison
    assert [(d.lo, d.hi) for d in again.stories] == [(d.lo, d.hi) for d in c.stories]
    none = tension.compare(a, b, resamples=200, interval_resamples=0).comparison
    assert all(math.isnan(d.lo) for d in none.stories)
