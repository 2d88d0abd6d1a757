"""The loopback OpenAI-compatible test server (tests/testing/openai_server.py), seen by plain clients.

Every other test that talks to an LLM server trusts this one, so its answers, errors
and faults are checked here with http.client and a bare aiohttp session, not with the
project's own client.
"""

from __future__ import annotations

import asyncio
import copy
import http.client
import json
import random
import subprocess
import sys
import threading
import time

import aiohttp
import pytest

from tension.testing import openai_server
from tension.testing.openai_server import (
    BLOCK_SIZE,
    CHAT_PATH,
    FAULT_KINDS,
    LoopbackServer,
    Recorded,
    classify,
    count_tokens,
    expected_endings,
    expected_verdict,
    judge_blocks,
    tokenize,
)

GEN_SYSTEM = "You are a fiction writer. Write only story text."
JUDGE_SYSTEM = (
    "You are a literary judge. You determine whether a predicted story ending captures "
    "the general direction of the true story continuation."
)
STORY = " ".join(
    f"Sentence {i} tells how the miller's daughter, who was {i} years old, walked home." for i in range(60)
)


def gen_messages(prefix: str = "Once upon a time there was a mill.") -> list[dict]:
    user = (
        "In 2\u20133 sentences, describe how you think this story ends. No commentary, no "
        "explanation, no preamble.\n\nSTORY SO FAR:\n" + prefix
    )
    return [{"role": "system", "content": GEN_SYSTEM}, {"role": "user", "content": user}]


def judge_messages(continuation: str, predicted: str, dash: str = "\u2014") -> list[dict]:
    user = (
        "Here is the actual continuation of a story:\n\n"
        f"{dash}BEGIN CONTINUATION{dash}\n{continuation}\n{dash}END CONTINUATION{dash}\n\n"
        "Here is a predicted ending:\n\n"
        f"{dash}BEGIN PREDICTED{dash}\n{predicted}\n{dash}END PREDICTED{dash}\n\n"
        "Does the predicted ending capture the general direction of the true continuation? "
        "Answer ONLY Y or N.\n\nJudgment:"
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def chat_body(messages: list[dict], **kw) -> dict:
    return {"model": "test-model", "messages": messages, **kw}


# ------------------------------------------------------------------ plain clients


def call(srv: LoopbackServer, method: str, path: str, body=None, raw: bytes | None = None):
    """(status, headers, body bytes) with http.client: no retries, no cleverness."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def post(srv: LoopbackServer, path: str, body) -> tuple[int, dict]:
    status, _, data = call(srv, "POST", path, body)
    return status, json.loads(data)


def chat(srv: LoopbackServer, body: dict) -> dict:
    status, out = post(srv, CHAT_PATH, body)
    assert status == 200, out
    return out


def contents(out: dict) -> list[str]:
    return [c["message"]["content"] for c in out["choices"]]


def metrics(srv: LoopbackServer) -> dict[str, float]:
    status, headers, data = call(srv, "GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    out = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name_labels, value = line.rsplit(" ", 1)
            out[name_labels.split("{")[0]] = float(value)
    return out


async def aio_post(srv: LoopbackServer, body: dict, path: str = CHAT_PATH):
    """(status, headers, parsed JSON) with a bare aiohttp session; errors propagate."""
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.base_url + path, json=body) as r:
            return r.status, r.headers, await r.json()


@pytest.fixture
def srv():
    with LoopbackServer(model="test-model") as s:
        yield s


# ----------------------------------------------------------------------- module


def test_exported_members():
    for name in openai_server.__all__:
        assert hasattr(openai_server, name), name
    assert {"LoopbackServer", "Recorded", "count_tokens", "expected_verdict",
            "expected_endings"} <= set(openai_server.__all__)


def test_count_tokens_counts_words_and_punctuation_apart():
    assert count_tokens("") == 0
    assert count_tokens("Hello, world!") == 4
    assert count_tokens("don't stop") == 4  # don ' t stop
    assert count_tokens("\u2014BEGIN CONTINUATION\u2014") == 4
    assert count_tokens("caf\u00e9 na\u00efve") == 2
    assert tokenize("It's 3.5 km.") == ["It", "'", "s", "3", ".", "5", "km", "."]


def test_count_tokens_equals_the_regex_on_random_text():
    rng = random.Random(7)
    alphabet = "ab_9 \t\n\x1c.,!'\"\u2014\u2013\u201c\u201d\u2019\u00e9\u00a0\u4e2d\u00df\u0301\u0663\ud800\x00"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert count_tokens(text) == len(tokenize(text)), repr(text)
    for _ in range(300):
        text = "".join(chr(rng.randint(0, 0x2FFFF)) for _ in range(rng.randint(0, 120)))
        assert count_tokens(text) == len(tokenize(text)), repr(text)


def test_classify():
    assert classify(gen_messages()) == "generation"
    assert classify(judge_messages("a", "b")) == "judge"
    assert classify([{"role": "user", "content": "You are a fiction writer."}]) == "other"


def test_judge_blocks_accept_any_dashes():
    for dash in ("\u2014", "---", "-", "\u2013", ""):
        assert judge_blocks(judge_messages("A b. C d.", "A b. X y.", dash)) == ("A b. C d.", "A b. X y.")
    # a block's own trailing dash survives; the marker's dashes do not
    assert judge_blocks(judge_messages("He said\u2014", "\u2014No.")) == ("He said\u2014", "\u2014No.")
    assert judge_blocks([{"role": "user", "content": "no markers"}]) == ("", "")


def test_expected_verdict_rates():
    verdicts = [expected_verdict(judge_messages(STORY, f"ending {i}")) for i in range(2000)]
    assert set(verdicts) == {"Y", "N"}
    assert 0.25 < verdicts.count("Y") / 2000 < 0.35
    assert expected_verdict(judge_messages(STORY, "x"), yes_rate=1.0) == "Y"
    assert expected_verdict(judge_messages(STORY, "x"), yes_rate=0.0) == "N"
    assert expected_verdict(judge_messages(STORY, "x"), malformed_rate=1.0) == "Maybe."


def test_expected_endings_prefix_stable_and_seeded():
    msgs = gen_messages()
    ten = expected_endings(msgs, 10, seed=1)
    assert expected_endings(msgs, 4, seed=1) == ten[:4]
    assert expected_endings(msgs, 10, seed=2) != ten
    assert all(e.startswith("The end comes when ") for e in ten)
    assert len(set(ten)) > 5
    half = expected_endings(msgs, 200, seed=1, empty_rate=0.5)
    assert 60 < half.count("") < 140
    assert [e for e in half if e] == [e for e, h in zip(expected_endings(msgs, 200, seed=1), half) if h]


# --------------------------------------------------------------------- endpoints


def test_models_and_health(srv):
    assert srv.base_url == f"http://127.0.0.1:{srv.port}"
    status, headers, data = call(srv, "GET", "/v1/models")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    out = json.loads(data)
    assert out["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"]) for m in out["data"]] == [("test-model", "model", "test")]
    assert call(srv, "GET", "/health")[0] == 200


def test_several_models():
    with LoopbackServer(model=["gen", "judge"]) as s:
        ids = [m["id"] for m in json.loads(call(s, "GET", "/v1/models")[2])["data"]]
        assert ids == ["gen", "judge"]
        assert contents(chat(s, {"model": "judge", "messages": [{"role": "user", "content": "x"}]})) == ["OK"]


def test_tokenize(srv):
    text = "Hello, world! It's a test."
    status, out = post(srv, "/tokenize", {"model": "test-model", "prompt": text, "add_special_tokens": False})
    assert status == 200
    assert out["count"] == count_tokens(text) == 10 and len(out["tokens"]) == 10
    assert out["max_model_len"] == 8192
    assert all(isinstance(t, int) for t in out["tokens"])
    assert post(srv, "/tokenize", {"model": "test-model", "prompt": text})[1]["tokens"] == out["tokens"]
    status, out = post(srv, "/tokenize", {"model": "test-model", "messages": gen_messages()})
    assert out["count"] == sum(count_tokens(m["content"]) for m in gen_messages())


def test_tokenize_errors(srv):
    status, out = post(srv, "/tokenize", {"model": "nope", "prompt": "x"})
    assert status == 404 and out["error"]["code"] == 404 and "nope" in out["error"]["message"]
    status, out = post(srv, "/tokenize", {"model": "test-model"})
    assert status == 400 and set(out["error"]) >= {"message", "type", "code"}


def test_generation_choices_are_deterministic(srv):
    msgs = gen_messages()
    body = chat_body(msgs, n=5, temperature=1.2, top_p=0.95, max_tokens=150, seed=3,
                     chat_template_kwargs={"enable_thinking": False})
    out = chat(srv, body)
    assert contents(out) == expected_endings(msgs, 5, seed=3)
    assert contents(chat(srv, body)) == contents(out)
    assert contents(chat(srv, {**body, "n": 2})) == contents(out)[:2]
    assert contents(chat(srv, {**body, "seed": 4})) != contents(out)
    assert contents(chat(srv, {k: v for k, v in body.items() if k != "seed"})) == expected_endings(msgs, 5, None)
    assert out["object"] == "chat.completion" and out["model"] == "test-model"
    assert out["id"].startswith("chatcmpl-") and isinstance(out["created"], int)
    for i, c in enumerate(out["choices"]):
        assert c["index"] == i and c["finish_reason"] == "stop" and c["message"]["role"] == "assistant"


def test_answers_do_not_depend_on_request_order():
    a, b = chat_body(gen_messages("First story."), n=3, seed=1), chat_body(gen_messages("Second."), n=3, seed=1)
    with LoopbackServer() as s1:
        first = [contents(chat(s1, a)), contents(chat(s1, b))]
    with LoopbackServer() as s2:
        second = [contents(chat(s2, b)), contents(chat(s2, a))]
    assert first == second[::-1]


def test_empty_rate():
    msgs = gen_messages()
    with LoopbackServer(empty_rate=0.3) as s:
        got = contents(chat(s, chat_body(msgs, n=100, seed=5)))
    assert got == expected_endings(msgs, 100, seed=5, empty_rate=0.3)
    assert 10 < got.count("") < 50


def test_judge_verdicts(srv):
    for i in range(30):
        msgs = judge_messages(STORY, f"The miller's daughter number {i} runs away.")
        out = chat(srv, chat_body(msgs, temperature=0, max_tokens=10))
        assert contents(out) == [expected_verdict(msgs)]
    srv.yes_rate, srv.malformed_rate = 0.5, 0.2
    got = [contents(chat(srv, chat_body(judge_messages(STORY, f"e{i}"))))[0] for i in range(40)]
    assert got == [expected_verdict(judge_messages(STORY, f"e{i}"), 0.5, 0.2) for i in range(40)]
    assert "Maybe." in got


def test_other_chat_is_ok(srv):
    out = chat(srv, {"model": "test-model", "messages": [{"role": "user", "content": "Say OK."}], "n": 2,
                     "unknown_key": [1, 2]})
    assert contents(out) == ["OK", "OK"]


def test_usage(srv):
    msgs = judge_messages(STORY, "An ending.")
    out = chat(srv, chat_body(msgs))
    u = out["usage"]
    prompt = sum(count_tokens(m["content"]) for m in msgs)
    assert u["prompt_tokens"] == prompt
    assert u["completion_tokens"] == count_tokens(contents(out)[0]) == 1
    assert u["total_tokens"] == prompt + 1
    assert u["prompt_tokens_details"] == {"cached_tokens": 0}
    again = chat(srv, chat_body(msgs))["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 0.9 * prompt < again <= prompt and again % BLOCK_SIZE == 0
    other = chat(srv, chat_body(judge_messages(STORY, "A different ending entirely.")))
    cached = other["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 0.8 * prompt < cached <= other["usage"]["prompt_tokens"]
    fresh = chat(srv, chat_body(judge_messages("Unrelated text. " * 300, "x")))
    assert fresh["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    gen = chat(srv, chat_body(gen_messages(), n=4, seed=0))
    assert gen["usage"]["completion_tokens"] == sum(count_tokens(c) for c in contents(gen))


def test_metrics_counters(srv):
    before = metrics(srv)
    for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:request_success_total"):
        assert before[name] == 0
    msgs = judge_messages(STORY, "An ending.")
    u1 = chat(srv, chat_body(msgs))["usage"]
    u2 = chat(srv, chat_body(msgs))["usage"]
    after = metrics(srv)
    assert after["vllm:request_success_total"] == 2
    assert after["vllm:prefix_cache_queries_total"] == u1["prompt_tokens"] + u2["prompt_tokens"]
    assert after["vllm:prefix_cache_hits_total"] == u2["prompt_tokens_details"]["cached_tokens"] > 0
    assert srv.metrics()["request_success"] == 2


@pytest.mark.parametrize(
    ("body", "status", "raw"),
    [
        ({"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404, None),
        (None, 400, b"{not json"),
        (None, 400, b"[1, 2]"),
        ({"model": "test-model"}, 400, None),
        ({"model": "test-model", "messages": []}, 400, None),
        ({"model": "test-model", "messages": [{"role": "user", "content": "x"}], "n": 0}, 400, None),
        ({"model": "test-model", "messages": [{"role": "user", "content": "x"}], "n": "3"}, 400, None),
        ({"model": "test-model", "messages": [{"role": "user", "content": "x"}], "temperature": -1}, 400, None),
        ({"model": "test-model", "messages": [{"role": "user", "content": "x"}], "max_tokens": 9000}, 400, None),
        ({"model": "test-model", "messages": ["x"]}, 400, None),
    ],
)
def test_chat_errors(srv, body, status, raw):
    got, headers, data = call(srv, "POST", CHAT_PATH, body, raw=raw)
    assert got == status and headers["Content-Type"].startswith("application/json")
    err = json.loads(data)["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert err["code"] == status and err["type"] in ("BadRequestError", "NotFoundError")
    assert srv.requests[-1].status == status


# ------------------------------------------------------------------------ faults

OK_BODY = chat_body(gen_messages(), n=4, seed=1)


def test_fault_status_codes(srv):
    for kind in ("500", "503", "429"):
        srv.fail_next(kind)
        status, headers, out = asyncio.run(aio_post(srv, OK_BODY))
        assert status == int(kind) and out["error"]["code"] == int(kind)
        assert headers.get("Retry-After") == ("0" if kind == "429" else None)
    srv.retry_after = "2"
    srv.fail_next("429")
    assert asyncio.run(aio_post(srv, OK_BODY))[1]["Retry-After"] == "2"
    # the queue is used up: the next request is normal
    assert asyncio.run(aio_post(srv, OK_BODY))[0] == 200
    assert [r.fault for r in srv.requests] == ["500", "503", "429", "429", None]
    assert [r.status for r in srv.requests] == [500, 503, 429, 429, 200]


def test_fault_drop(srv):
    srv.fail_next("drop")
    with pytest.raises((aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
        asyncio.run(aio_post(srv, OK_BODY))
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        srv.fail_next("drop")
        call(srv, "POST", CHAT_PATH, OK_BODY)
    assert asyncio.run(aio_post(srv, OK_BODY))[0] == 200
    assert [(r.fault, r.status) for r in srv.requests] == [("drop", 0), ("drop", 0), (None, 200)]


def test_fault_truncate(srv):
    srv.fail_next("truncate")

    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.post(srv.base_url + CHAT_PATH, json=OK_BODY) as r:
                assert r.status == 200 and r.content_type == "application/json"
                await r.read()

    with pytest.raises(aiohttp.ClientPayloadError):
        asyncio.run(go())
    assert srv.requests[-1].fault == "truncate"


def test_fault_nonjson_and_wrong_content_type(srv):
    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.post(srv.base_url + CHAT_PATH, json=OK_BODY) as r:
                return r.status, r.content_type, await r.read()

    srv.fail_next("nonjson")
    assert asyncio.run(go()) == (200, "text/html", b"<html>oops</html>")
    srv.fail_next("wrong_content_type")
    status, ctype, data = asyncio.run(go())
    assert (status, ctype) == (200, "text/plain")
    assert [c["message"]["content"] for c in json.loads(data)["choices"]] == expected_endings(
        OK_BODY["messages"], 4, 1
    )
    srv.fail_next("wrong_content_type")
    with pytest.raises(aiohttp.ContentTypeError):
        asyncio.run(aio_post(srv, OK_BODY))


def test_fault_few_choices_and_empty_content(srv):
    expected = expected_endings(OK_BODY["messages"], 4, 1)
    srv.fail_next("few_choices")
    assert contents(chat(srv, OK_BODY)) == expected[:2]
    srv.fail_next("empty_content")
    assert contents(chat(srv, OK_BODY)) == ["", "", "", ""]
    assert contents(chat(srv, OK_BODY)) == expected


def test_fault_slow_and_delay(srv):
    srv.slow_seconds = 0.3
    srv.fail_next("slow")
    t = time.monotonic()
    assert contents(chat(srv, OK_BODY)) == expected_endings(OK_BODY["messages"], 4, 1)
    assert time.monotonic() - t >= 0.3
    srv.delay = 0.2
    t = time.monotonic()
    chat(srv, OK_BODY)
    assert time.monotonic() - t >= 0.2
    t = time.monotonic()
    call(srv, "GET", "/health")  # delay is for chat requests only
    assert time.monotonic() - t < 0.2


def test_fail_next_times_and_path(srv):
    srv.fail_next("503", times=2)
    srv.fail_next("500", path="/tokenize")
    assert srv.pending_faults() == 2 and srv.pending_faults("/tokenize") == 1
    assert post(srv, "/tokenize", {"prompt": "a b"})[0] == 500
    assert post(srv, "/tokenize", {"prompt": "a b"})[0] == 200
    assert [post(srv, CHAT_PATH, OK_BODY)[0] for _ in range(3)] == [503, 503, 200]
    with pytest.raises(ValueError, match="fault kind"):
        srv.fail_next("404")
    with pytest.raises(ValueError, match="times"):
        srv.fail_next("500", times=0)
    srv.fail_next("500", times=3)
    srv.clear_faults()
    assert post(srv, CHAT_PATH, OK_BODY)[0] == 200


def test_fault_rates_are_seeded():
    def run() -> list[str | None]:
        with LoopbackServer() as s:
            s.set_fault_rates({"500": 0.3, "429": 0.2}, seed=11)
            for _ in range(40):
                call(s, "POST", CHAT_PATH, OK_BODY)
            assert call(s, "POST", "/tokenize", {"prompt": "x"})[0] == 200  # chat path only
            s.set_fault_rates({})
            assert all(call(s, "POST", CHAT_PATH, OK_BODY)[0] == 200 for _ in range(5))
            return [r.fault for r in s.requests if r.path == CHAT_PATH][:40]

    a = run()
    assert a == run()
    assert 5 < a.count("500") < 20 and 2 < a.count("429") < 16 and a.count(None) > 10
    with pytest.raises(ValueError, match="sum"):
        LoopbackServer().set_fault_rates({"500": 0.6, "503": 0.6})
    with pytest.raises(ValueError, match="fault kind"):
        LoopbackServer().set_fault_rates({"boom": 0.1})


def test_every_fault_kind_is_covered():
    assert set(FAULT_KINDS) == {"500", "503", "429", "drop", "truncate", "nonjson",
                                "wrong_content_type", "few_choices", "empty_content", "slow"}


def test_faults_set_from_another_thread_under_load(srv):
    async def load() -> list[int]:
        async with aiohttp.ClientSession() as s:

            async def one(i: int) -> int:
                try:
                    async with s.post(srv.base_url + CHAT_PATH, json=chat_body(gen_messages(str(i)))) as r:
                        await r.read()
                        return r.status
                except aiohttp.ClientError:
                    return -1

            return await asyncio.gather(*[one(i) for i in range(300)])

    def inject():
        for _ in range(20):
            srv.fail_next("503")
            time.sleep(0.001)

    t = threading.Thread(target=inject)
    t.start()
    statuses = asyncio.run(load())
    t.join()
    assert statuses.count(503) + srv.pending_faults() == 20
    assert statuses.count(200) == 300 - statuses.count(503)


# ----------------------------------------------------------------------- records


def test_records(srv):
    t0 = time.monotonic()
    chat(srv, chat_body(gen_messages(), n=2))
    chat(srv, chat_body(judge_messages("a b", "c d")))
    chat(srv, chat_body(judge_messages("a b", "e f")))
    chat(srv, {"messages": [{"role": "user", "content": "hi"}]})
    post(srv, "/tokenize", {"prompt": "x"})
    call(srv, "GET", "/v1/models")
    call(srv, "POST", CHAT_PATH, raw=b"garbage")
    recs = srv.requests
    assert all(isinstance(r, Recorded) for r in recs)
    assert [r.path for r in recs] == [CHAT_PATH] * 4 + ["/tokenize", "/v1/models", CHAT_PATH]
    assert recs[0].method == "POST" and recs[0].body["n"] == 2 and recs[0].status == 200
    assert recs[0].fault is None and t0 <= recs[0].t <= time.monotonic()
    assert recs[5].body is None and recs[6].body is None and recs[6].status == 400
    assert srv.count() == 7
    assert srv.count(path=CHAT_PATH) == 5
    assert (srv.count(kind="generation"), srv.count(kind="judge"), srv.count(kind="other")) == (1, 2, 2)
    assert srv.count(path="/tokenize", kind="judge") == 0
    recs.clear()  # a copy
    assert srv.count() == 7
    srv.reset_records()
    assert srv.requests == [] and srv.count() == 0


# --------------------------------------------------------------------- lifecycle


def _start_slow_request(srv: LoopbackServer) -> tuple[threading.Thread, list]:
    errors: list = []

    def worker():
        try:
            call(srv, "POST", CHAT_PATH, OK_BODY)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    th = threading.Thread(target=worker)
    th.start()
    deadline = time.monotonic() + 5
    while srv.pending_faults() and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    return th, errors


@pytest.mark.parametrize("how", ["stop", "shutdown_hard"])
def test_stop_is_quick_with_slow_requests_in_flight(how):
    s = LoopbackServer().start()
    s.slow_seconds = 30
    s.fail_next("slow")
    th, errors = _start_slow_request(s)
    t = time.monotonic()
    getattr(s, how)()
    assert time.monotonic() - t < 2
    th.join(timeout=5)
    assert not th.is_alive() and len(errors) == 1
    assert isinstance(errors[0], (http.client.RemoteDisconnected, ConnectionError))
    assert [(r.fault, r.status) for r in s.requests] == [("slow", 0)]
    assert not s.running
    s.stop()  # idempotent


def test_restart_keeps_the_port():
    s = LoopbackServer().start()
    try:
        url = s.base_url
        chat(s, chat_body(judge_messages(STORY, "x")))
        s.stop()
        with pytest.raises(OSError):
            call(s, "GET", "/health")
        s.start()
        assert s.base_url == url and call(s, "GET", "/health")[0] == 200
        assert metrics(s)["vllm:request_success_total"] == 0  # a fresh server, cold cache
        out = chat(s, chat_body(judge_messages(STORY, "x")))
        assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        with pytest.raises(RuntimeError, match="already running"):
            s.start()
    finally:
        s.stop()


def test_start_fails_on_a_busy_port(srv):
    other = LoopbackServer(port=srv.port)
    with pytest.raises(OSError):
        other.start()
    assert not other.running
    other.stop()


def test_throughput_smoke(srv):
    """Many concurrent requests all succeed (not a benchmark: no timing asserted)."""

    async def go() -> list[int]:
        async with aiohttp.ClientSession() as s:

            async def one(i: int) -> int:
                async with s.post(srv.base_url + CHAT_PATH, json=chat_body(judge_messages(STORY, str(i)))) as r:
                    await r.read()
                    return r.status

            return await asyncio.gather(*[one(i) for i in range(500)])

    assert asyncio.run(go()) == [200] * 500
    assert srv.count(kind="judge") == 500


def test_standalone_process():
    proc = subprocess.Popen(
        [sys.executable, "-m", "tension.testing.openai_server", "--port", "0", "--model", "m1",
         "--delay", "0", "--fault-rate", "0.1", "--seed", "1"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:")
        port = int(line.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/v1/models")
        assert json.loads(conn.getresponse().read())["data"][0]["id"] == "m1"
        conn.close()
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
        proc.stdout.close()


# --- capacity (scale-out tests and bench) ----------------------------------------


def test_max_concurrent_makes_requests_wait_their_turn():
    # 6 requests, 2 at a time, 0.1 s each: three rounds, so >= 0.3 s; unlimited, one round
    async def go(srv) -> float:
        async with aiohttp.ClientSession() as s:

            async def one(i: int) -> int:
                async with s.post(srv.base_url + CHAT_PATH, json=chat_body(judge_messages(STORY, str(i)))) as r:
                    await r.read()
                    return r.status

            t0 = time.monotonic()
            assert await asyncio.gather(*[one(i) for i in range(6)]) == [200] * 6
            return time.monotonic() - t0

    with LoopbackServer(delay=0.1, max_concurrent=2) as srv:
        assert asyncio.run(go(srv)) >= 0.3
        assert srv.count(kind="judge") == 6
        srv.stop()
        srv.start()  # a new loop gets a new semaphore
        assert asyncio.run(go(srv)) >= 0.3

def test_scripted_answers_match_by_content_first_match_wins_and_clear(srv):
    body = chat_body(gen_messages("The bell rang twice."), n=3, seed=10)
    srv.script("no such text", "never")
    srv.script("rang twice", lambda m, seed, i: f"{m[-1]['content'][-20:]}|{seed}|{i}")
    srv.script("bell", "later match, not used")
    out = chat(srv, body)
    assert contents(out) == ["The bell rang twice.|10|0", "The bell rang twice.|10|1", "The bell rang twice.|10|2"]
    assert srv.requests[-1].body["seed"] == 10  # still recorded as usual
    srv.clear_scripts()
    assert contents(chat(srv, body)) == expected_endings(body["messages"], 3, 10)


def _state(s: LoopbackServer) -> dict:
    """Everything a test can change on a server, as values (not the thread, loop or lock)."""
    out = copy.deepcopy({k: v for k, v in vars(s).items()
                         if k not in ("_loop", "_thread", "_runner", "_lock", "_rng", "_capacity")})
    out["_rng"] = s._rng.getstate()
    out["_capacity"] = s._capacity is None
    return out


@pytest.mark.parametrize("in_flight", [False, True])
def test_reset_makes_a_used_server_as_new(in_flight):
    """The tests' shared `server` fixture resets one server per test: every knob back to
    the constructor's value, and no trace of the last test (records, faults, scripts,
    prefix cache, token vocabulary, counters, a request still being served)."""
    with LoopbackServer(model=["a", "b"], delay=0.0, yes_rate=0.5, batching=True) as s:
        fresh, url = _state(s), s.base_url
        body = {"model": "a", "messages": judge_messages(STORY, "x")}
        out = chat(s, body)
        assert chat(s, body)["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        post(s, "/tokenize", {"model": "a", "prompt": "Once upon a time"})
        for knob, value in (("delay", 0.01), ("yes_rate", 1.0), ("empty_rate", 0.5), ("malformed_rate", 0.5),
                            ("slow_seconds", 9.0), ("retry_after", None), ("max_model_len", 100), ("record", False),
                            ("prefix_cache_blocks", 1), ("serve_metrics", False), ("serve_tokenize", False),
                            ("batching", False), ("template_quirk", "newlines"), ("api_key", "k"), ("echo_auth", True),
                            ("max_concurrent", 3), ("misbehave", "echo"), ("model", "b"), ("models", ("b",))):
            assert getattr(s, knob) != value, knob
            setattr(s, knob, value)
        if in_flight:  # a request the server is still serving when the test ends
            s.api_key, s.slow_seconds, s.record = None, 30, True
            s.fail_next("slow")
            th, errors = _start_slow_request(s)
        s.added_by_a_test = 1
        s.fail_next("500", times=3)
        s.set_fault_rates({"503": 0.5}, seed=7, path=None)
        s.script("harbour", "scripted")
        assert _state(s) != fresh
        t = time.monotonic()
        s.reset()
        assert time.monotonic() - t < 2 and s.running and s.base_url == url
        assert _state(s) == fresh
        if in_flight:
            th.join(timeout=5)
            assert not th.is_alive() and len(errors) == 1
            assert s.requests == []  # the cancelled request recorded nothing after the reset
        again = chat(s, body)
        assert contents(again) == contents(out) and again["usage"] == out["usage"]  # a cold prefix cache again
        assert metrics(s)["vllm:request_success_total"] == 1 and s.count() == 2


def test_reset_starts_a_stopped_server_on_its_port():
    with LoopbackServer() as s:
        url = s.base_url
        s.shutdown_hard()
        assert s.reset().running and s.base_url == url and call(s, "GET", "/health")[0] == 200


def test_the_in_process_server_serves_threads_at_once():
    """Two blocking runs from two threads share one in-process server (tests/core/test_api_concurrent.py):
    its chat requests in flight (`seeds="arrival"`'s peers) are one set both threads add to and walk.
    Unguarded, a walk met another thread's add ("Set changed size during iteration") and a run failed on CI."""
    from tension.testing.inprocess import InProcessServer

    server = InProcessServer(["test-gen"])
    errors: list[str] = []
    was = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can: the race shows in milliseconds

    def visits() -> None:
        try:
            held = [server._arrive(None, True) for _ in range(50)]  # a set worth walking
            for _ in range(2000):
                server._leave(server._arrive(None, True))
            for v in held:
                server._leave(v)
        except RuntimeError as e:
            errors.append(str(e))

    try:
        threads = [threading.Thread(target=visits) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(was)
    assert errors == []
    assert server._visiting == set()  # every visit left
