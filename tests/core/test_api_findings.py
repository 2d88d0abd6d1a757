"""The smaller findings of the API's new-user review (A2, A3, A15, A21), each on
the path a user takes: paths as Path objects in every path keyword, a run that
scored nothing saying so in its result, Ctrl-C under ``asyncio.run`` with the
blocking call, and run.json's argv of an API run."""

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
    assert p.returncode == 130, (out, err)
    assert out.startswith("interrupted"), out
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["status"] == "interrupted"
