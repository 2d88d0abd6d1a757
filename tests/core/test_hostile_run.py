"""Hostile ground for the run, the cache and the disk (issue 25, docs/reliability.md
"Hostile ground: the run, the cache and the disk"): a broken setup's answers are
not replayed forever, the run record states the exit status the process returns,
full disks and read-only caches are said plainly, a stop during the outputs is
obeyed, and a reused --out is said. Every case runs the real CLI against the
loopback server (in process through `main`, or as a subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make_corpus
from fairplay_scripted import story_record, write_jsonl

from tension.core.cli import main

# --- finding 4 (11f): the record's exit status is the process's ---------------------


def _score_args(corpus: Path, out: Path, cache: Path, url: str, *flags: str) -> list[str]:
    return ["score", str(corpus), "--out", str(out), "--base-url", url, "--endings", "3", "--seed", "1",
            "--cache", str(cache), "--no-progress", *flags]


def _verb_with_a_model_typo(verb: str, server, tmp_path: Path) -> tuple[int, Path]:
    """`verb` run with a model the server lacks (a ConfigError found after the run
    opened); its record's path."""
    cache = str(tmp_path / "cache")
    if verb == "score":
        corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
        rc = main(_score_args(corpus, tmp_path / "out", tmp_path / "cache", server.base_url, "--model", "nosuch"))
        return rc, tmp_path / "out" / "run.json"
    if verb == "generate":
        ideas = tmp_path / "ideas.jsonl"
        ideas.write_text(json.dumps({"id": "i0", "idea": "A lighthouse keeper."}) + "\n")
        rc = main(["generate", str(ideas), "--out", str(tmp_path / "stories.jsonl"), "--mode", "vanilla",
                   "--base-url", server.base_url, "--model", "nosuch", "--cache", cache, "--no-progress"])
        return rc, tmp_path / "stories.run.json"
    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record("s1", generator=False)])
    rc = main(["fairplay", str(stories), "--out", str(tmp_path / "out"), "--reader-base-url", server.base_url,
               "--reader-model", "nosuch", "--cache", cache, "--readers", "gullible", "--no-progress"])
    return rc, tmp_path / "out" / "fairplay_run.json"


@pytest.mark.parametrize("verb", ["score", "generate", "fairplay"])
def test_a_config_error_after_the_run_opened_is_exit_2_in_the_record_too(verb, server, tmp_path, capsys):
    rc, record = _verb_with_a_model_typo(verb, server, tmp_path)
    err = capsys.readouterr().err
    assert rc == 2, err
    doc = json.loads(record.read_text())
    assert doc["status"] == "failed" and "nosuch" in doc["error"]
    assert doc["exit_status"] == rc  # one truth: the record holds the code the process returns
