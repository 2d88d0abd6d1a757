"""A tidy tree: no run's outputs are committed (a `score` or `fairplay` run in the
checkout writes stories.csv, positions.jsonl, run.json, … where it ran), and
.gitignore keeps them out, except the inputs under the folders that hold some on
purpose (fixtures, snapshots, examples)."""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# what the commands write into their --out folder (or the current one)
RUN_OUTPUTS = ("stories.csv", "groups.csv", "positions.jsonl", "run.json", "fairplay_run.json",
               "readers.jsonl", "table6.csv", "table18.csv", "*.partial.jsonl")
ALLOWED = ("tests/fixtures/", "tests/snapshots/", "examples/")


def git(*args: str, ok: tuple[int, ...] = (0,)) -> list[str]:
    """The output lines of a git command in the checkout; skips where there is none."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if done.returncode not in ok:
        pytest.skip(f"not a git checkout: {done.stderr.strip()}")
    return done.stdout.splitlines()


def is_run_output(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, p) for p in RUN_OUTPUTS) and not path.startswith(ALLOWED)


def test_no_run_outputs_are_committed():
    assert [p for p in git("ls-files") if is_run_output(p)] == []


def test_gitignore_keeps_run_outputs_out_but_not_the_inputs_that_look_alike():
    outputs = ["stories.csv", "groups.csv", "report.md", "run.json", "positions.jsonl", "fairplay_run.json",
               "readers.jsonl", "table6.csv", "out/x.partial.jsonl", "runs/r1/run.json", "some-run/positions.jsonl"]
    kept = ["README.md", "docs/report.md", "tests/fixtures/run.json", "tests/snapshots/score/positions.jsonl",
            "examples/positions.jsonl", "examples/stories.csv"]
    ignored = set(git("check-ignore", "--no-index", *outputs, *kept, ok=(0, 1)))
    assert ignored == set(outputs)


def test_no_committed_file_is_one_gitignore_ignores():
    assert git("ls-files", "--cached", "--ignored", "--exclude-standard") == []
