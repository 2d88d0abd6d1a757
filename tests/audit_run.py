"""A finished score run to audit (issue 60): scored on the test server's in-process door, with
its own cache, by the CLI's `main()` in this process (tests/core/test_audit.py and the view's
audit tests, tests/view/test_audit_*.py)."""

from __future__ import annotations

import csv
from pathlib import Path

from tension.core.inputs import labels as lab
from tension.testing.cli import run_here
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer


def scored_run(root: Path, stories: int = 4, endings: int = 5) -> Path:
    """ROOT/run: `stories` stories of two groups, `endings` endings a position; ROOT/cache its cache."""
    corpus = make_corpus(root / "corpus.jsonl", stories, seed=7)
    home = {"HOME": str(root / "home"), "XDG_CACHE_HOME": str(root / "home" / ".cache"), "OPENAI_API_KEY": None}
    with InProcessServer(["test-gen", "test-judge"]).serving() as srv:
        done = run_here("score", corpus, "--out", root / "run", "--base-url", srv.base_url, "--model", "test-gen",
                        "--judge-model", "test-judge", "--endings", endings, "--cache", root / "cache",
                        "--no-progress", "--no-report", env=home)
    assert done.returncode == 0, done.stderr
    return root / "run"


def sampled(run: Path, size: int = 24) -> lab.Sample:
    r = run_here("audit", "sample", run, "--size", size, "--shared", 4, "--seed", 2)
    assert r.returncode == 0, r.stderr
    return lab.read_sample(run)


def truth(it: lab.SampleItem, i: int) -> str:
    """People's answer: the judge's, but wrong on every fifth item and unsure on every seventh."""
    said = "does-not-match" if it.judge != "match" else "matches"
    if i % 5 == 0:
        said = "matches" if said == "does-not-match" else "does-not-match"
    return "cant-tell" if i % 7 == 3 else said


def write_csv(out: Path, rows: list[dict]) -> None:
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
