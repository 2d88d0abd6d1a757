"""Time and cost on a server that gives one choice a request (issue 61, with M4 of
../shared/reviews/external-servers-2026-12-02.md; L2 and L3 of
../shared/reviews/external-servers-2026-12-07.md), each on the user's path, the
real CLI against the test server taught that server:

- `score`: `transformers serve` drops `n` and answers one request at a time; its
  first answer took 86 s and brought one ending, and the bar showed no time until
  8 answers were in. Here one choice a request (`max_n=1`, the limit learned from
  short answers), one at a time (`max_concurrent=1`), a second each (`delay`); the
  CLI in a child process, stopped with SIGTERM once it has said its time.
- `estimate`: "37 generation requests (n = 100)" for 3,700 HTTP requests. Here
  llama-cpp-python's and llama.cpp's dialects (a limit known before sending), then
  `score` sends what was counted; and a server that does not say its limit.
- `bench`: 3 runs × 4 full generations before saying it had no figure. Here a
  server that drops `n` when streaming (`max_n=1`), and one 503 in the first run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tension.core.cli import main
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import CHAT_PATH, LoopbackServer

DELAY = 1.0  # seconds an answer takes, one at a time: the first 8 take 8 s
ROUGH = re.compile(r"note: this run needs ≈ [^,]+ more, a rough figure from the first (\d+) answers? in ")


def _score_until(argv: list[str], err_path, said: re.Pattern[str], timeout: float = 60.0) -> tuple[int, str]:
    """`tension-run score ARGV` in a child process until its stderr holds `said` (or
    `timeout`), then SIGTERM: its exit status and stderr."""
    with open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "tension.core.cli", "score", *argv],
                                stdout=subprocess.DEVNULL, stderr=err, text=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None and not said.search(err_path.read_text()):
            time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    return rc, err_path.read_text()


def test_score_on_a_one_choice_server_says_a_rough_time_before_its_eighth_answer(tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    with LoopbackServer(model="test-gen", max_n=1, max_concurrent=1, delay=DELAY) as srv:
        argv = [str(corpus), "--out", str(tmp_path / "out"), "--base-url", srv.base_url, "--model", "test-gen",
                "--cache", str(tmp_path / "cache"), "--seed", "7", "--no-report"]
        # today's code says its first time at the 8th answer: wait for whichever comes first
        rc, err = _score_until(argv, tmp_path / "err.txt", re.compile(r"note: this run needs"))
        answered = srv.count(path=CHAT_PATH)
    lines = err.replace("\r", "\n").splitlines()
    said = [line for line in lines if line.startswith("note: this run needs")]
    assert said, err[-3000:]
    m = ROUGH.match(said[0])
    assert m is not None, said[0]  # rough, and said how it was reached
    assert 1 <= int(m.group(1)) < 8 and answered < 8, (said[0], answered)
    assert "a server that answers several requests at once is faster" in said[0]
    assert "said again once 8 answers are in" in said[0]
    # the default run (100 endings × ~15 positions, a second each) is long: its advice comes with it
    assert "with --endings 20 it would take ≈" in said[0]
    # the bar had the time too, marked rough
    assert any(re.search(r"\d+ answers, ≈ [^,]+ left \(rough\)", line) for line in lines), err[-3000:]
    assert rc == 130, err[-2000:]  # stopped by the SIGTERM
    eta = json.loads((tmp_path / "out" / "run.json").read_text())["http"]["eta"]
    assert eta["rough"] and eta["said"] and eta["answers"] == int(m.group(1))
    assert 0 < eta["answers_per_s"] <= 1 / DELAY * 1.05 and eta["seconds_left"] > 600


@pytest.mark.parametrize("knobs, per_position", [({"dialect": "llamacpp_python"}, 6),  # one choice a request
                                                 ({"dialect": "llamacpp", "slots": 4}, 2)],  # 6 in chunks of 4
                         ids=["llamacpp_python", "llamacpp"])
def test_estimate_on_a_server_that_takes_fewer_choices_counts_the_http_requests_score_then_sends(
        tmp_path, capsys, knobs, per_position):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    common = [str(corpus), "--base-url", "", "--model", "test-gen", "--endings", "6", "--seed", "7", "--no-progress",
              "--cache", str(tmp_path / "cache")]
    with LoopbackServer(model="test-gen", **knobs) as srv:
        common[2] = srv.base_url
        assert main(["estimate", *common, "--input-usd-per-mtok", "1", "--json", str(tmp_path / "e.json")]) == 0
        out = capsys.readouterr().out
        est = json.loads((tmp_path / "e.json").read_text())
        positions = est["generation_requests"]
        http = positions * per_position
        assert f"HTTP requests for them                     {http:,} ({per_position} per position" in out, out
        assert f"to send: generation / judge                  {positions:,} / {positions * 6:,} ({http:,} " \
               "generation HTTP requests)" in out, out
        assert est["choices"]["known"] and est["choices"]["http_requests"] == est["choices"]["http_to_send"] == http
        # the prompt of each chunk is billed: the generation prompts once per chunk, the judge's once each
        sent = est["prompt_tokens"]
        assert est["tokens_usd"]["chunks_known"]
        assert est["tokens_usd"]["input_tokens"] == sent["generation"]["sent"] * per_position + sent["judge"]["sent"]

        assert main(["score", *common, "--out", str(tmp_path / "out"), "--no-report"]) == 0
        assert srv.count(kind="generation") == http  # what score sent, counted by the server


def test_estimate_says_where_the_servers_n_limit_is_not_known(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    with LoopbackServer(model="test-gen") as srv:  # owned_by "test": an OpenAI-compatible server that does not say
        for extra in (["--model", "test-gen"], ["--tokenizer", "words"]):
            assert main(["estimate", str(corpus), "--base-url", srv.base_url, "--no-progress", "--cache",
                         str(tmp_path / "cache"), "--input-usd-per-mtok", "1", "--json", str(tmp_path / "e.json"),
                         *extra]) == 0
            out = capsys.readouterr().out
            est = json.loads((tmp_path / "e.json").read_text())
            p = est["generation_requests"]
            assert not est["choices"]["known"] and est["choices"]["http_requests"] is None
            row = next(line for line in out.splitlines() if line.startswith("  HTTP requests for them"))
            assert "not known (" in row and f"{p:,} if the servers answer n whole, up to {p * 100:,}" in row, row
            assert ("does not say it" if extra[0] == "--model" else "not asked: no --model was given") in row, row
            assert "  prompt tokens: a lower bound" in out and not est["tokens_usd"]["chunks_known"]


def test_default_bench_on_a_server_that_drops_n_when_streaming_stops_after_its_first_run(tmp_path, capsys):
    """L2: the default bench (streamed, three runs) sent 3 × 4 full generations before
    saying it had no figure; the first run's short streams say it already."""
    with LoopbackServer(model="test-gen", max_n=1) as srv:
        got = main(["bench", "--base-url", srv.base_url, "--positions", "2", "--endings", "6", "--no-progress",
                    "--save", str(tmp_path / "b.json")])
        sent = srv.count(kind="generation"), srv.count(kind="judge")
    out = capsys.readouterr()
    assert got == 1, out.err
    assert sent == (2, 0)  # the first run's two generation requests, nothing after them
    assert "does not honour n when streaming" in out.out  # the reason, with its way out (--no-stream)
    stop = next(line for line in out.out.splitlines() if line.startswith("bench stopped after its first run"))
    assert "2 of the first run's requests failed, so this bench can give no figure" in stop, stop
    assert stop.endswith("not sent: the 2 other runs"), stop
    fig = json.loads((tmp_path / "b.json").read_text())
    assert len(fig["runs"]) == 1 and fig["failed"] == 2 and fig["stopped"] in stop


def test_bench_whose_first_run_fails_a_generation_request_sends_no_judge_phase(tmp_path, capsys):
    with LoopbackServer(model="test-gen", max_concurrent=1) as srv:  # one at a time: the first one fails
        srv.fail_next("503", times=1)
        got = main(["bench", "--base-url", srv.base_url, "--positions", "2", "--endings", "6", "--no-progress",
                    "--no-stream", "--retries", "1", "--no-variants"])
        sent = srv.count(kind="generation"), srv.count(kind="judge")
    out = capsys.readouterr().out
    assert got == 1 and sent == (2, 0), (sent, out)
    assert "not sent: the judge phase (6 requests)" in out, out
