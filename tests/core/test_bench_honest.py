"""A short or cut streamed answer in `bench` is a failure, never a figure (H3 of
../shared/reviews/external-servers-2026-12-02.md): llama-cpp-python drops `n`
(one choice for n = 100) and cuts a stream off with ``[DONE]`` as soon as another
request waits; bench printed "mean tokens per ending 0.2" with exit 0, and
`estimate --bench` turned that into 0.009 GPU-hours for hours of work. The
loopback server is taught both (``max_n=1``, ``stream_cut``)."""

from __future__ import annotations

import json

import pytest

from tension.core.cli import main
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

ARGS = ["--positions", "2", "--endings", "6", "--no-variants", "--no-progress"]


@pytest.mark.parametrize("knobs, said", [({"max_n": 1}, "does not honour n when streaming"),
                                         ({"stream_cut": 3}, "ended the stream before"),
                                         # llama-cpp-python: a role event, then [DONE] (a cut, not a dropped n)
                                         ({"stream_cut": -1}, "ended the stream before")])
def test_bench_on_a_server_that_drops_n_or_cuts_streams_fails_and_estimate_does_not_believe_it(
        tmp_path, capsys, knobs, said):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    with LoopbackServer(model="test-gen", **knobs) as srv:
        got = main(["bench", "--base-url", srv.base_url, *ARGS, "--save", str(tmp_path / "b.json")])
        out = capsys.readouterr()
        assert got == 1, out.err
        assert said in out.out + out.err
        fig = json.loads((tmp_path / "b.json").read_text())
        assert fig["failed"] > 0 and fig["mean_ending_tokens"] is None
        assert main(["estimate", str(corpus), "--base-url", srv.base_url, "--no-progress", "--cache",
                     str(tmp_path / "cache"), "--bench", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert "requests failed" in err and "Traceback" not in err


def test_bench_no_stream_on_a_server_that_drops_n_gives_the_whole_figure(tmp_path, capsys):
    """The way out the failure names: --no-stream asks for what is missing."""
    figures = {}
    for name, knobs in (("all", {}), ("one", {"max_n": 1})):
        with LoopbackServer(model="test-gen", **knobs) as srv:
            got = main(["bench", "--base-url", srv.base_url, *ARGS, "--no-stream", "--save",
                        str(tmp_path / f"{name}.json")])
        assert got == 0, capsys.readouterr().err
        figures[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert figures["one"]["failed"] == 0
    assert figures["one"]["mean_ending_tokens"] == pytest.approx(figures["all"]["mean_ending_tokens"], rel=0.25)
