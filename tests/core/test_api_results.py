"""What a verb returns and what a notebook shows of it (issue 38): the tables are
the statistics the pipeline computed, in memory (not the CSVs re-read: the
written files round to 10 digits, the tables do not), the files written the same
bytes; a result displays as an escaped HTML table, `plot()` gives the report's
figures, `view()` serves the run's view in the background until stopped. The results
are the subject, not the wire: `server` is the test server's in-process door."""

from __future__ import annotations

import json
import math
import urllib.request
from pathlib import Path

import pytest

import tension
from tension.core.api.tables import read_table
from tension.core.reports.metrics import compute, read_run_positions
from tension.testing.corpus import make_corpus

pytestmark = pytest.mark.in_process


def settings(server, tmp_path: Path) -> dict:
    return {"base_url": server.base_url, "model": "test-gen", "endings": 7, "seed": 1,
            "cache": str(tmp_path / "cache"), "progress": False, "report": False}


def exact_stats(run: Path) -> dict[str, float]:
    """Each story's mean no-rate as the kernels compute it, unrounded."""
    curves, _ = read_run_positions(run)
    stats, _ = compute(curves)
    return {c.id: float(v) for c, v in zip(curves, stats.mean_nr)}


def test_score_tables_are_the_computed_statistics_unrounded(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 4, seed=5)
    r = tension.score(corpus, out=tmp_path / "a", **settings(server, tmp_path))
    assert r.status == "complete"
    want = exact_stats(tmp_path / "a")
    got = {x["id"]: x["mean_nr"] for x in r.stories.records()}
    assert got == want  # 1/7 and its kin: the CSV holds 10 digits of them
    assert any(f"{v:.10g}" != repr(v) for v in want.values())
    # the tables have the columns and the ids, groups and counts of the files, which are unchanged
    for table, name in ((r.stories, "stories.csv"), (r.groups, "groups.csv")):
        written = read_table(tmp_path / "a" / name)
        assert written is not None and table.columns == written.columns and len(table) == len(written)
        assert table.path == str(tmp_path / "a" / name)
        for mine, theirs in zip(table.records(), written.records()):
            for k, v in mine.items():
                if isinstance(v, float):
                    assert theirs[k] == float(f"{v:.10g}"), (name, k)
                else:
                    assert theirs[k] == v, (name, k)


def test_metrics_tables_are_the_computed_statistics_unrounded(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=6)
    tension.score(corpus, out=tmp_path / "a", **settings(server, tmp_path))
    m = tension.metrics(tmp_path / "a", out=tmp_path / "m")
    assert {x["id"]: x["mean_nr"] for x in m.stories.records()} == exact_stats(tmp_path / "a")
    assert sum(g["n"] for g in m.groups.records() if g["statistic"] == "mean_nr") == 3


def test_a_result_shows_as_an_escaped_html_table(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=8)
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    rows[0]["id"], rows[0]["group"] = "<b>007</b>", "a&b"
    corpus.write_text("".join(json.dumps(x) + "\n" for x in rows))
    r = tension.score(corpus, out=tmp_path / "a", **settings(server, tmp_path))
    html = r._repr_html_()
    assert "<table" in html and "mean_nr" in html
    assert "&lt;b&gt;007&lt;/b&gt;" in html and "<b>007" not in html and "a&amp;b" in html
    assert "complete" in html  # the status above the table
    assert "<table" in r.stories._repr_html_() and "<table" in r.groups._repr_html_()
    failed = tension.score(corpus, out=tmp_path / "b", **{**settings(server, tmp_path),
                                                          "base_url": "http://127.0.0.1:9",
                                                          "cache": str(tmp_path / "empty"), "retries": 1, "retry_seconds": 1.0})
    assert failed.status == "failed" and "failed" in failed._repr_html_()


def test_plot_returns_the_reports_figures(server, tmp_path):
    from matplotlib.figure import Figure

    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=9)
    r = tension.score(corpus, out=tmp_path / "a", **settings(server, tmp_path))
    sid = r.stories.records()[1]["id"]
    fig = r.plot(sid)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.get_title() == sid and ax.get_xlabel() == "% of story revealed"
    lines = [line for line in ax.get_lines() if len(line.get_xdata())]
    assert len(lines) == 2 and all(line.get_visible() and not line.get_animated() for line in lines)
    assert isinstance(r.plot(), Figure)  # the first story's
    bars = r.plot(bars="nr")
    assert "no-rate" in bars.axes[0].get_title()
    with pytest.raises(tension.ConfigError, match="no story `nope`"):
        r.plot("nope")
    with pytest.raises(tension.ConfigError, match="bars"):
        r.plot(bars="xx")
    m = tension.metrics(tmp_path / "a", out=tmp_path / "m")
    assert m.plot(sid).axes[0].get_title() == sid


def test_view_serves_the_run_in_the_background_until_stopped(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=10)
    r = tension.score(corpus, out=tmp_path / "a", **settings(server, tmp_path))
    v = r.view(port=0)
    try:
        assert v.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(v.url, timeout=10) as resp:
            page = resp.read().decode()
        assert resp.status == 200 and "tension" in page.lower()
        port = int(v.url.rsplit(":", 1)[1].strip("/"))
        with pytest.raises(OSError):  # the port taken: raised here, not lost in the thread
            r.view(port=port)
    finally:
        v.stop()
    v.stop()  # idempotent
    with pytest.raises(OSError):
        urllib.request.urlopen(v.url, timeout=2)


def test_nan_only_where_a_statistic_is_undefined(server, tmp_path):
    pd = pytest.importorskip("pandas")
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=12)
    r = tension.score(corpus, out=tmp_path / "a", **settings(server, tmp_path))
    df = r.to_pandas()
    assert pd.api.types.is_integer_dtype(df["n_positions"].dtype)
    assert df["id"].map(type).eq(str).all() and df["group"].map(type).eq(str).all()
    for col in ("mean_nr", "late_nr"):
        assert not df[col].isna().any()
    g = r.groups.to_pandas()
    assert pd.api.types.is_integer_dtype(g["n"].dtype) and pd.api.types.is_integer_dtype(g["n_nan"].dtype)
    assert all(math.isnan(v) == (n < 2) for v, n in zip(g["sd"], g["n"]))


def test_fairplay_metrics_tables_are_the_computed_scores_unrounded(tmp_path):
    """The fair-play tables from memory too: the written file holds 10 digits."""
    f = tension.fairplay_metrics(Path(__file__).resolve().parents[2] / "examples" / "fairplay_readers.jsonl",
                                 out=tmp_path / "fp", progress=False, max_plots=0, resamples=50)
    assert f.exit_status == 0
    for table, name in ((f.stories, "stories.csv"), (f.groups, "groups.csv")):
        written = read_table(tmp_path / "fp" / name)
        assert written is not None and table.columns == written.columns and len(table) == len(written)
        unrounded = 0
        for mine, theirs in zip(table.records(), written.records()):
            for k, v in mine.items():
                if isinstance(v, float):
                    assert theirs[k] == float(f"{v:.10g}"), (name, k)
                    unrounded += f"{v:.10g}" != repr(v)
                else:
                    assert theirs[k] == v, (name, k)
        assert unrounded, name  # some statistic has more than 10 digits: the table is not the file re-read


def _the_file_holds(result, path: Path) -> None:
    """The result's record is the file's, key for key, and its typed header the very
    one the pipeline handed back (from memory: the file is not read again)."""
    assert result.run == json.loads(path.read_text(encoding="utf-8"))
    assert result.header is result.summary.record.header
    assert result.header.status == result.status and result.header.exit_status == result.run["exit_status"]


def test_the_run_record_is_the_pipelines_not_the_file_re_read(server, tmp_path):
    """Issue 38: each verb returns the record its run computed (a typed header and
    the body) and equal to what the file holds, for a complete and a failed run."""
    from tension.core.run.record import RunHeader

    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=4)
    r = tension.score(corpus, out=tmp_path / "a", **settings(server, tmp_path))
    assert r.status == "complete" and isinstance(r.header, RunHeader)
    _the_file_holds(r, tmp_path / "a" / "run.json")
    assert r.run["stories"]["kept"] == 2 and r.header.requests == r.summary.requests
    # the file changed after the run: the result is what the run wrote, not what the file now says
    (tmp_path / "a" / "run.json").write_text("{}")
    assert r.run["command"] == "score" and r.header.command == "score"
    failed = tension.score(corpus, out=tmp_path / "b", **{**settings(server, tmp_path),
                                                          "base_url": "http://127.0.0.1:9",
                                                          "cache": str(tmp_path / "empty"), "retries": 1,
                                                          "retry_seconds": 1.0})
    assert failed.status == "failed" and failed.header.error == failed.summary.error
    _the_file_holds(failed, tmp_path / "b" / "run.json")

    story = " ".join(["The keeper climbed the stairs and read the letter again by the lamp."] * 60)
    server.script("Write the story now.", lambda m, seed, i: story)
    g = tension.generate(Path(__file__).resolve().parents[2] / "examples" / "ideas.jsonl",
                         out=tmp_path / "stories.jsonl", base_url=server.base_url, model="test-gen", mode="vanilla",
                         progress=False, cache=str(tmp_path / "cache"))
    assert g.status == "complete" and g.header.command == "generate"
    _the_file_holds(g, tmp_path / "stories.run.json")


def test_the_fairplay_record_is_the_pipelines_not_the_file_re_read(server, tmp_path):
    from fairplay_scripted import K, scripted, story_record, write_jsonl  # tests/

    server.respond(scripted)
    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record("s1")])
    r = tension.fairplay(stories, out=tmp_path / "fp", base_url=server.base_url, reader_model="test-judge",
                         cache=str(tmp_path / "cache"), progress=False, k=K, schedule="1,3,5", seed=3,
                         max_plots=0, resamples=50, bootstrap_seed=1)
    assert r.status == "complete" and r.header.command == "fairplay"
    _the_file_holds(r, tmp_path / "fp" / "fairplay_run.json")
