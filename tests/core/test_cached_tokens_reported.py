"""A server that does not report cached prompt tokens is not one that reports 0 (issue
61, "time and cost on a one-choice server": transformers serve, FastChat and
llama.cpp send no ``usage.prompt_tokens_details.cached_tokens``, and `bench` printed
"cached_tokens share 0.0% / 0.0%"). The wire's usage is read as "not reported"
(core/llm/protocol.py), streamed or plain (core/llm/stream.py, one usage event or
llama.cpp's one per choice); bench's share is "–" and null in its JSON; a score
run's report and run.json say so instead of a count of 0.

The servers are the loopback HTTP server taught to leave the field out
(``serve_cached_tokens=False``, a wire setting)."""

from __future__ import annotations

import asyncio
import json
import re

import aiohttp
import msgspec
import pytest

from tension.core.cli import main
from tension.core.llm.protocol import ChatChunk, ChatResponse, usage_of
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import CHAT_PATH, COMPLETIONS_PATH, LoopbackServer

BENCH = ["--positions", "2", "--endings", "6", "--no-variants", "--no-progress"]
ANSWER = (b'{"id": "x", "model": "m", "choices": [{"index": 0, "message": {"content": "Y"}, "finish_reason": "stop"}],'
          b' "usage": {"prompt_tokens": 40, "completion_tokens": 1%s}}')


@pytest.mark.parametrize("details, unreported, cached", [
    (b"", 1, 0),
    (b', "prompt_tokens_details": null', 1, 0),
    (b', "prompt_tokens_details": {"cached_tokens": null}', 1, 0),
    (b', "prompt_tokens_details": {}', 1, 0),
    (b', "prompt_tokens_details": {"cached_tokens": 0}', 0, 0),
    (b', "prompt_tokens_details": {"cached_tokens": 32}', 0, 32),
])
def test_the_wire_usage_tells_reported_from_not_reported(details, unreported, cached):
    wire = msgspec.json.decode(ANSWER % details, type=ChatResponse).usage
    u = wire.usage()
    assert (u.requests, u.prompt_tokens, u.cached_tokens, u.cached_unreported) == (1, 40, cached, unreported)
    assert wire.usage(3).cached_unreported == 3 * unreported  # a batch of 3 prompts in one answer
    assert usage_of(None, 2).cached_unreported == 2  # no usage at all: nothing reported


def test_a_streamed_usage_event_without_details_is_not_reported():
    event = b'{"id": "x", "model": "m", "choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 9}}'
    assert msgspec.json.decode(event, type=ChatChunk).usage.usage().cached_unreported == 1


async def _usages(url: str) -> list[dict]:
    body = {"model": "test-gen", "messages": [{"role": "user", "content": "hello there"}], "n": 2}
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/chat/completions", json=body) as r:
            plain = (await r.json())["usage"]
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        async with s.post(url + "/v1/chat/completions", json=streamed) as r:
            events = [json.loads(line[5:]) for line in (await r.text()).splitlines()
                      if line.startswith("data: {")]
    return [plain, *(e["usage"] for e in events if e.get("usage"))]


@pytest.mark.parametrize("dialect", ["vllm", "llamacpp"])
def test_the_test_server_leaves_the_details_out_only_when_taught(dialect):
    with LoopbackServer(model="test-gen", dialect=dialect) as srv:
        assert all("cached_tokens" in u["prompt_tokens_details"] for u in asyncio.run(_usages(srv.base_url)))
    with LoopbackServer(model="test-gen", dialect=dialect, serve_cached_tokens=False) as srv:
        got = asyncio.run(_usages(srv.base_url))
    assert len(got) >= 2 and all("prompt_tokens_details" not in u and u["prompt_tokens"] > 0 for u in got)


@pytest.mark.parametrize("dialect, stream", [("vllm", True), ("vllm", False), ("llamacpp", True)])
def test_bench_says_no_share_where_no_answer_reported_cached_tokens(tmp_path, capsys, dialect, stream):
    saved = tmp_path / "b.json"
    with LoopbackServer(model="test-gen", dialect=dialect, serve_cached_tokens=False) as srv:
        got = main(["bench", "--base-url", srv.base_url, *BENCH, "--save", str(saved),
                    *([] if stream else ["--no-stream"])])
    out = capsys.readouterr().out
    assert got == 0, out
    assert re.search(r"^cached_tokens share gen / judge\s+– / –$", out, re.M), out
    run = json.loads(saved.read_text())["runs"][0]
    assert run["cached_token_rate"] == {"generation": None, "judge": None}
    assert run["generation_requests"] > 0 and run["judge_requests"] > 0 and run["gen_tok_s"] > 0


def test_bench_gives_the_share_where_answers_reported_it(tmp_path, capsys, server):
    saved = tmp_path / "b.json"
    assert main(["bench", "--base-url", server.base_url, "--model", "test-gen", *BENCH, "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^cached_tokens share gen / judge\s+\d+\.\d% / \d+\.\d%$", out, re.M), out
    rates = json.loads(saved.read_text())["runs"][0]["cached_token_rate"]
    assert all(isinstance(r, float) for r in rates.values())


@pytest.mark.parametrize("reported", [True, False])
def test_a_score_run_says_whether_the_server_reported_cached_tokens(tmp_path, capsys, server, reported):
    server.serve_cached_tokens = reported
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    out = tmp_path / "out"
    got = main(["score", str(corpus), "--out", str(out), "--base-url", server.base_url, "--model", "test-gen",
                "--endings", "4", "--seed", "1", "--no-progress", "--cache", str(tmp_path / "cache")])
    assert got == 0, capsys.readouterr().err
    run = json.loads((out / "run.json").read_text())
    used = run["usage_this_run"]
    report = (out / "report.md").read_text()
    line = re.search(r"^- tokens this run: .*$", report, re.M).group(0)
    cached = [r["cached_tokens"] for role in ("generation", "judge") for r in run["replicas"][role]]
    if reported:
        assert "cached_unreported" not in used
        assert all(isinstance(c, int) for c in cached)
        assert re.fullmatch(r"- tokens this run: [\d,]+ prompt \([\d,]+ served from the server's prefix cache\), "
                            r"[\d,]+ completion", line), line
    else:
        assert used["cached_unreported"] == used["requests"] > 0
        assert cached == [None, None]
        usage = run["prompt_tokens"]["usage"]  # run.json's prompt_tokens: no computed figure from a 0 that is no count
        assert all(usage[role]["cached"] is None and usage[role]["computed"] is None for role in usage), usage
        assert all(run["prompt_tokens"]["per_unit"][role]["usage_over_ideal"] is None
                   for role in ("generation", "judge", "all"))
        assert line == (f"- tokens this run: {used['prompt_tokens']:,} prompt (the server did not report how many "
                        f"were served from its prefix cache), {used['completion_tokens']:,} completion"), line


def test_a_score_run_whose_judge_alone_reports_no_cached_tokens_says_how_many_requests_reported_them(
        tmp_path, capsys, server):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    out = tmp_path / "out"
    with LoopbackServer(model="test-judge", serve_cached_tokens=False) as judge:
        got = main(["score", str(corpus), "--out", str(out), "--base-url", server.base_url, "--model", "test-gen",
                    "--judge-base-url", judge.base_url, "--judge-model", "test-judge", "--endings", "4", "--seed",
                    "1", "--no-progress", "--cache", str(tmp_path / "cache")])
        judged = judge.count(kind="judge")
    assert got == 0, capsys.readouterr().err
    run = json.loads((out / "run.json").read_text())
    used = run["usage_this_run"]
    assert used["cached_unreported"] == judged > 0 and used["requests"] > judged
    assert run["replicas"]["judge"][0]["cached_tokens"] is None
    usage = run["prompt_tokens"]["usage"]
    assert usage["judge"]["computed"] is None and isinstance(usage["generation"]["computed"], int)
    assert isinstance(run["replicas"]["generation"][0]["cached_tokens"], int)
    report = (out / "report.md").read_text()
    assert re.search(rf"^- tokens this run: [\d,]+ prompt \([\d,]+ served from the server's prefix cache, as "
                     rf"{used['requests'] - judged:,} of {used['requests']:,} requests reported it\), [\d,]+ "
                     rf"completion$", report, re.M), report


def test_a_batched_judge_on_a_server_that_reports_no_cached_tokens_counts_every_prompt_unreported(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    out = tmp_path / "out"
    with LoopbackServer(model="test-gen", batching=True, serve_cached_tokens=False) as srv:
        got = main(["score", str(corpus), "--out", str(out), "--base-url", srv.base_url, "--model", "test-gen",
                    "--endings", "4", "--seed", "1", "--no-progress", "--cache", str(tmp_path / "cache")])
    assert got == 0, capsys.readouterr().err
    run = json.loads((out / "run.json").read_text())
    assert run["judge_batch"]["batched"] is True  # the judge's prompts went as batches (core/llm/batch.py)
    used = run["usage_this_run"]
    assert used["cached_unreported"] == used["requests"] > run["judge_batch"]["requests"]
    # the verdicts' records, each a share of its batch's usage, keep it: a cached rerun reads them back
    again = tmp_path / "again"
    with LoopbackServer(model="test-gen", batching=True, serve_cached_tokens=False) as srv:
        assert main(["score", str(corpus), "--out", str(again), "--base-url", srv.base_url, "--model", "test-gen",
                     "--endings", "4", "--seed", "1", "--no-progress", "--cache", str(tmp_path / "cache")]) == 0
        assert srv.count(CHAT_PATH) == srv.count(COMPLETIONS_PATH) == 0  # every answer read from the cache
    every = json.loads((again / "run.json").read_text())["usage_all_answers"]
    assert every["cached_unreported"] == every["requests"] == used["requests"]
