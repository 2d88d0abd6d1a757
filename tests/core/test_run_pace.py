"""M4 of ../shared/reviews/external-servers-2026-12-02.md: on a server that serves one
request at a time, `score` at its defaults said nothing of how long the run would take
(over an hour on llama-cpp-python, 0.66 requests/s) and its bar sat at 0/33 all along.

Now the bar counts answers as they come, and once the first are in, a long run says
once on stderr how long it needs and, longer than --long-run-seconds, what to lower,
as a command that runs (each test here runs it as printed); a fast run and a run
with --no-progress say nothing. The server here is the test server taught llama.cpp
with one slot (`llama-server -np 1`): every request, a chunk of one ending or a verdict,
waits for the one before it."""

from __future__ import annotations

import json
import re
import shlex
import sys

from tension.core.cli import main
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

NEEDS = re.compile(r"note: this run needs ≈ [^:]+: ([\d.]+) answers \(endings and verdicts\) per second so far, "
                   r"([\d,]+) still to come(.*)")
# 24 endings and 24 verdicts for each of ~15 positions, 8 ms each: ≥ 5.8 s, said after 2 s
DELAY = 0.008
SLOW = ("--endings", "24", "--pct-min", "0.5", "--long-run-seconds", "1")


def _one_slot(delay: float) -> LoopbackServer:
    return LoopbackServer(model=["test-gen"], dialect="llamacpp", slots=1, delay=delay)


def _score(monkeypatch, argv: list[str]) -> int:
    monkeypatch.setattr(sys, "argv", argv)  # what the advice repeats, as the shell gave it
    return main(argv[1:])


def _argv(srv, tmp_path, *more: str) -> list[str]:
    tmp_path.mkdir(exist_ok=True)
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    return ["tension-run", "score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", srv.base_url,
            "--model", "test-gen", "--cache", str(tmp_path / "cache"), "--seed", "7", "--no-report", *more]


def test_a_slow_one_slot_server_is_told_the_runs_time_and_the_advised_command_completes(tmp_path, capsys,
                                                                                          monkeypatch):
    with _one_slot(delay=DELAY) as srv:
        argv = _argv(srv, tmp_path, *SLOW)
        assert _score(monkeypatch, argv) == 0
        err = capsys.readouterr().err
        said = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("note: this run needs")]
        assert len(said) == 1, err  # once
        m = NEEDS.match(said[0])
        assert m is not None, said[0]
        rate, left = float(m.group(1)), int(m.group(2).replace(",", ""))
        assert 10 < rate < 1 / DELAY and left > 0  # one slot: at most one answer per DELAY
        eta = json.loads((tmp_path / "out" / "run.json").read_text())["http"]["eta"]
        assert eta["said"] and abs(eta["answers_per_s"] - rate) < 0.01 and eta["answers_left"] == left
        # the bar moved before a position was done: answers counted in its postfix
        assert re.search(r"0/\d+ \[.*\d+ answers", err.replace("\r", "\n")), err[-2000:]
        advice = m.group(3)
        assert "--endings 20 it would take ≈" in advice, advice
        command = shlex.split(advice.split(": ", 1)[1])
        assert command[:2] == ["tension-run", "score"] and command[-2:] == ["--endings", "20"]
        assert command.count("--endings") == 1  # the old value replaced, not repeated

        assert _score(monkeypatch, command) == 0  # as printed (the seeded chunks of one it has are read back)
        positions = [json.loads(line) for line in (tmp_path / "out" / "positions.jsonl").read_text().splitlines()]
        assert positions and all(p["n_endings"] == 20 for p in positions)


def test_a_fast_run_and_a_run_without_the_bar_say_nothing_of_their_time(tmp_path, capsys, monkeypatch):
    with LoopbackServer(model=["test-gen"]) as fast:
        assert _score(monkeypatch, _argv(fast, tmp_path / "fast", "--endings", "4")) == 0
        assert "this run needs" not in capsys.readouterr().err
    with _one_slot(delay=DELAY) as slow:
        argv = _argv(slow, tmp_path / "quiet", *SLOW, "--no-progress")
        assert _score(monkeypatch, argv) == 0
        assert "this run needs" not in capsys.readouterr().err
        eta = json.loads((tmp_path / "quiet" / "out" / "run.json").read_text())["http"]["eta"]
        assert eta is not None and not eta["said"] and eta["answers_per_s"] > 0  # measured, kept, not said
