"""Servers other than vLLM (issue 26): llama.cpp's server as measured
(../shared/reviews/external-servers-2026-12-01.md), taught to the loopback server
as `dialect="llamacpp"`, and servers that honour `n` only partly (`max_n`). Each
test runs the user's path (`score`, `bench`, the CLI) and compares with what a
vLLM-flavoured server gives for the same settings: where the server allows, the
outputs are the same bytes."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest

import tension
from tension.core.cli import main
from tension.core.llm.capacity import Capacity
from tension.core.llm.client import Client
from tension.core.llm.protocol import ChatRequest
from tension.core.llm.traits import grammar_of, n_limit
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer
from tension.testing.openai_server import CHAT_PATH, LoopbackServer, count_tokens

N = 8  # endings: above the llama.cpp server's 4 slots


def _cfg(srv, tmp_path, name, **kw):
    base = {"base_url": srv.base_url, "model": "test-gen", "cache": str(tmp_path / f"cache-{name}"),
            "endings": N, "progress": False, "seed": 7, "report": False}  # no test here reads the report
    return {**base, **kw}  # the API's keywords


def _score(srv, tmp_path, corpus, name, **kw):
    """A run through the API; an in-process server is reached by its base URL while it is served."""
    with srv.serving() if isinstance(srv, InProcessServer) else contextlib.nullcontext():
        s = tension.score(corpus, out=tmp_path / name, **_cfg(srv, tmp_path, name, **kw)).summary
    return s, json.loads((tmp_path / name / "run.json").read_text())


def _same_outputs(a: Path, b: Path) -> None:
    for f in ("positions.jsonl", "texts.jsonl"):
        if (a / f).exists() or (b / f).exists():
            assert (a / f).read_bytes() == (b / f).read_bytes(), f


@pytest.fixture
def vllm_run(tmp_path, corpus):
    """The same settings on a vLLM-flavoured server: what a foreign server must match."""
    def run(**kw):
        with InProcessServer("test-gen") as srv:  # the answers: no wire needed for the reference
            s, rec = _score(srv, tmp_path, corpus, "vllm", save_texts=True, **kw)
        assert s.status == "complete", s.error
        return tmp_path / "vllm"
    return run


# -- llama.cpp: the default score, n above the slots, /tokenize, capacity ---------------


def test_llamacpp_default_score_completes_with_the_vllm_bytes(tmp_path, corpus, vllm_run, capsys):
    """F1 + F3: its /tokenize spoken in its dialect (real counts, not words), and n = 8
    on 4 slots asked in chunks seeded seed + offset: the same endings, verdicts and
    positions as on vLLM."""
    want = vllm_run()
    with LoopbackServer(model="test-gen", dialect="llamacpp", slots=4) as srv:
        s, rec = _score(srv, tmp_path, corpus, "llama", save_texts=True)
        gens = [r.body for r in srv.requests if r.path == CHAT_PATH and r.kind == "generation"]
        toks = [r.body for r in srv.requests if r.path == "/tokenize"]
    assert s.status == "complete", s.error
    _same_outputs(want, tmp_path / "llama")
    assert gens and all(b["n"] <= 4 for b in gens)  # never the 400
    assert toks and all("content" in b and "prompt" not in b for b in toks)
    (server,) = rec["servers"]
    assert (server["kind"], server["slots"], server["max_n"], server["tokenize"]) == ("llamacpp", 4, 4, "llamacpp")
    assert server["usage"] == "one choice" and server["batch_invariant"] is False
    assert rec["http"]["retries"] == 0
    err = capsys.readouterr().err
    assert err.count("is llama.cpp's server: 4 slots") == 1


def test_llamacpp_cached_rerun_sends_nothing(tmp_path, corpus):
    with LoopbackServer(model="test-gen", dialect="llamacpp") as srv:
        s, _ = _score(srv, tmp_path, corpus, "a")
        srv.reset_records()
        s2, rec = _score(srv, tmp_path, corpus, "a2", cache=str(tmp_path / "cache-a"))
        assert s2.status == "complete" and srv.count() == 0
    assert (tmp_path / "a" / "positions.jsonl").read_bytes() == (tmp_path / "a2" / "positions.jsonl").read_bytes()


def test_n_above_the_slots_learned_from_the_400_when_props_says_nothing(tmp_path, corpus, vllm_run, capsys):
    """F3 without /props (a server that says its limit only in its 400): learned
    once, said once, and the results are still vLLM's."""
    want = vllm_run()
    with LoopbackServer(model="test-gen", dialect="llamacpp", slots=3, serve_props=False) as srv:
        s, rec = _score(srv, tmp_path, corpus, "llama", save_texts=True)
        refused = [r for r in srv.requests if r.path == CHAT_PATH and r.status == 400]
    assert s.status == "complete", s.error
    _same_outputs(want, tmp_path / "llama")
    # only requests already in flight when it was learned, each refused once: none after
    asked = [json.dumps(r.body["messages"]) for r in refused]
    assert refused and len(set(asked)) == len(asked)
    assert rec["servers"][0]["max_n"] == 3 and rec["servers"][0]["max_n_from"] == "HTTP 400"
    assert capsys.readouterr().err.count("answers at most 3 choice(s) per request") == 1


# -- partial n: fewer choices than asked, silently ------------------------------------------


@pytest.mark.parametrize("max_n", [1, 3, 7])
def test_partial_n_fans_out_without_spending_the_retry_budget(tmp_path, corpus, vllm_run, capsys, max_n):
    """At --retries 2 a server giving 3 of 20 choices failed every story ("got 9
    after 2 follow-up requests"); now the chunks bring every choice, with the seeds
    one request would have used, and the limit is said once."""
    want = vllm_run(endings=20)
    with InProcessServer("test-gen", max_n=max_n) as srv:  # partial n is an answer's trait, not the wire's
        s, rec = _score(srv, tmp_path, corpus, "partial", endings=20, retries=2, save_texts=True)
    assert s.status == "complete", s.error
    _same_outputs(want, tmp_path / "partial")
    (server,) = rec["servers"]
    assert server["max_n"] == max_n and server["max_n_from"] == "short answers"
    assert capsys.readouterr().err.count(f"answers at most {max_n} choice(s) per request") == 1


def test_a_short_answer_once_is_not_a_limit(server, tmp_path):
    """A glitch (one short answer) is completed by a follow-up and teaches nothing."""
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=6)
    server.fail_next("few_choices", times=1)
    s = tension.score(corpus, out=tmp_path / "o", base_url=server.base_url, model="test-gen", endings=6, seed=7,
                      progress=False, cache=str(tmp_path / "cache")).summary
    assert s.status == "complete"
    rec = json.loads((tmp_path / "o" / "run.json").read_text())
    assert all(sv["max_n"] is None for sv in rec["servers"])


# -- /tokenize: another dialect, or none ---------------------------------------------------


def test_a_tokenize_answer_that_counts_nothing_is_a_usage_error_with_the_way_out(tmp_path, corpus):
    """F1's class: a 200 with another schema is not an outage; it is said at once
    (exit 2, no retries) with the --tokenizer advice, not "rerun the same command"."""
    with LoopbackServer(model="test-gen", dialect="llamacpp", owned_by="openai") as srv:
        rc = main(["score", str(corpus), "--out", str(tmp_path / "o"), "--base-url", srv.base_url,
                   "--cache", str(tmp_path / "cache"), "--endings", "4", "--no-progress"])
        tries = [r.body["prompt"] for r in srv.requests if r.path == "/tokenize"]
    assert rc == 2
    assert tries and len(set(tries)) == len(tries)  # the requests in flight, none retried (8 tries each before)
    rec = json.loads((tmp_path / "o" / "run.json").read_text())
    assert "cannot count tokens" in rec["error"] and "--tokenizer words" in rec["error"]


def test_llamacpp_token_counts_are_its_own(tmp_path):
    """The counts are the server's tokens, not words: pct as on vLLM, not as --tokenizer words."""
    story = make_corpus(tmp_path / "s.jsonl", 1, seed=2)
    pcts = {}
    for name, dialect, kw in (("llama", "llamacpp", {}), ("vllm", "vllm", {}),
                              ("words", "vllm", {"tokenizer": "words"})):
        with LoopbackServer(model="test-gen", dialect=dialect) as srv:
            s, _ = _score(srv, tmp_path, story, name, endings=2, **kw)
        assert s.status == "complete", s.error
        pcts[name] = [json.loads(x)["pct"] for x in (tmp_path / name / "positions.jsonl").read_text().splitlines()]
    assert pcts["llama"] == pcts["vllm"] != pcts["words"]


@pytest.mark.parametrize("extra, rc", [([], 2), (["--tokenizer", "words"], 0)])
def test_bench_without_vllm_tokenize(tmp_path, capsys, extra, rc):
    """F8: bench has --tokenizer; without it, a server lacking /tokenize is one line, exit 2."""
    with LoopbackServer(model="test-gen", serve_tokenize=False) as srv:
        got = main(["bench", "--base-url", srv.base_url, "--positions", "2", "--endings", "2", "--no-variants",
                    "--no-progress", *extra])
    captured = capsys.readouterr()
    assert got == rc
    assert "Traceback" not in captured.err and "ExceptionGroup" not in captured.err
    if rc == 2:
        assert "--tokenizer words" in captured.err


def test_bench_on_llamacpp_counts_every_choice(tmp_path, capsys):
    """F4 in bench: streamed, llama.cpp sends a usage event per choice; they are summed,
    so tokens per ending are the vLLM server's figure, not 1/n of it."""
    figures = {}
    for dialect in ("vllm", "llamacpp"):
        with LoopbackServer(model="test-gen", dialect=dialect) as srv:
            got = main(["bench", "--base-url", srv.base_url, "--positions", "2", "--endings", "4", "--no-variants",
                        "--no-progress", "--save", str(tmp_path / f"{dialect}.json")])
        assert got == 0, capsys.readouterr().err
        figures[dialect] = json.loads((tmp_path / f"{dialect}.json").read_text())
    assert figures["llamacpp"]["mean_ending_tokens"] == figures["vllm"]["mean_ending_tokens"]


# -- capacity: what the server holds ------------------------------------------------------


def test_default_concurrency_on_a_4_slot_server_times_nothing_out(tmp_path):
    """F2: 64 generation and 512 judge requests in flight queued inside a 4-slot
    server past the time-out, and were re-sent; with its slots read from /props,
    it is sent 4 sequences at once, and the time-out counts its work only."""
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=4)
    with LoopbackServer(model="test-gen", dialect="llamacpp", slots=4, delay=0.05) as srv:
        s, rec = _score(srv, tmp_path, corpus, "llama", endings=4, timeout=1.5)
        peak = srv.peak_slots
    assert s.status == "complete", s.error
    assert rec["http"]["retries"] == 0  # before: dozens of time-outs, re-sent at the back of the queue
    assert peak <= 4 and rec["servers"][0]["capacity"]["peak_in_flight"] <= 4


def test_a_503_lowers_what_a_server_is_sent(tmp_path, capsys):
    async def go(srv):
        async with Client(notice=lambda m: print(m, file=__import__("sys").stderr)) as c:
            req = ChatRequest(model="test-gen", messages=[{"role": "user", "content": "hi"}], n=1)
            srv.fail_next("503", times=1)
            await asyncio.gather(*(c.chat(c.server(srv.base_url), req) for _ in range(16)))
            return c.servers.record()

    with LoopbackServer(model="test-gen", delay=0.05) as srv:
        (rec,) = asyncio.run(go(srv))
    assert rec["capacity"]["lowered"] == 1 and rec["capacity"]["ceiling"] is None
    assert capsys.readouterr().err.count("is sent more than it holds") == 1


def test_capacity_aimd():
    """Multiplicative decrease on overload, additive increase on answers, up to the ceiling."""
    async def go():
        cap = Capacity(8)
        for _ in range(8):
            await cap.acquire(cap.weigh(1))
        assert cap.overloaded(0) and cap.stats.limit == 4
        assert not cap.overloaded(0)  # the rest of the burst, sent at the old limit, lowers it once
        assert cap.overloaded(1) and cap.stats.limit == 2  # one sent since: again
        for _ in range(8):
            cap.release(1)
        for _ in range(200):
            cap.answered()
        assert cap.stats.limit == 8
        assert Capacity(4).weigh(100) == 4 and Capacity(None).weigh(3) == 3

    asyncio.run(go())


# -- constraints, context ------------------------------------------------------------------


def test_judge_choice_constraint_travels_as_llamacpps_grammar(tmp_path, corpus):
    """F5: structured_outputs is ignored by llama.cpp; its grammar is sent instead, so
    the constraint holds (no malformed verdict)."""
    with LoopbackServer(model="test-gen", dialect="llamacpp", malformed_rate=0.6) as srv:
        s, rec = _score(srv, tmp_path, corpus, "llama", judge_constraint="choice")
        judges = [r.body for r in srv.requests if r.path == CHAT_PATH and r.kind == "judge"]
    assert s.status == "complete", s.error
    assert judges and all(b.get("grammar") == 'root ::= "Y" | "N"' and "structured_outputs" not in b
                          for b in judges)
    assert "malformed" not in json.dumps(rec.get("warnings", []))


def test_grammar_forms():
    assert grammar_of({"choice": ["Y", "N"]}) == {"grammar": 'root ::= "Y" | "N"'}
    assert grammar_of({"choice": ['a"b']}) == {"grammar": 'root ::= "a\\"b"'}
    assert grammar_of({"json": {"type": "object"}}) == {"response_format": {"type": "json_object"}}
    assert grammar_of({"regex": "x"}) is None
    assert n_limit("Field 'n': Value must be between 1 <= value <= 4, but got 8") == 4
    assert n_limit("This model's maximum context length is 4096 tokens") is None


def _long_story(tmp_path):
    story = make_corpus(tmp_path / "s.jsonl", 1, seed=5, words=(900, 1000))
    return story, count_tokens(json.loads(story.read_text().splitlines()[0])["text"])


def test_llamacpp_context_from_its_model_list_skips_long_positions(tmp_path):
    """F7: meta.n_ctx is the context; positions whose prompt cannot fit are skipped
    before sending, the rest of the story kept."""
    story, tokens = _long_story(tmp_path)
    with LoopbackServer(model="test-gen", dialect="llamacpp", max_model_len=tokens + 250) as srv:
        s, rec = _score(srv, tmp_path, story, "llama", endings=2, max_tokens=400)
        refused = [r for r in srv.requests if r.status == 400]
    assert s.status == "complete", s.error
    assert not refused and s.too_long and rec["servers"][0]["context_len"] == tokens + 250
    assert (tmp_path / "llama" / "positions.jsonl").read_text().splitlines()


@pytest.mark.parametrize("dialect", ["vllm", "llamacpp"])
def test_a_position_over_the_context_is_skipped_not_the_story(tmp_path, dialect):
    """F7: counted by words (which under-count tokens), late prompts reach the server
    and are refused with its context 400; that position is skipped, and the story
    keeps its other positions (before, the whole story failed)."""
    story, tokens = _long_story(tmp_path)
    with LoopbackServer(model="test-gen", dialect=dialect, max_model_len=tokens + 250) as srv:
        s, rec = _score(srv, tmp_path, story, "o", endings=2, max_tokens=400, tokenizer="words")
        refused = [r for r in srv.requests if r.status == 400]
    assert s.status == "complete", s.error
    assert refused and sum(s.too_long.values()) >= 1
    assert (tmp_path / "o" / "positions.jsonl").read_text().splitlines()
    assert rec["positions_skipped_too_long"] == s.too_long


def test_a_constraint_on_a_server_that_may_ignore_it_is_said_once(tmp_path, corpus, capsys):
    """F5 behind a proxy (owned_by openai: LiteLLM): the constraint goes as vLLM's
    structured_outputs, and the run says once, at the start, that it may not hold."""
    with LoopbackServer(model="test-gen", owned_by="openai") as srv:
        s, _ = _score(srv, tmp_path, corpus, "proxy", judge_constraint="choice", endings=2)
    assert s.status == "complete", s.error
    assert capsys.readouterr().err.count("may ignore; the malformed-answer checks") == 1


def test_max_model_len_flag_skips_positions_a_proxy_cannot_say_are_too_long(tmp_path):
    """F7: a proxy (LiteLLM: owned_by openai, no /tokenize) publishes no context, so
    `--max-model-len` says it; positions whose prompt cannot fit are skipped before
    sending. Without the flag the same run sends every position."""
    story, tokens = _long_story(tmp_path)
    common = ["--model", "test-gen", "--endings", "2", "--max-tokens", "400", "--tokenizer", "words",
              "--no-progress", "--retries", "1"]
    runs = {}
    for name, extra in (("flag", ["--max-model-len", str(tokens + 250)]), ("none", [])):
        with LoopbackServer(model="test-gen", owned_by="openai") as srv:
            code = main(["score", str(story), "--out", str(tmp_path / name), "--base-url", srv.base_url,
                         "--cache", str(tmp_path / f"cache-{name}"), *common, *extra])
            sent = sum(1 for r in srv.requests if r.path == CHAT_PATH and r.kind == "generation")
        runs[name] = (code, sent, json.loads((tmp_path / name / "run.json").read_text()))
    (code, sent, rec), (code0, sent0, rec0) = runs["flag"], runs["none"]
    assert code == code0 == 0
    assert sum(rec["positions_skipped_too_long"].values()) >= 1 and not rec0["positions_skipped_too_long"]
    assert sent == sent0 - sum(rec["positions_skipped_too_long"].values())
    assert rec["config"]["max_model_len"] == rec["context_len"] == tokens + 250


def test_a_model_id_that_is_a_file_path_is_said_once_with_the_way_out(tmp_path, corpus, capsys):
    """F9: llama-server without --alias names its model by the GGUF's absolute path,
    which then goes into cache keys, run.json and exports: said once, naming --alias."""
    path = "/home/someone/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    with LoopbackServer(model=path, dialect="llamacpp") as srv:
        code = main(["score", str(corpus), "--out", str(tmp_path / "o"), "--base-url", srv.base_url,
                     "--cache", str(tmp_path / "cache"), "--endings", "2", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert err.count("the model id is a file path") == 1 and "--alias NAME" in err
    with LoopbackServer(model="smollm2", dialect="llamacpp") as srv:  # a name: nothing said
        assert main(["score", str(corpus), "--out", str(tmp_path / "p"), "--base-url", srv.base_url,
                     "--cache", str(tmp_path / "cache"), "--endings", "2", "--no-progress"]) == 0
    assert "file path" not in capsys.readouterr().err


def test_a_streamed_request_on_a_connection_the_server_just_closed_is_sent_again(tmp_path):
    """Seen in CI on the real llama-server: bench's streamed judge request failed with
    "Can not write request body", written to a pooled connection the server (5 s
    keep-alive) had just closed. A server that drops a kept-alive connection on its next
    request, before answering, here: the request goes again on a new connection, once;
    a server that drops every request still fails."""
    from tension.core.llm.transport import AiohttpTransport, TransportError

    sse = b"data: {\"ok\": 1}\n\ndata: [DONE]\n\n"
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\n"
              b"Content-Length: %d\r\n\r\n" % len(sse)) + sse
    connections = []

    async def go(drop_all: bool):
        async def handle(reader, writer):
            connections.append(1)
            served = 0
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if served or drop_all:  # a kept-alive connection, dropped without an answer
                    writer.transport.abort()
                    return
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                await reader.readexactly(length)
                writer.write(answer)
                await writer.drain()
                served += 1

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
        t = AiohttpTransport(connect=5, request=10)
        await t.open({})
        try:
            got = []
            for _ in range(2):
                got.append([line async for line in t.lines(url, b"{}", None)])
            return got
        finally:
            await t.close()
            server.close()

    got = asyncio.run(go(drop_all=False))
    assert got[0] == got[1] and b"data: [DONE]\n" in got[1]
    assert len(connections) == 2  # the second request went again, on a new connection
    connections.clear()
    with pytest.raises(TransportError):
        asyncio.run(go(drop_all=True))
    assert len(connections) == 2  # sent twice, not more
