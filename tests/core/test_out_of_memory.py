"""A run that ran out of memory (MemoryError, anywhere in its work) says so, and does not
tell the user that the same command continues: it meets the same limit (12-07 inputs
review: a novel-length story's prefixes took 12 GB, and the advice was to rerun)."""

from __future__ import annotations

import json

import pytest

from tension.testing.cli import run_here
from tension.testing.corpus import make_corpus

pytestmark = pytest.mark.in_process


def test_a_run_out_of_memory_says_so_and_what_a_rerun_needs(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=5)
    seen = []

    def judge_runs_out(msgs, n, seed):
        if any("literary judge" in str(m.get("content")) for m in msgs):
            seen.append(1)
            raise MemoryError
        return None

    server.respond(judge_runs_out)
    out = tmp_path / "out"
    r = run_here("score", corpus, "--out", out, "--base-url", server.base_url, "--model", "test-gen",
                 "--endings", 3, "--seed", 1, "--cache", tmp_path / "cache", "--no-progress")
    assert seen
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert "error: out of memory (MemoryError)" in r.stderr, r.stderr
    assert "rerun the same command to continue where this run stopped" not in r.stderr
    assert "--max-words" in r.stderr and "concurrency" in r.stderr and "completed answers are in the cache" in r.stderr
    record = json.loads((out / "run.json").read_text())
    assert record["status"] == "failed" and record["error"].startswith("out of memory (MemoryError)")
