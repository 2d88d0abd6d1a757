"""One fake answer model behind both doors (tests/testing/answers.py): the HTTP test
server and the in-process transport answer every request alike, so a pipeline spec
runs on either and says which it needs, the wire or only the answers."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace as dataclasses_replace

import msgspec
import pytest

import tension
from tension.core.llm.transport import AiohttpTransport, Reply
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer
from tension.testing.openai_server import CHAT_PATH, LoopbackServer
from tension.testing.settings import AnswerSettings, WireSettings

GEN = [{"role": "system", "content": "You are a fiction writer."},
       {"role": "user", "content": "STORY SO FAR:\nThe ferry did not come back."}]
JUDGE = [{"role": "system", "content": "You are a literary judge."},
         {"role": "user", "content": "\u2014BEGIN CONTINUATION\u2014\nrain\n\u2014END CONTINUATION\u2014\n"
                                     "\u2014BEGIN PREDICTED\u2014\nsun\n\u2014END PREDICTED\u2014"}]

# (method, path, body): every kind of answer, every validation error, the routes a server may lack
REQUESTS = [
    ("GET", "/v1/models", None),
    ("GET", "/health", None),
    ("GET", "/props", None),
    ("POST", CHAT_PATH, {"model": "gen", "messages": GEN, "n": 3, "seed": 11}),
    ("POST", CHAT_PATH, {"model": "gen", "messages": GEN, "n": 2}),
    ("POST", CHAT_PATH, {"model": "judge", "messages": JUDGE}),
    ("POST", CHAT_PATH, {"model": "judge", "messages": JUDGE, "logprobs": True, "top_logprobs": 5}),
    ("POST", CHAT_PATH, {"model": "gen", "messages": [{"role": "user", "content": "a reader's question"}]}),
    ("POST", CHAT_PATH, {"model": "gen", "messages": [{"role": "user", "content": "SCRIPTED please"}], "n": 2}),
    ("POST", CHAT_PATH, {"model": "nope", "messages": GEN}),
    ("POST", CHAT_PATH, {"model": "gen", "messages": []}),
    ("POST", CHAT_PATH, {"model": "gen", "messages": GEN, "n": 0}),
    ("POST", CHAT_PATH, {"model": "gen", "messages": GEN, "max_tokens": 10**6}),
    ("POST", CHAT_PATH, [1, 2]),
    ("POST", "/tokenize", {"model": "gen", "prompt": "Hello, world!"}),
    ("POST", "/tokenize", {"model": "gen", "messages": GEN}),
    ("POST", "/detokenize", {"model": "gen", "tokens": [0]}),
    ("POST", "/v1/completions", {"model": "gen", "prompt": "x"}),
    ("GET", "/metrics", None),  # last: the counters of every answer above
]

_VOLATILE = ("id", "created")  # a fresh id and clock per answer


def _comparable(reply: Reply) -> tuple[int, object]:
    try:
        doc = json.loads(reply.body) if reply.body else None
    except ValueError:
        return reply.status, reply.body.decode()
    if isinstance(doc, dict):
        doc = {k: v for k, v in doc.items() if k not in _VOLATILE}
        for m in doc.get("data", []) if isinstance(doc.get("data"), list) else []:
            m.pop("created", None)
    return reply.status, doc


def _configure(srv) -> None:
    srv.script("SCRIPTED", lambda m, seed, i: f"scripted {i} of {seed}")


async def _ask(transport, base: str, faults) -> list[tuple[int, object]]:
    await transport.open({})
    try:
        out = []
        for method, path, body in REQUESTS:
            data = msgspec.json.encode(body) if body is not None else None
            out.append(_comparable(await transport.send(method, base + path, data, None)))
        return out
    finally:
        await transport.close()


@pytest.mark.parametrize("traits", [{}, {"dialect": "llamacpp", "slots": 2}, {"batching": True},
                                    {"misbehave": "always_y", "empty_rate": 0.5}, {"serve_usage": False},
                                    {"batching": True, "misnumber": "duplicate", "answer_model": "other"}],
                         ids=["vllm", "llamacpp", "batching", "misbehaving", "no-usage", "claims"])
def test_both_doors_answer_every_request_alike(traits):
    inproc = InProcessServer(["gen", "judge"], **traits)
    _configure(inproc)
    with LoopbackServer(["gen", "judge"], **traits) as http:
        _configure(http)
        over_http = asyncio.run(_ask(AiohttpTransport(connect=5, request=30), http.base_url, None))
        http_counts = [(r.path, r.status, r.kind) for r in http.requests]
    in_process = asyncio.run(_ask(inproc, inproc.base_url, None))
    for (method, path, _), a, b in zip(REQUESTS, over_http, in_process):
        assert a == b, (method, path)
    assert [(r.path, r.status, r.kind) for r in inproc.requests] == http_counts


@pytest.mark.parametrize("fault", ["500", "503", "429", "few_choices", "empty_content", "nonjson"])
def test_both_doors_answer_a_planted_fault_alike(fault):
    inproc = InProcessServer(["gen", "judge"])
    inproc.fail_next(fault)
    with LoopbackServer(["gen", "judge"]) as http:
        http.fail_next(fault)
        over_http = asyncio.run(_ask(AiohttpTransport(connect=5, request=30), http.base_url, None))
    in_process = asyncio.run(_ask(inproc, inproc.base_url, None))
    assert over_http == in_process
    assert inproc.pending_faults() == 0 and [r.fault for r in inproc.requests].count(fault) == 1


def test_a_score_run_through_either_door_writes_the_same_outputs(tmp_path, server):
    corpus = make_corpus(tmp_path / "c.jsonl", 2)

    def cfg(base: str, cache: str):
        return {"base_url": base, "model": "test-gen", "judge_model": "test-judge", "cache": str(tmp_path / cache),
                "endings": 4, "progress": False, "seed": 5, "report": False}

    over_http = tension.score(corpus, out=tmp_path / "http", **cfg(server.base_url, "c1")).summary
    with InProcessServer(["test-gen", "test-judge"]).serving() as inproc:
        in_process = tension.score(corpus, out=tmp_path / "inproc", **cfg(inproc.base_url, "c2")).summary
    assert over_http.status == in_process.status == "complete" and over_http.positions > 0
    assert (tmp_path / "inproc" / "positions.jsonl").read_bytes() == (tmp_path / "http" / "positions.jsonl").read_bytes()
    assert in_process.requests == over_http.requests
    for kind in ("generation", "judge"):
        assert inproc.count(CHAT_PATH, kind=kind) == server.count(CHAT_PATH, kind=kind)


def test_the_in_process_door_takes_the_http_servers_answer_settings_with_its_defaults():
    """Both doors take one AnswerSettings, with the same defaults, as the same plain
    attributes; the wire's settings are LoopbackServer's alone, and no name is both."""
    import dataclasses

    assert not AnswerSettings.names() & WireSettings.names()
    inproc, http = InProcessServer(["gen"]), LoopbackServer(["gen"])
    assert inproc.settings == http.settings == AnswerSettings()
    for f in dataclasses.fields(AnswerSettings):
        assert getattr(inproc, f.name) == getattr(http, f.name) == f.default, f.name
    assert http.wire == WireSettings() and not any(hasattr(inproc, k) for k in WireSettings.names())
    with pytest.raises(TypeError, match=r"\['api_key'\] are settings of the wire"):
        InProcessServer(["gen"], api_key="k")  # a knob of the wire, not of the answers


def test_one_settings_object_makes_either_door_and_keywords_make_it_too():
    """The test server's options are an AnswerSettings (what either door answers) and a
    WireSettings (LoopbackServer's own): keywords build them (the call sites' way), each
    keyword to its record, a record with keywords over it, and the in-process door takes
    the same AnswerSettings; a name that is no setting is said with the settings."""
    settings, wire = AnswerSettings(dialect="llamacpp", slots=2, delay=0.01), WireSettings(api_key="k")
    over = LoopbackServer("test-gen", settings, wire, slots=3, echo_auth=True)
    assert over.settings == dataclasses_replace(settings, slots=3) and (over.dialect, over.slots) == ("llamacpp", 3)
    assert over.wire == WireSettings(api_key="k", echo_auth=True) and (over.api_key, over.echo_auth) == ("k", True)
    made = LoopbackServer(model="test-gen", dialect="llamacpp", slots=2, api_key="k")
    assert made.settings == AnswerSettings(dialect="llamacpp", slots=2) and made.wire == WireSettings(api_key="k")
    with pytest.raises(TypeError, match=r"unknown setting\(s\) \['slot'\]; expected some of .*'slots'"):
        LoopbackServer(model="test-gen", slot=2)
    with pytest.raises(TypeError, match=r"expected AnswerSettings, got WireSettings"):
        InProcessServer(["test-gen"], wire)  # type: ignore[arg-type]
    answers = dict(dialect="llamacpp", slots=2, delay=0.01)
    inproc = InProcessServer(["test-gen"], AnswerSettings(**answers))
    assert (inproc.dialect, inproc.slots, inproc.delay) == ("llamacpp", 2, 0.01)
    with LoopbackServer("test-gen", AnswerSettings(**answers)) as srv:
        srv.slots = 4
        srv.reset()  # the settings it was made with, again
        assert srv.slots == 2 and srv.settings == inproc.settings


@pytest.mark.parametrize("traits", [{}, {"dialect": "llamacpp", "slots": 4}, {"stream_cut": 3}, {"serve_usage": False}],
                         ids=["vllm", "llamacpp", "cut", "no-usage"])
def test_both_doors_stream_alike(traits):
    """A streamed answer (the client's `chat_stream`, what bench times) is the same
    texts, finishes, usage and events through either door, a cut stream included."""
    from tension.core.llm.client import Client
    from tension.core.llm.protocol import ChatRequest

    req = ChatRequest(model="gen", messages=GEN, n=2, seed=3, max_tokens=40)

    async def stream(base_url: str, transport) -> tuple:
        async with Client(transport=transport) as c:
            try:
                r = await c.chat_stream(c.server(base_url), req)
            except Exception as e:  # a cut stream is a ServerError; its message is compared
                return (type(e).__name__, str(e).replace(base_url, "URL"))
            return (r.texts, r.finish_reasons, r.usage, r.events, r.model)

    with LoopbackServer(["gen"], **traits) as http:
        over_http = asyncio.run(stream(http.base_url, None))
    inproc = InProcessServer(["gen"], **traits)
    assert asyncio.run(stream(inproc.base_url, inproc)) == over_http
    assert [r.path for r in inproc.requests] == [CHAT_PATH]
