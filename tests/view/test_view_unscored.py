"""Stories without a position (issue 36, O8): stories.csv lists them ("no positions"),
and so do the view's corpus page and its runs page, with the reason, rather than
counting fewer stories than the run had.

In this process: the score run by the CLI's `main()` (`tension_run`) and the view
served from a thread (view_fixtures.ViewHere, as a notebook's `result.view()` serves
it), each in the reduced environment the test gives (every other variable unset while
it runs). The subject is the pages, not a process."""

from __future__ import annotations

import csv
import json
import os

from view_fixtures import ViewHere

from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

SHORT = {"short-1": "Only one sentence here.", "short-2": "Two words."}


def test_stories_without_positions_are_on_the_corpus_page_with_their_reason(tmp_path, tension_run):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=5)
    with corpus.open("a") as f:
        for sid, text in SHORT.items():
            f.write(json.dumps({"id": sid, "text": text}) + "\n")
    run = tmp_path / "run"
    # the command's whole environment, as the process had it: every other variable unset
    env = {**dict.fromkeys(os.environ), "HOME": str(tmp_path / "home"),
           "XDG_CACHE_HOME": str(tmp_path / "home" / ".cache"), "PATH": "/usr/bin:/bin"}
    with LoopbackServer(model=["test-gen"]) as srv:
        done = tension_run("score", corpus, "--out", run, "--base-url", srv.base_url, "--model", "test-gen",
                           "--endings", "3", "--min-words", "0", "--cache", tmp_path / "cache", "--no-progress",
                           "--no-report", env=env)
    assert done.returncode in (0, 1), done.stderr
    rows = {r["id"]: r for r in csv.DictReader((run / "stories.csv").read_text().splitlines())}
    unscored = {sid for sid, r in rows.items() if r["n_positions"] == "0"}
    assert unscored == set(SHORT), rows  # the ground of the finding
    v = ViewHere(run, env=env)
    try:
        status, page = v.json("api/r0/corpus.json")
        assert status == 200
        assert {s["id"] for s in page["stories"]} | {s["id"] for s in page["unscored"]} == set(rows)
        assert {s["id"]: s["reason"] for s in page["unscored"]} == {sid: rows[sid]["nan_reasons"] for sid in SHORT}
        assert all("no positions" in s["reason"] for s in page["unscored"])
        status, html = v.get("r0/index.html")
        assert status == 200 and all(sid.encode() in html for sid in SHORT)
        status, runs_page = v.get("index.html")
        assert b'"unscored":2' in runs_page
    finally:
        assert "Traceback" not in v.stop()
