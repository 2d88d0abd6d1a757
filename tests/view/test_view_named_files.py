"""The files a run record names (issue 36, S6): the view reads the corpus (and a
fair-play run's stories file) only when it is a regular file of a bounded size, and
keeps only the run's stories; a device, a FIFO or a huge file is a note, at once.

The view is served from a thread of this process (view_fixtures.ViewHere, the server
of a notebook's `result.view()`: the same runs, site and aiohttp app as `tension-run
view`): the subject is its notes. A view that blocked on one of these files would fail
here too, by urllib's 30 s timeout and then `stop`'s 20 s one."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from view_fixtures import ViewHere

from tension.core.view.named_files import MAX_BYTES
from tension.core.view.score_run import ScoreRun, Stores


def _with(run: Path, tmp_path: Path, record_name: str, key: str, value: str) -> Path:
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    record = json.loads((copy / record_name).read_text())
    record[key] = value
    (copy / record_name).write_text(json.dumps(record))
    return copy


def _named(kind: str, tmp_path: Path) -> str:
    if kind == "device":
        return "/dev/zero"
    if kind == "fifo":
        os.mkfifo(tmp_path / "corpus.fifo")  # nothing ever writes it: opening it would block
        return str(tmp_path / "corpus.fifo")
    if kind == "link to a device":
        (tmp_path / "corpus.jsonl").symlink_to("/dev/zero")
        return str(tmp_path / "corpus.jsonl")
    big = tmp_path / "big.jsonl"  # sparse: no disk taken
    with open(big, "wb") as f:
        f.truncate(MAX_BYTES + 1)
    return str(big)


KINDS = ["device", "fifo", "link to a device", "too large"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_corpus_that_is_no_bounded_regular_file_is_a_note_not_a_hang(runs, tmp_path, kind):
    run = _with(runs.a, tmp_path, "run.json", "corpus", _named(kind, tmp_path))
    v = ViewHere(run)
    try:
        status, story = v.json("api/r0/story/story-000.json")  # urllib's timeout: 30 s
        assert status == 200 and story["sentences"] is None
        note = next(n for n in story["notes"] if "the run's corpus" in n)
        assert ("not a regular file" in note) if kind != "too large" else ("more than the" in note), note
        status, endings = v.json(f"api/r0/endings/story-000/{story['positions'][0]['k']}.json")
        assert status == 200, endings  # (found by the keys positions.jsonl names: no text needed)
    finally:
        assert "Traceback" not in v.stop()


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_fairplay_stories_file_that_is_no_regular_file_is_a_note_not_a_hang(runs, tmp_path, kind):
    run = _with(runs.fp, tmp_path, "fairplay_run.json", "stories_file", _named(kind, tmp_path))
    v = ViewHere(run)
    try:
        status, c = v.json("api/r0/continuations/w1/3.json")
        assert status == 200 and c["cached"] is False and "not a regular file" in c["message"], c
    finally:
        assert "Traceback" not in v.stop()


def test_the_view_keeps_only_the_runs_stories_of_its_corpus(runs, tmp_path):
    record = json.loads((runs.a / "run.json").read_text())
    corpus = Path(record["corpus"])
    bigger = tmp_path / "corpus.jsonl"
    extra = [json.dumps({"id": f"other-{i}", "text": "Not in the run. " * 50}) for i in range(20)]
    bigger.write_text(corpus.read_text() + "\n".join(extra) + "\n")
    run = _with(runs.a, tmp_path, "run.json", "corpus", str(bigger))
    stores = Stores()
    try:
        r = ScoreRun(run, stores)
        assert set(r.texts()) == set(r.index) and not any(k.startswith("other-") for k in r.texts())
    finally:
        stores.close()
