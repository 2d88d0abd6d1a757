"""`fairplay` over a stories file of no readable story (empty, every record bad): it was a
"complete" run (exit 1) whose record replaced the earlier run's in --out, and it printed the
earlier run's readers.jsonl as this run's output. It is a failed run now, as `score`'s is, and
the earlier readers and metrics stay."""

from __future__ import annotations

import json

import pytest
from fairplay_scripted import scripted, story_record, write_jsonl  # tests/

from tension.core.cli import main

ANEW = ("fairplay_run.json", "readers.partial.jsonl")  # each run's own, started anew (README, "Reruns are free")


@pytest.mark.in_process
@pytest.mark.parametrize("content", [b"", b'{"id": "x", "segments": ["a", "b"]}\n'])
def test_fairplay_of_no_readable_story_fails_and_keeps_the_earlier_run(server, tmp_path, capsys, content):
    server.respond(scripted)
    out = tmp_path / "out"
    argv = ["--out", str(out), "--reader-base-url", server.base_url, "--reader-model", "test-judge",
            "--readers", "gullible", "--schedule", "1,3", "--no-progress", "--resamples", "50", "--max-plots", "0",
            "--cache", str(tmp_path / "cache")]
    good = write_jsonl(tmp_path / "good.jsonl", [story_record("ok", generator=False)])
    assert main(["fairplay", str(good), *argv]) == 0, capsys.readouterr().err
    kept = {f.name: f.read_bytes() for f in out.iterdir() if f.is_file() and f.name not in ANEW}
    assert "readers.jsonl" in kept
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    capsys.readouterr()
    assert main(["fairplay", str(bad), *argv]) == 1
    said = capsys.readouterr()
    assert {f.name: f.read_bytes() for f in out.iterdir() if f.is_file() and f.name not in ANEW} == kept
    record = json.loads((out / "fairplay_run.json").read_text())
    assert (record["status"], record["error"]) == ("failed", "no story to read (1 unreadable, see above)")
    assert said.err.endswith("error: no story to read (1 unreadable, see above)\n")
    assert "rerun the same command" not in said.err and "readers:" not in said.out
