"""The Python API (`import tension`, docs/python.md), used as a script and a
notebook use it: against the loopback server, from inside a running event loop,
awaited, and with bad keywords; its results typed, with to_pandas().

The CLI runs whose bytes the API must match run in this process (the `tension_run`
fixture). Two stay processes: `import tension` in a fresh interpreter (what it loads
is the subject), and a user's script (`python -c`) stopped by Ctrl-C (a signal)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

import tension
from tension.core.errors import ConfigError, TensionError
from tension.testing.corpus import make_corpus

OUTPUTS = ("positions.jsonl", "stories.csv", "groups.csv")


def settings(server, cache: Path) -> dict:
    return {"base_url": server.base_url, "model": "test-gen", "endings": 3, "seed": 1, "cache": str(cache),
            "progress": False, "report": False}


@pytest.fixture
def cli(tension_run):
    """`cli(*args)`: the command `tension-run ARGS`, run in this process."""
    return tension_run


@pytest.fixture
def cli_run(server, tmp_path, cli):
    """A corpus scored by the real CLI: (corpus, its --out folder)."""
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=28)
    r = cli("score", str(corpus), "--out", str(tmp_path / "cli"), "--base-url", server.base_url, "--model",
            "test-gen", "--endings", "3", "--seed", "1", "--cache", str(tmp_path / "cli-cache"), "--no-progress",
            "--no-report")
    assert r.returncode == 0, r.stderr
    return corpus, tmp_path / "cli"


def same_outputs(a: Path, b: Path) -> None:
    for name in OUTPUTS:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_score_called_inside_a_running_loop_writes_the_clis_bytes(server, tmp_path, cli_run):
    corpus, cli_out = cli_run

    async def cell():  # a notebook cell: code that runs inside a loop, calling the blocking form
        asyncio.get_running_loop()
        return tension.score(str(corpus), out=tmp_path / "api", **settings(server, tmp_path / "api-cache"))

    result = asyncio.run(cell())
    assert result.status == "complete" and result.exit_status == 0
    same_outputs(cli_out, tmp_path / "api")
    assert isinstance(result, tension.ScoreResult)
    assert len(result.stories) == 3 and result.stories.columns[0] == "id"
    assert {r["id"] for r in result.stories.records()} == {"story-000", "story-001", "story-002"}
    assert result.groups is not None and "group" in result.groups.columns
    assert result.run["status"] == "complete" and result.run["config"]["endings"] == 3
    assert result.summary.requests["generation"] > 0


def test_the_async_twin_writes_the_same_bytes(server, tmp_path, cli_run):
    corpus, cli_out = cli_run
    result = asyncio.run(tension.score_async(corpus, out=tmp_path / "api", **settings(server, tmp_path / "c2")))
    assert result.status == "complete"
    same_outputs(cli_out, tmp_path / "api")


@pytest.mark.in_process
def test_score_from_a_script_then_metrics_compare_estimate(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=5)
    a = tension.score(corpus, out=tmp_path / "a", **settings(server, tmp_path / "cache"))
    assert a.status == "complete"
    m = tension.metrics(tmp_path / "a", out=tmp_path / "m")
    assert isinstance(m, tension.MetricsResult) and m.exit_status == 0 and m.errors == []
    # the same statistics from the saved positions as the run computed
    assert (tmp_path / "m" / "stories.csv").read_bytes() == (tmp_path / "a" / "stories.csv").read_bytes()
    assert (m.stories.columns, m.stories.rows) == (a.stories.columns, a.stories.rows)
    c = tension.compare(tmp_path / "a", tmp_path / "a", out=tmp_path / "cmp", resamples=200)
    assert isinstance(c, tension.CompareResult) and c.comparison.n_pairs == 2
    assert (tmp_path / "cmp" / "compare.csv").read_text() == c.csv
    assert all(row.diff == 0 for row in c.comparison.rows)  # a run against itself
    e = tension.estimate(corpus, **settings(server, tmp_path / "cache"))
    assert isinstance(e, tension.EstimateResult) and e.exit_status == 0
    assert e.estimate.generation_to_send == 0  # all cached by the score run above
    assert "positions" in e.text


@pytest.mark.in_process
def test_to_pandas_gives_the_tables(server, tmp_path):
    pd = pytest.importorskip("pandas")
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=6)
    a = tension.score(corpus, out=tmp_path / "a", **settings(server, tmp_path / "cache"))
    df = a.to_pandas()
    assert isinstance(df, pd.DataFrame) and list(df["id"]) == [r["id"] for r in a.stories.records()]
    assert list(df.columns) == list(a.stories.columns)
    assert isinstance(a.groups.to_pandas(), pd.DataFrame)
    c = tension.compare(tmp_path / "a", tmp_path / "a", resamples=100)
    assert len(c.to_pandas()) == len(c.comparison.rows)
    e = tension.estimate(corpus, **settings(server, tmp_path / "cache"))
    assert e.to_pandas().shape[0] == 1


def test_to_pandas_without_pandas_names_the_extra(tmp_path, monkeypatch):
    from tension.core.api.tables import Table

    monkeypatch.setitem(sys.modules, "pandas", None)  # as if not installed
    t = Table(path="x.csv", columns=("id",), rows=(("a",),))
    with pytest.raises(ImportError, match=r"tension-run\[pandas\]"):
        t.to_pandas()


@pytest.mark.parametrize("kwargs, match", [
    ({"endingz": 3}, r"score\(\): unknown keyword `endingz`"),
    ({"endings": "three"}, r"score\(\): keyword `endings`: Expected `int`, got `str`"),
    ({"endings": 0}, r"endings: expected an integer >= 1, got 0"),
    ({"temperature": -1.0}, r"temperature"),
])
@pytest.mark.in_process
def test_bad_keywords_are_config_errors_naming_them(server, tmp_path, kwargs, match):
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    base = {"base_url": server.base_url, "model": "test-gen", "cache": str(tmp_path / "cache"), "progress": False}
    with pytest.raises(ConfigError, match=match):
        tension.score(corpus, out=tmp_path / "o", **{**base, **kwargs})
    assert not (tmp_path / "o").exists()  # found before any work
    assert server.count() == 0


def test_bad_keywords_of_the_other_verbs(tmp_path, cli):
    with pytest.raises(ConfigError, match=r"metrics\(\): unknown keyword `windw`"):
        tension.metrics("x.jsonl", out=tmp_path, windw=3)
    # a bad value names the keyword given (A22), as the CLI names its flag
    with pytest.raises(ConfigError, match=r"metrics\(\): keyword `window`: expected an odd integer"):
        tension.metrics("x.jsonl", out=tmp_path, window=4)
    with pytest.raises(ConfigError, match=r"metrics\(\): keyword `late_threshold`: "):
        tension.metrics("x.jsonl", out=tmp_path, late_threshold=2.0)
    with pytest.raises(ConfigError, match=r"fairplay_metrics\(\): keyword `early_steps`: "):
        tension.fairplay_metrics("r.jsonl", out=tmp_path, early_steps=[0])
    r = cli("metrics", "x.jsonl", "--out", str(tmp_path / "m"), "--window", "4")
    assert r.returncode == 2 and "--window: expected an odd integer" in r.stderr, r.stderr
    with pytest.raises(ConfigError, match=r"compare\(\): keyword `resamples`"):
        tension.compare("a", "b", resamples=-1)
    with pytest.raises(ConfigError, match=r"generate\(\): unknown keyword `moed`"):
        tension.generate("ideas.jsonl", out=tmp_path / "s.jsonl", base_url="http://127.0.0.1:9", moed="full")
    with pytest.raises(ConfigError, match=r"fairplay\(\): unknown keyword `readerz`"):
        tension.fairplay("s.jsonl", out=tmp_path, base_url="http://127.0.0.1:9", readerz=["gullible"])
    with pytest.raises(ConfigError, match=r"fairplay_metrics\(\): keyword `source`"):
        tension.fairplay_metrics("r.jsonl", out=tmp_path, source="nobody")
    with pytest.raises(ConfigError, match=r"estimate\(\): keyword `gen_tok_s`"):
        tension.estimate("c.jsonl", base_url="http://127.0.0.1:9", gen_tok_s=0)


def test_errors_are_the_clis_exceptions_not_system_exit(tmp_path):
    with pytest.raises(TensionError):  # a missing corpus: the InputError the CLI prints as one line
        tension.metrics(tmp_path / "missing.jsonl", out=tmp_path / "m")


@pytest.mark.in_process
def test_a_config_file_is_read_like_the_flag(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=7)
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'base_url = "{server.base_url}"\nmodel = "test-gen"\nendings = 2\nprogress = false\n'
                   f'report = false\ncache = "{tmp_path / "cache"}"\n')
    r = tension.score(corpus, out=tmp_path / "o", config=cfg)
    assert r.status == "complete" and r.run["config"]["endings"] == 2
    r = tension.score(corpus, out=tmp_path / "o2", config=cfg, endings=3)  # a keyword wins over the file
    assert r.run["config"]["endings"] == 3


@pytest.mark.in_process
def test_generate_and_fairplay_metrics(server, tmp_path):
    root = Path(__file__).resolve().parents[2]
    story = " ".join(["The keeper climbed the stairs and read the letter again by the lamp."] * 60)
    server.script("Write the story now.", lambda m, seed, i: story)  # a story long enough to keep
    g = tension.generate(root / "examples" / "ideas.jsonl", out=tmp_path / "stories.jsonl",
                         base_url=server.base_url, model="test-gen", mode="vanilla", progress=False,
                         cache=str(tmp_path / "cache"))
    assert isinstance(g, tension.GenerateResult) and g.status == "complete" and g.stories
    assert len(g.stories) == g.summary.stories and g.run["command"] == "generate"
    f = tension.fairplay_metrics(root / "examples" / "fairplay_readers.jsonl", out=tmp_path / "fp", progress=False,
                                 max_plots=0, resamples=100)
    assert isinstance(f, tension.FairPlayMetricsResult) and f.exit_status == 0
    assert f.stories is not None and len(f.stories) == f.summary.stories


def test_exports():
    expected = {"score", "estimate", "metrics", "compare", "fairplay", "fairplay_metrics", "generate"}
    assert expected | {f"{v}_async" for v in expected} <= set(tension.__all__)
    for name in tension.__all__:
        assert getattr(tension, name).__doc__, name
    assert all(asyncio.iscoroutinefunction(getattr(tension, f"{v}_async")) for v in expected)


def test_import_tension_loads_no_numba(tmp_path):
    r = subprocess.run([sys.executable, "-c", "import sys, tension; print('numba' in sys.modules, "
                        "'aiohttp' in sys.modules)"], capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["False", "False"], r.stderr


@pytest.mark.in_process
def test_json_of_estimate_is_written(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=8)
    e = tension.estimate(corpus, json=tmp_path / "e.json", **settings(server, tmp_path / "cache"))
    assert json.loads((tmp_path / "e.json").read_text())["positions"] == e.estimate.positions


INTERRUPTED_CELL = """
import asyncio, sys
import tension

async def cell():  # as a notebook cell: inside a running loop, no SIGINT handler of asyncio's
    tension.score(sys.argv[1], out=sys.argv[2], base_url=sys.argv[3], model="test-gen", endings=3, seed=1,
                  cache=sys.argv[4], progress=False, report=False)

asyncio.new_event_loop().run_until_complete(cell())
"""


def test_ctrl_c_during_a_blocking_call_inside_a_loop_stops_the_run_and_keeps_its_work(server, tmp_path):
    import signal
    import time

    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=30)
    server.delay = 0.2  # slow answers: the run is still going when Ctrl-C comes
    args = [sys.executable, "-c", INTERRUPTED_CELL, str(corpus), str(tmp_path / "o"), server.base_url,
            str(tmp_path / "cache")]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while server.count(kind="judge") < 3 and p.poll() is None:
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0 and "KeyboardInterrupt" in err, err
    assert (tmp_path / "o" / "run.json").is_file(), err
    assert json.loads((tmp_path / "o" / "run.json").read_text())["status"] == "interrupted"
    server.delay = 0.0
    again = tension.score(corpus, out=tmp_path / "o", **settings(server, tmp_path / "cache"))
    assert again.status == "complete" and sum(again.summary.cache_hits.values()) > 0  # nothing was lost


@pytest.mark.in_process
def test_fairplay_runs_the_readers_then_the_metrics(server, tmp_path):
    from fairplay_scripted import K, scripted, story_record, write_jsonl  # tests/

    server.respond(scripted)
    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record("s1"), story_record("s2", generator=False)])
    r = tension.fairplay(stories, out=tmp_path / "fp", base_url=server.base_url, reader_model="test-judge",
                         cache=str(tmp_path / "cache"), progress=False, k=K, schedule="1,3,5", seed=3,
                         max_plots=0, resamples=50, bootstrap_seed=1)
    assert isinstance(r, tension.FairPlayResult) and r.status == "complete" and r.exit_status == 0
    assert r.run["config"]["seed"] == 3  # `seed` is the readers' (--reader-seed)
    assert isinstance(r.metrics, tension.FairPlayMetricsResult)
    assert [row["id"] for row in r.metrics.stories.records()] == ["s1", "s2"]
    assert (tmp_path / "fp" / "readers.jsonl").is_file()
    with pytest.raises(ConfigError, match=r"fairplay\(\): keyword `k`"):
        tension.fairplay(stories, out=tmp_path / "fp2", base_url=server.base_url, k="many")
