"""fairplay's bar gives the time left from its first answer, as score's does (issue 61,
L3 of ../shared/reviews/external-servers-2026-12-07.md: "fairplay showed none either";
core/run/progress.py). Its units take different numbers of answers: a reader's value
one, the know-it-all's at checkpoint c its K continuations written to the last paragraph
and their K verdicts, K × (L − c + 1), so the answers still to come are counted per
unit. The server answers each request after a delay, one at a time."""

from __future__ import annotations

import json
import re

from fairplay_scripted import K, L, scripted, story_record, write_jsonl

from tension.core.cli import main

SCHEDULE = (1, 3, 5)
# every answer of the run: 3 gullible values, and the know-it-all's at each checkpoint
ANSWERS = len(SCHEDULE) + sum(K * (L - c + 1) for c in SCHEDULE)


def _fairplay(srv, tmp_path, *more: str) -> int:
    stories = write_jsonl(tmp_path / "who.jsonl", [story_record("s1")])
    return main(["fairplay", str(stories), "--out", str(tmp_path / "fp"), "--base-url", srv.base_url,
                 "--model", "test-judge", "--readers", "gullible,know_it_all", "--k", str(K),
                 "--schedule", ",".join(map(str, SCHEDULE)), "--cache", str(tmp_path / "cache"),
                 "--max-plots", "0", "--resamples", "50", *more])


def test_fairplays_bar_gives_the_time_left_from_its_first_answer(server, tmp_path, capsys):
    server.respond(scripted)
    server.delay = 0.04
    server.max_concurrent = 1
    assert _fairplay(server, tmp_path) == 0, capsys.readouterr().err
    bar = capsys.readouterr().err.replace("\r", "\n")
    assert re.search(r"\d+ answers, ≈ \d+ (s|min) left", bar), bar[-2000:]  # on the bar while the run went
    eta = json.loads((tmp_path / "fp" / "fairplay_run.json").read_text())["http"]["eta"]
    assert eta is not None and eta["answers_per_s"] > 0
    # what was in and what was still to come add up to the run's answers, whenever it was measured
    sent = server.count(path="/v1/chat/completions")  # a first paragraph's K continuations: one request
    assert eta["answers"] + eta["answers_left"] == ANSWERS == sent + len(SCHEDULE) * (K - 1)


def test_a_cached_rerun_measures_no_pace(server, tmp_path, capsys):
    server.respond(scripted)
    assert _fairplay(server, tmp_path, "--no-progress") == 0, capsys.readouterr().err
    (tmp_path / "fp" / "fairplay_run.json").unlink()
    assert _fairplay(server, tmp_path, "--no-progress") == 0
    rec = json.loads((tmp_path / "fp" / "fairplay_run.json").read_text())
    assert rec["http"]["attempts"] == 0 and rec["http"]["eta"] is None
