"""The smaller findings of the API's new-user review (A2, A3, A15, A21), each on
the path a user takes: paths as Path objects in every path keyword, a run that
scored nothing saying so in its result, Ctrl-C under ``asyncio.run`` with the
blocking call, and run.json's argv of an API run.

A CLI run's argv is checked in this process (the `tension_run` fixture sets
sys.argv as the console script would). Two stay processes: the argv of an API run
pasted into a shell (`python -c` in a fresh interpreter, elsewhere: it must
reproduce the run on its own), and a user's script stopped by Ctrl-C (a signal)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tension
from tension.testing.corpus import make_corpus


def settings(server, cache: Path) -> dict:
    return {"base_url": server.base_url, "model": "test-gen", "endings": 3, "seed": 1, "cache": cache,
            "progress": False, "report": False}


@pytest.mark.in_process
def test_every_path_keyword_takes_a_path_object(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=2)
    cfg = tmp_path / "run.toml"
    cfg.write_text("endings = 3\n")
    r = tension.score(corpus, out=tmp_path / "a", config=cfg, **settings(server, tmp_path / "cache"))
    assert r.status == "complete"
    assert r.run["cache"]["path"] == str(tmp_path / "cache")
    e = tension.estimate(corpus, gen_tok_s=100.0, judge_req_s=10.0, **settings(server, tmp_path / "cache"))
    assert e.exit_status == 0


@pytest.mark.in_process
def test_a_shard_that_holds_no_story_fails_and_says_why(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=2)
    from tension.core.llm.replicas import in_shard

    sid = json.loads(corpus.read_text().splitlines()[0])["id"]
    empty = "1/2" if in_shard(sid, 0, 2) else "0/2"
    r = tension.score(corpus, out=tmp_path / "a", shard=empty, **settings(server, tmp_path / "cache"))
    assert (r.status, r.exit_status) == ("failed", 1)
    assert r.summary.error is not None and f"shard {empty} holds none of the 1 stories" in r.summary.error
    assert r.run["status"] == "failed" and r.run["error"] == r.summary.error
    assert server.count() == 0


@pytest.mark.in_process
def test_every_story_skipped_fails_and_says_why(server, tmp_path):
    tiny = tmp_path / "tiny.jsonl"
    tiny.write_text(json.dumps({"id": "t", "text": "Too short to score."}) + "\n")
    r = tension.score(tiny, out=tmp_path / "a", **settings(server, tmp_path / "cache"))
    assert (r.status, r.exit_status) == ("failed", 1)
    assert r.summary.error.startswith("no story to score (1 skipped by the word filter")


BROKEN = {  # every record of the file unreadable, as a re-saved or re-exported corpus can be
    "utf16.csv": lambda: "id,text\nx,It rained.\n".encode("utf-16"),
    "empty.jsonl": lambda: b"",
    "header.csv": lambda: b"ID;Story\nx;It rained.\n",
    "bad.jsonl": lambda: b'{"id": 1, "text": "It rained."}\n{"text": "It poured."}\n',
}


@pytest.mark.in_process
@pytest.mark.parametrize("name", list(BROKEN))
def test_a_corpus_of_no_readable_story_fails_and_keeps_the_earlier_outputs(server, tmp_path, name):
    # it was "complete" (exit 1) and wrote empty positions.jsonl and stories.csv over the earlier run in --out
    out = tmp_path / "out"
    good = tension.score(make_corpus(tmp_path / "c.jsonl", 1, seed=2), out=out, **settings(server, tmp_path / "c"))
    assert good.status == "complete"
    kept = {f: (out / f).read_bytes() for f in ("positions.jsonl", "stories.csv", "groups.csv")}
    assert kept["positions.jsonl"]
    broken = tmp_path / name
    broken.write_bytes(BROKEN[name]())
    r = tension.score(broken, out=out, **settings(server, tmp_path / "c"))
    n = len(r.summary.input_errors)
    assert (r.status, r.exit_status, r.run["status"]) == ("failed", 1, "failed")
    assert n >= 1 and r.summary.error == f"no story to score ({n} unreadable, see above; 0 skipped by the word filter)"
    assert {f: (out / f).read_bytes() for f in kept} == kept


def test_run_json_argv_of_an_api_run_is_a_call_that_reproduces_it(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=4)
    r = tension.score(corpus, out=tmp_path / "api", api_key="sk-secret-1", **settings(server, tmp_path / "cache"))
    argv = r.run["argv"]
    assert argv[:2] == ["python", "-c"] and argv[2].startswith("import tension; tension.score("), argv
    assert "sk-secret-1" not in json.dumps(r.run) and "api_key" not in argv[2]
    # pasted into a shell (another out folder, in another working directory): the same run
    code = argv[2].replace(repr(str(tmp_path / "api")), repr(str(tmp_path / "again")))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = subprocess.run(f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}", shell=True, cwd=elsewhere,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (argv, p.stderr)
    for name in ("positions.jsonl", "stories.csv", "groups.csv"):
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name


@pytest.mark.in_process
def test_run_json_argv_of_a_cli_run_is_the_command_line(server, tmp_path, tension_run):
    """The CLI calls the API: its run.json argv stays the command typed (what
    "resume with the same command" repeats), not the API call it made."""
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    p = tension_run("score", corpus, "--out", tmp_path / "cli", "--base-url", server.base_url, "--model", "test-gen",
                    "--endings", "3", "--no-progress", "--no-report", "--cache", tmp_path / "cache")
    assert p.returncode == 0, p.stderr
    cmd = p.args  # the command line as sys.argv held it: ["tension-run", "score", ...]
    assert json.loads((tmp_path / "cli" / "run.json").read_text())["argv"] == cmd


def test_the_first_ctrl_c_under_asyncio_run_stops_the_blocking_call(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=8)
    server.delay = 0.3  # a run of many seconds
    script = tmp_path / "main.py"
    script.write_text(textwrap.dedent(f"""
        import asyncio, sys, time
        import tension

        async def main():
            print("started", flush=True)
            tension.score({str(corpus)!r}, out={str(tmp_path / "out")!r}, base_url={server.base_url!r},
                          model="test-gen", endings=6, seed=1, cache={str(tmp_path / "cache")!r}, progress=False,
                          report=False)

        t0 = time.monotonic()
        try:
            asyncio.run(main())
            print("completed", time.monotonic() - t0, flush=True)
        except KeyboardInterrupt:
            print("interrupted", time.monotonic() - t0, flush=True)
            sys.exit(130)
    """))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "started"
        # wait until the run has sent something, then one Ctrl-C
        import time
        deadline = time.monotonic() + 60
        while server.count() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()  # reaped and its pipes closed, so nothing of it reaches the next test
    assert p.returncode == 130, (out, err)
    assert out.startswith("interrupted"), out
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["status"] == "interrupted"



def _blocking_call_under_asyncio_run(tmp_path: Path, setup: str, make: str) -> list[str]:
    """What a script prints that, after `setup`, calls ``run_blocking(make)`` in a coroutine
    run by ``asyncio.run``: "interrupted" where the call raised KeyboardInterrupt. The
    coroutine `work()` would last 20 s, and prints "work completed" if it does."""
    script = tmp_path / "main.py"
    script.write_text(textwrap.dedent("""
        import asyncio, os, signal, threading, time
        from tension.core.run.blocking import run_blocking

        async def work():
            await asyncio.sleep(20)
            print("work completed", flush=True)

    """) + textwrap.dedent(setup) + textwrap.dedent(f"""
        async def main():
            run_blocking({make})

        try:
            asyncio.run(main())
            print("returned")
        except KeyboardInterrupt:
            print("interrupted")
    """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    return p.stdout.split() or [p.stderr]


def test_a_ctrl_c_while_the_caller_comes_back_from_starting_the_work_stops_it(tmp_path):
    """The first Ctrl-C under ``asyncio.run`` stops the blocking call even when it lands
    before the caller's thread is back in the wait (a loaded machine: the work's thread
    runs its imports and first requests meanwhile). The work used to begin at once, so
    such a Ctrl-C reached asyncio's own handler, which only cancels the blocked main
    task: the run went on to its end, then KeyboardInterrupt (the spec above failed so
    on loaded machines, run.json "complete"). Here the caller's thread is held 0.5 s
    after the start, and the work sends the Ctrl-C as it begins."""
    assert _blocking_call_under_asyncio_run(tmp_path, """
        start = threading.Thread.start
        def start_then_lag(self):  # the caller's thread back late from the start
            start(self)
            time.sleep(0.5)
        threading.Thread.start = start_then_lag

        def make():
            os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C as the work begins
            return work()
    """, "make") == ["interrupted"]


def test_a_ctrl_c_another_thread_received_stops_the_blocking_call(tmp_path):
    """The first Ctrl-C under ``asyncio.run`` stops the blocking call when the kernel hands
    it to another thread than the caller's (POSIX lets it; the caller's thread blocks it
    here, so it must): its handler runs only when the caller's thread next runs Python
    code, and a caller asleep in the wait slept on to the run's end, then raised
    KeyboardInterrupt, the record "complete" (the first spec of this file failed so, 1 in
    30 on a loaded machine)."""
    assert _blocking_call_under_asyncio_run(tmp_path, """
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # a thread that takes signals
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # the caller's, and the work's thread's

        def make():
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()  # a Ctrl-C once the work runs
            return work()
    """, "make") == ["interrupted"]


@pytest.mark.in_process
def test_out_on_the_cache_folder_is_refused_by_name(server, tmp_path):
    """N14 from the API: `out` equal to (or inside) the cache folder is a ConfigError
    naming both, before any work, as the CLI's --out."""
    import pytest

    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=2)
    cache = tmp_path / "cache"
    for out in (cache, cache / "run"):
        with pytest.raises(tension.ConfigError, match=r"the cache folder .*cache"):
            tension.score(corpus, out=out, **settings(server, cache))
        assert not (out / "run.json").exists()
    with pytest.raises(tension.ConfigError, match="the cache folder"):
        tension.fairplay(corpus, out=cache, base_url=server.base_url, reader_model="test-gen", cache=str(cache))


@pytest.mark.in_process
def test_out_a_file_is_refused_by_name_in_every_verb(server, tmp_path):
    """N15 from the API: `out` an existing file is a ConfigError naming it (not
    `File exists`), in metrics, compare and fairplay_metrics as in score."""
    import pytest

    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=2)
    a = tension.score(corpus, out=tmp_path / "a", **settings(server, tmp_path / "cache"))
    assert a.status == "complete"
    afile = tmp_path / "afile"
    afile.write_text("x")
    calls = {"score": lambda: tension.score(corpus, out=afile, **settings(server, tmp_path / "cache")),
             "metrics": lambda: tension.metrics(tmp_path / "a", out=afile),
             "compare": lambda: tension.compare(tmp_path / "a", tmp_path / "a", out=afile),
             "fairplay_metrics": lambda: tension.fairplay_metrics(
                 Path(__file__).resolve().parents[2] / "examples" / "fairplay_readers.jsonl", out=afile,
                 progress=False, max_plots=0, resamples=10)}
    for verb, call in calls.items():
        with pytest.raises(tension.ConfigError, match=f"{afile}: exists and is not a folder"):
            call()
        assert afile.read_text() == "x", verb


def test_the_demo_scores_through_the_api_door(tmp_path, capsys):
    """One door per verb: `demo` scores with `tension.score` as `score` does (not the
    pipeline's own blocking twin), so it gets the API's result: a cached demo
    starts no server, draws its curve from the computed statistics, and its record
    keeps the command line."""
    from importlib.resources import files

    from tension.core.cli import main
    from tension.core.serving.profiles import DEMO_SCORE_SETTINGS
    from tension.core.serving.settings import MODEL_ID
    from tension.testing.openai_server import LoopbackServer

    story = str(files("tension.core").joinpath("data/demo_story.jsonl"))
    cache = tmp_path / "cache"
    with LoopbackServer(model=MODEL_ID) as srv:  # the answers the demo will find in the cache
        first = tension.score(story, out=tmp_path / "first", cache=cache, progress=False,
                              **{**DEMO_SCORE_SETTINGS, "base_url": srv.base_url, "model": MODEL_ID})
    assert first.status == "complete"
    out = tmp_path / "demo"
    assert main(["demo", "--cache", str(cache), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "every answer of the demo is in the cache" in captured.err
    assert "requests sent 0 generation, 0 judge" in captured.out
    assert (out / "curve.png").stat().st_size > 5000
    assert (out / "stories.csv").read_bytes() == (tmp_path / "first" / "stories.csv").read_bytes()
    assert json.loads((out / "run.json").read_text())["argv"][:2] != ["python", "-c"]
