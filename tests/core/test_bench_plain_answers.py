"""`bench` on a server that ignores `stream` and drops `n` (issue 61, "time and cost on
a one-choice server"): the plain answer short of its choices is said as what it is
(a plain answer, no time to first token, n not honoured), and the advice it prints,
--no-stream, run as printed, gives figures. The server that ignores `stream` but
honours `n` is tests/core/test_figures_said.py's
`test_bench_on_a_server_that_ignores_stream_takes_the_plain_answers_and_says_ttft_was_not_measured`."""

from __future__ import annotations

import json

from tension.core.cli import main
from tension.testing.openai_server import LoopbackServer

BENCH = ["--positions", "2", "--endings", "6", "--no-variants", "--no-progress"]


def test_bench_on_a_one_choice_server_that_ignores_stream_says_both_and_its_advice_gives_figures(tmp_path, capsys):
    with LoopbackServer(model="test-gen", stream_ignored=True, max_n=1) as srv:
        assert main(["bench", "--base-url", srv.base_url, *BENCH]) == 1
        out = capsys.readouterr().out
        said = ("a request for 6 choices brought 1, in a plain answer (the server ignores `stream`: no time to first "
                "token); the server does not honour n, so no figure is taken from it (try --no-stream, which asks "
                "for what is missing)")
        assert said in out and "streamed request for 6 choices" not in out, out
        saved = tmp_path / "b.json"
        assert main(["bench", "--base-url", srv.base_url, *BENCH, "--no-stream", "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "error" not in out and "honour n" not in out, out
    run = json.loads(saved.read_text())["runs"][0]
    assert run["failed"] == 0 and run["generation_requests"] == 2 and run["mean_ending_tokens"] > 1
