"""The HTTP client against the loopback OpenAI-compatible server (real sockets, no mocks)."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from tension.core.errors import ConfigError, RefusedError, RetryBudgetError, ServerError, StatusError, TensionError
from tension.core.llm import client as client_mod
from tension.core.llm.client import ChatResult, Client, ShortAnswerError, Timeouts
from tension.core.llm.failures import RetryPolicy
from tension.core.llm.protocol import ChatRequest
from tension.core.llm.servers import base_root

# tests/conftest.py puts tests/ on sys.path
from tension.testing.openai_server import CHAT_PATH, LoopbackServer, count_tokens, expected_endings

MODEL = "m"
GEN_MESSAGES = [
    {"role": "system", "content": "You are a fiction writer. Write only story text."},
    {"role": "user", "content": "In 2\u20133 sentences, describe how you think this story ends.\n\n"
                                "STORY SO FAR:\nIt was a dark and stormy night."},
]
FAST = RetryPolicy(attempts=4, backoff=0.01, backoff_cap=0.05)


def gen_request(n: int = 4, seed: int | None = 7, **kw) -> ChatRequest:
    return ChatRequest(model=MODEL, messages=GEN_MESSAGES, n=n, seed=seed, temperature=1.2, top_p=0.95,
                       max_tokens=150, **kw)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def loopback():
    with LoopbackServer(model=MODEL) as server:
        yield server


@pytest.fixture
def srv(loopback):
    return loopback.reset()


def chat_once(srv, req):
    """One chat request with a fresh Client (fast retries): (the result, the client)."""

    async def go():
        async with Client(retry=FAST) as c:
            return await c.chat(c.server(srv.base_url), req), c

    return run(go())


def chat_records(srv):
    return [r for r in srv.requests if r.path == CHAT_PATH]


# ------------------------------------------------------------------ plumbing


def test_all_is_exported():
    for name in client_mod.__all__:
        assert hasattr(client_mod, name), name


@pytest.mark.parametrize(
    ("url", "root"),
    [
        ("http://h:8000", "http://h:8000"),
        ("http://h:8000/", "http://h:8000"),
        ("http://h:8000/v1", "http://h:8000"),
        ("http://h:8000/v1/", "http://h:8000"),
        ("http://h:8000/api/v1", "http://h:8000/api"),
    ],
)
def test_a_server_root_drops_v1_and_a_trailing_slash(url, root):
    assert base_root(url) == root
    assert Client().server(url).root == root  # where the client sends its requests


def test_config_objects_defaults():
    assert Timeouts() == Timeouts(connect=10.0, request=600.0)
    assert RetryPolicy().attempts == 8
    with pytest.raises(AttributeError):
        Timeouts().request = 1.0  # frozen


# ---------------------------------------------------------------------- chat


def test_chat_returns_n_choices(srv):
    async def go():
        async with Client(retry=FAST) as c:
            res = await c.chat(c.server(srv.base_url), gen_request(n=5, seed=11))
            return res, c

    res, c = run(go())
    assert isinstance(res, ChatResult)
    assert res.texts == expected_endings(GEN_MESSAGES, 5, 11)
    assert res.finish_reasons == ["stop"] * 5
    assert res.model == MODEL
    assert res.usage.requests == 1
    assert res.usage.prompt_tokens == sum(count_tokens(m["content"]) for m in GEN_MESSAGES)
    assert res.usage.completion_tokens == sum(count_tokens(t) for t in res.texts)
    assert res.seconds > 0
    assert (c.sent, c.retries, res.followups) == (1, 0, 0)
    (rec,) = chat_records(srv)
    assert rec.body["n"] == 5 and rec.body["seed"] == 11 and rec.body["model"] == MODEL
    assert rec.body["messages"] == GEN_MESSAGES


def test_unseeded_request_sends_no_seed(srv):
    async def go():
        async with Client(retry=FAST) as c:
            return await c.chat(c.server(srv.base_url), gen_request(n=2, seed=None))

    res = run(go())
    assert res.texts == expected_endings(GEN_MESSAGES, 2, None)
    (rec,) = chat_records(srv)
    assert "seed" not in rec.body


def test_few_choices_completed_by_a_followup_with_the_seed_moved_on(srv):
    srv.fail_next("few_choices")

    res, c = chat_once(srv, gen_request(n=4, seed=7))
    assert res.followups == 1
    assert c.retries == 0
    assert c.sent == 2
    first, second = chat_records(srv)
    assert first.fault == "few_choices" and second.fault is None
    assert (first.body["n"], first.body["seed"]) == (4, 7)
    # the follow-up asks only for the two missing choices, with the seed moved past the first two
    assert (second.body["n"], second.body["seed"]) == (2, 9)
    assert len(res.texts) == 4
    assert res.texts == expected_endings(GEN_MESSAGES, 2, 7) + expected_endings(GEN_MESSAGES, 2, 9)
    assert res.usage.requests == 2


def test_two_short_answers_in_a_row(srv):
    srv.fail_next("few_choices", times=2)

    res, c = chat_once(srv, gen_request(n=4, seed=100))
    # 4 asked -> 2 given; 2 asked -> 1 given; 1 asked -> 1 given
    assert res.followups == 2
    assert [(r.body["n"], r.body["seed"]) for r in chat_records(srv)] == [(4, 100), (2, 102), (1, 103)]
    assert len(res.texts) == 4
    assert res.texts == (expected_endings(GEN_MESSAGES, 2, 100) + expected_endings(GEN_MESSAGES, 1, 102)
                         + expected_endings(GEN_MESSAGES, 1, 103))


def test_few_choices_without_seed_sends_no_seed(srv):
    srv.fail_next("few_choices")

    res, c = chat_once(srv, gen_request(n=6, seed=None))
    assert res.followups == 1 and len(res.texts) == 6
    _, second = chat_records(srv)
    assert second.body["n"] == 3
    assert "seed" not in second.body


@pytest.mark.parametrize("kind", ["500", "503", "drop", "truncate", "nonjson"])
def test_transient_faults_are_retried(srv, kind):
    srv.fail_next(kind)

    res, c = chat_once(srv, gen_request(n=3, seed=1))
    assert res.texts == expected_endings(GEN_MESSAGES, 3, 1)
    assert c.retries == 1
    assert c.sent == 2
    assert res.followups == 0
    assert srv.count(path=CHAT_PATH) == 2
    assert [r.fault for r in chat_records(srv)] == [kind, None]


def test_several_faults_in_a_row(srv):
    srv.fail_next("503")
    srv.fail_next("drop")
    srv.fail_next("500")

    res, c = chat_once(srv, gen_request(n=2))
    assert len(res.texts) == 2
    assert (c.sent, c.retries) == (4, 3)


def test_wrong_content_type_with_valid_json_is_accepted(srv):
    srv.fail_next("wrong_content_type")

    res, c = chat_once(srv, gen_request(n=3, seed=5))
    assert res.texts == expected_endings(GEN_MESSAGES, 3, 5)
    assert (c.sent, c.retries) == (1, 0)


def test_an_all_empty_answer_is_asked_again(srv):
    srv.fail_next("empty_content")

    res, c = chat_once(srv, gen_request(n=3, seed=2))
    assert res.texts == expected_endings(gen_request(n=3, seed=2).messages, 3, 2)
    assert (c.sent, c.retries, res.followups) == (2, 1, 0)


def test_an_answer_that_stays_empty_is_the_models_answer(srv):
    srv.fail_next("empty_content", times=3)  # more than EMPTY_ANSWER_RETRIES

    res, c = chat_once(srv, gen_request(n=3))
    assert res.texts == ["", "", ""]
    assert (c.sent, c.retries, res.followups) == (3, 2, 0)


def test_429_honours_retry_after(srv):
    srv.retry_after = "1"
    srv.fail_next("429")

    async def go():
        async with Client(retry=RetryPolicy(attempts=3, backoff=0.01, backoff_cap=5.0)) as c:
            t0 = time.monotonic()
            res = await c.chat(c.server(srv.base_url), gen_request(n=1))
            return res, c, time.monotonic() - t0

    res, c, elapsed = run(go())
    assert len(res.texts) == 1
    assert c.retries == 1
    assert elapsed >= 0.9
    first, second = chat_records(srv)
    assert first.status == 429
    assert second.t - first.t >= 0.9


def test_retry_after_beyond_the_time_budget_gives_up_at_once(srv):
    srv.retry_after = "100"
    srv.fail_next("429")

    async def go():
        async with Client(retry=RetryPolicy(attempts=5, backoff=0.01, backoff_cap=60.0,
                                            total_seconds=5.0)) as c:
            t0 = time.monotonic()
            with pytest.raises(RetryBudgetError) as ei:
                await c.chat(c.server(srv.base_url), gen_request(n=1))
            return ei.value, c, time.monotonic() - t0

    err, c, elapsed = run(go())
    assert elapsed < 2.0
    assert "1 attempt(s)" in str(err)
    assert srv.count(path=CHAT_PATH) == 1
    assert c.retries == 0


def test_bad_request_is_not_retried(srv):
    async def go():
        async with Client(retry=FAST) as c:
            with pytest.raises(StatusError) as ei:
                await c.chat(c.server(srv.base_url), gen_request(n=0))
            return ei.value, c

    err, c = run(go())
    assert err.status == 400
    assert "n: expected an int >= 1, got 0" in str(err)
    assert "HTTP 400" in str(err)
    assert err.url.endswith(CHAT_PATH)
    assert isinstance(err, ServerError) and isinstance(err, TensionError)
    assert srv.count(path=CHAT_PATH) == 1
    assert (c.sent, c.retries) == (1, 0)


def test_unknown_model_is_not_retried(srv):
    async def go():
        async with Client(retry=FAST) as c:
            with pytest.raises(RefusedError) as ei:
                await c.chat(c.server(srv.base_url), ChatRequest(model="nope", messages=GEN_MESSAGES, n=1))
            return ei.value

    err = run(go())
    assert err.status == 404 and err.missing == "model"
    assert "The model `nope` does not exist." in str(err)
    assert isinstance(err, ConfigError) and not isinstance(err, StatusError)  # the run stops; no story fails alone
    assert srv.count(path=CHAT_PATH) == 1


def test_tokenize_tells_a_missing_model_from_a_missing_endpoint():
    async def go(srv, model):
        async with Client(retry=FAST) as c:
            with pytest.raises(RefusedError) as ei:
                await c.tokenize(c.server(srv.base_url), model, "Some text.")
            return ei.value

    with LoopbackServer(model="m") as srv:
        wrong_model = run(go(srv, "no-such-model"))
    with LoopbackServer(model="m", serve_tokenize=False) as srv:
        no_endpoint = run(go(srv, "m"))
    assert wrong_model.missing == "model" and "does not exist" in str(wrong_model)
    assert "--tokenizer" not in str(wrong_model) and "no /tokenize" not in str(wrong_model)
    assert no_endpoint.missing == "endpoint" and "no /tokenize endpoint" in str(no_endpoint)
    assert "--tokenizer" in str(no_endpoint)


def test_a_key_the_server_echoes_is_redacted_from_the_error():
    key = "sk-test-echoed-4f2a9c"

    async def go(srv):
        async with Client(retry=FAST, api_key=key) as c:
            with pytest.raises(RefusedError) as ei:
                await c.models(c.server(srv.base_url))
            return ei.value

    with LoopbackServer(model="m", api_key="sk-the-right-one", echo_auth=True) as srv:
        err = run(go(srv))
        assert srv.requests[-1].status == 401
    assert err.missing == "key" and err.status == 401
    assert key not in str(err) and key not in err.body and "Bearer ***" in str(err)


def test_an_unreachable_server_is_told_once_at_once_with_its_deadline():
    told = []

    async def go(url):
        async with Client(retry=RetryPolicy(attempts=3, backoff=0.01, backoff_cap=0.02), notice=told.append) as c:
            reqs = [c.chat(c.server(url), gen_request()) for _ in range(5)]
            return await asyncio.gather(*reqs, return_exceptions=True)

    with LoopbackServer(model="m") as srv:
        url = srv.base_url
    results = run(go(url))  # the server is gone: nothing listens on its port
    assert all(isinstance(r, RetryBudgetError) for r in results)
    assert len(told) == 1, told  # five requests, one server, one notice
    assert url in told[0] and "retrying up to 2 more time(s), until about" in told[0]


def test_retry_budget_by_attempts(srv):
    srv.fail_next("503", times=10)

    async def go():
        async with Client(retry=RetryPolicy(attempts=3, backoff=0.01)) as c:
            with pytest.raises(RetryBudgetError) as ei:
                await c.chat(c.server(srv.base_url), gen_request(n=1))
            return ei.value, c

    err, c = run(go())
    assert "3 attempt(s)" in str(err)
    assert "503" in str(err)
    assert isinstance(err, ServerError)
    assert err.last is not None and "injected fault 503" in str(err.last)
    assert srv.count(path=CHAT_PATH) == 3
    assert (c.sent, c.retries) == (3, 2)


def test_retry_budget_by_total_seconds_zero(srv):
    srv.fail_next("503", times=10)

    async def go():
        async with Client(retry=RetryPolicy(attempts=10, backoff=0.01, total_seconds=0.0)) as c:
            with pytest.raises(RetryBudgetError) as ei:
                await c.chat(c.server(srv.base_url), gen_request(n=1))
            return ei.value

    err = run(go())
    assert "1 attempt(s)" in str(err)
    assert srv.count(path=CHAT_PATH) == 1


def test_retry_budget_by_total_seconds_stops_before_attempts(srv):
    srv.fail_next("503", times=20)

    async def go():
        policy = RetryPolicy(attempts=10, backoff=0.2, backoff_cap=10.0, total_seconds=0.5)
        async with Client(retry=policy, seed=0) as c:
            t0 = time.monotonic()
            with pytest.raises(RetryBudgetError) as ei:
                await c.chat(c.server(srv.base_url), gen_request(n=1))
            return ei.value, time.monotonic() - t0

    err, elapsed = run(go())
    n = srv.count(path=CHAT_PATH)
    # waits are 0.2·2^i·U(0.5, 1): the third wait alone passes 0.5 s
    assert 1 <= n <= 3  # 1 only if the machine is very slow
    assert f"{n} attempt(s)" in str(err)
    assert elapsed < 1.5  # never sleeps past the budget


def test_slow_answer_times_out_and_is_retried(srv):
    srv.slow_seconds = 2.0
    srv.fail_next("slow")

    async def go():
        async with Client(timeouts=Timeouts(request=0.3), retry=FAST) as c:
            t0 = time.monotonic()
            res = await c.chat(c.server(srv.base_url), gen_request(n=2, seed=3))
            return res, c, time.monotonic() - t0

    res, c, elapsed = run(go())
    assert res.texts == expected_endings(GEN_MESSAGES, 2, 3)
    assert c.retries == 1
    assert elapsed < 1.8  # did not wait for the slow answer
    # let the abandoned slow handler finish, so its record cannot leak into the next test
    deadline = time.monotonic() + 5
    while not any(r.fault == "slow" for r in srv.requests) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r.fault for r in chat_records(srv)] == [None, "slow"]  # in order of completion


def test_trailing_v1_in_base_url(srv):
    async def go():
        async with Client(retry=FAST) as c:
            a = await c.chat(c.server(srv.base_url + "/v1"), gen_request(n=1, seed=2))
            b = await c.chat(c.server(srv.base_url + "/v1/"), gen_request(n=1, seed=2))
            m = await c.models(c.server(srv.base_url + "/v1"))
            t = await c.tokenize(c.server(srv.base_url + "/v1"), MODEL, "Hi, you.")
            return a, b, m, t

    a, b, m, t = run(go())
    assert a.texts == b.texts == expected_endings(GEN_MESSAGES, 1, 2)
    assert m == [MODEL]
    assert t == 4
    assert {r.path for r in srv.requests} == {CHAT_PATH, "/v1/models", "/tokenize"}


def test_models(srv):
    async def go():
        async with Client() as c:
            return await c.models(c.server(srv.base_url))

    assert run(go()) == [MODEL]


@pytest.mark.parametrize(
    "text",
    ["Hi, you.", "", "It was a dark and stormy night; the rain fell in torrents\u2014except at "
     "occasional intervals.", "Caf\u00e9 \u201cquoted\u201d 123 don't"],
)
def test_tokenize_counts_match_the_server_tokenizer(srv, text):
    async def go():
        async with Client(retry=FAST) as c:
            return await c.tokenize(c.server(srv.base_url), MODEL, text)

    assert run(go()) == count_tokens(text)
    (rec,) = [r for r in srv.requests if r.path == "/tokenize"]
    assert rec.body["prompt"] == text and rec.body["model"] == MODEL


# ------------------------------------------------- a tiny server of our own


class TinyServer:
    """An aiohttp app on the test's own loop: records headers; serves only /v1/models."""

    def __init__(self):
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    async def _models(self, request: web.Request) -> web.Response:
        self.headers.append(dict(request.headers))
        self.paths.append(request.path)
        return web.json_response({"object": "list", "data": [{"id": "tiny"}]})

    async def __aenter__(self):
        app = web.Application()
        app.router.add_get("/v1/models", self._models)

        @web.middleware
        async def record(request, handler):
            self.paths.append(request.path)
            return await handler(request)

        app.middlewares.append(record)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc):
        await self.runner.cleanup()


def test_authorization_header_and_repr_hide_the_key():
    key = "sk-test-very-secret-123"

    async def go():
        async with TinyServer() as tiny:
            c = Client(api_key=key)
            r0 = repr(c)
            async with c:
                r1 = repr(c)
                models = await c.models(c.server(tiny.base_url))
            r2 = repr(c)
            return tiny, models, (r0, r1, r2)

    tiny, models, reprs = run(go())
    assert models == ["tiny"]
    (h,) = tiny.headers
    assert h["Authorization"] == f"Bearer {key}"
    for r in reprs:
        assert key not in r
        assert "secret" not in r
    assert "unopened" in reprs[0] and "open" in reprs[1] and "closed" in reprs[2]


def test_no_authorization_header_without_a_key():
    async def go():
        async with TinyServer() as tiny:
            async with Client() as c:
                await c.models(c.server(tiny.base_url))
            return tiny

    tiny = run(go())
    (h,) = tiny.headers
    assert "Authorization" not in h


def test_tokenize_without_endpoint_names_the_tokenizer_flag():
    async def go():
        async with TinyServer() as tiny:
            async with Client(retry=FAST) as c:
                with pytest.raises(ServerError) as ei:
                    await c.tokenize(c.server(tiny.base_url), "tiny", "some text")
                return ei.value, tiny, c

    err, tiny, c = run(go())
    assert not isinstance(err, StatusError)
    assert "--tokenizer" in str(err)
    assert "/tokenize" in str(err)
    assert "404" in str(err)
    assert isinstance(err, RefusedError) and err.missing == "endpoint" and err.status == 404
    assert tiny.paths.count("/tokenize") == 1  # not retried
    assert c.retries == 0


# ------------------------------------------------------------------ lifecycle


def test_using_the_client_after_close_raises(srv):
    async def go():
        c = Client(retry=FAST)
        async with c:
            await c.models(c.server(srv.base_url))
        with pytest.raises(RuntimeError):
            await c.chat(c.server(srv.base_url), gen_request(n=1))
        with pytest.raises(RuntimeError):
            await c.models(c.server(srv.base_url))
        with pytest.raises(RuntimeError, match="closed"):
            async with c:
                pass
        await c.aclose()  # idempotent
        return c

    c = run(go())
    assert "closed" in repr(c)
    assert srv.count() == 1


def test_using_the_client_before_opening_raises(srv):
    async def go():
        c = Client()
        with pytest.raises(RuntimeError, match="async with"):
            await c.models(c.server(srv.base_url))

    run(go())
    assert srv.count() == 0


def test_short_answers_that_never_complete_exhaust_the_followup_budget(srv):
    srv.fail_next("few_choices", times=10)  # n=1 -> 0 choices, every time

    async def go():
        async with Client(retry=RetryPolicy(attempts=2, backoff=0.01)) as c:
            with pytest.raises(RetryBudgetError) as ei:
                await c.chat(c.server(srv.base_url), gen_request(n=1, seed=4))
            return ei.value, c

    err, c = run(go())
    # the first request and `attempts` follow-ups, each asking for the one missing choice
    assert srv.count(path=CHAT_PATH) == 3
    assert [r.body["n"] for r in chat_records(srv)] == [1, 1, 1]
    assert "asked for 1 choices, got 0 after 2 follow-up requests" in str(err)
    assert err.spent.requests == 3  # what the request spent is still the run's


def test_followup_counter_matches_followups_sent_when_giving_up(srv):
    srv.fail_next("few_choices", times=10)

    async def go():
        async with Client(retry=RetryPolicy(attempts=2, backoff=0.01)) as c:
            with pytest.raises(ShortAnswerError) as ei:
                await c.chat(c.server(srv.base_url), gen_request(n=1, seed=4))
            return ei.value

    err = run(go())
    sent_followups = srv.count(path=CHAT_PATH) - 1
    assert sent_followups == 2
    assert err.followups == sent_followups


def test_entering_an_open_client_again_raises(srv):
    async def go():
        c = Client()
        async with c:
            with pytest.raises(RuntimeError):
                await c.__aenter__()
            assert (await c.models(c.server(srv.base_url))) == [MODEL]  # still open, on its first session

    run(go())


def test_zero_attempts_is_a_clear_error(srv):
    async def go():
        async with Client(retry=RetryPolicy(attempts=0)) as c:
            await c.models(c.server(srv.base_url))

    with pytest.raises((ValueError, TensionError)):
        run(go())
