"""A deterministic OpenAI-compatible (vLLM-flavoured) server for tests and benchmarks.

It stands in for a vLLM server: the same endpoints, the same error JSON, the same
prefix-cache counters, but answers come from hashes, not from a model, so a test can
compute every answer in advance and runs take milliseconds. It imports nothing from
`tension`: it is a fixed point the code under test is measured against.

In a test::

    with LoopbackServer(model="test-model") as srv:
        base = srv.base_url                       # "http://127.0.0.1:PORT" (no /v1)
        srv.fail_next("503", times=2)             # the next two chat requests fail
        ...
        assert srv.count(kind="judge") == 100

As a process (benchmarks, kill/resume tests)::

    python -m tension.testing.openai_server --port 8123 [--model M] [--delay S] [--max-concurrent K]
                                  [--fault-rate 0.1 --seed 1]

prints ``listening on http://127.0.0.1:PORT`` (flushed) and serves until SIGINT/SIGTERM.

Endpoints
---------
- ``GET /v1/models``; ``GET /health``; ``GET /metrics`` (Prometheus text:
  ``vllm:prefix_cache_queries_total``, ``vllm:prefix_cache_hits_total`` (tokens),
  ``vllm:request_success_total``, ``vllm:prompt_tokens_total``,
  ``vllm:generation_tokens_total``); in the llama.cpp dialect llama-server's own
  ``llamacpp:prompt_tokens_total`` and ``llamacpp:tokens_predicted_total`` (no
  prefix-cache counter, as ``llama-server --metrics``).
- ``POST /tokenize`` with ``prompt`` (or ``messages``): ``{"count", "max_model_len",
  "tokens"}``. Tokens are the matches of ``\\w+|[^\\w\\s]`` (`count_tokens`).
- With ``batching=True`` (``--batching``), vLLM's extras that the judge's batched
  path needs (core/llm/batch.py): ``/tokenize`` with ``messages`` renders the
  server's chat template (`render_template`: ``<|role|>`` lines, the assistant line
  with add_generation_prompt, an empty think block when
  ``chat_template_kwargs.enable_thinking`` is false) and tokenizes that text;
  ``POST /detokenize`` turns token ids back into text (the ids are a vocabulary the
  server grows as it meets pieces, so they are reversible); ``POST /v1/completions``
  takes a prompt or a list of prompts, reads each back into the messages it renders
  and answers each as the chat endpoint would (choice ``p * n + i``), with the summed
  usage; /v1/models then says ``owned_by: vllm``, as vLLM does. Without it, those
  paths are FastAPI's 404, as on a server that lacks them, and models are ``owned_by: test``.
- ``POST /v1/chat/completions``; with ``"stream": true`` the same answer as
  server-sent events (one per word, usage last with ``stream_options.include_usage``).
  The request's kind is decided by its system message:
  "fiction writer" → generation, "literary judge" → judge, anything else → other.

  * generation: choice i = `expected_endings` (sha256 of last user message, seed, i);
    a fraction ``empty_rate`` of choices is "" (chosen by the same hash).
  * judge: "Y"/"N" from sha256 of the CONTINUATION and PREDICTED blocks
    (`expected_verdict`), "Maybe." for a fraction ``malformed_rate``.
  * other: "OK".
  * scripted (any kind): a responder added with `LoopbackServer.respond` (a function
    of the messages) or `LoopbackServer.script` (a substring and its answer) answers
    first when it matches (answers by prompt content, e.g. a reader's JSON).

  Content depends only on the request body, never on request order. ``usage`` counts
  message contents with `count_tokens`; ``prompt_tokens_details.cached_tokens`` is the
  longest token prefix shared with an earlier prompt, in whole blocks of
  `BLOCK_SIZE` tokens, as vLLM's prefix cache reports it.

Misbehaviour (`MISBEHAVIOURS`), a server whose model does not do the task, set with
``misbehave=`` (or ``--misbehave``); scripted answers still come first:

==================== ==========================================================
"think"              every answer opens a reasoning trace that max_tokens cuts:
                     ``<think>\nOkay, the user wants …``, finish_reason "length"
                     (a reasoning model whose server ignores enable_thinking)
"random"             every answer is random-looking words from a hash of the
                     request (a simulator, or the wrong model behind the URL)
"always_y"           the judge answers "Y" to every ending
"identical"          a generation request's n choices are all choice 0
                     (temperature or seed not honoured)
"echo"               every answer repeats the last user message (a wrong chat
                     template): a judge echoes its prompt, a writer the idea
"html200"            every POST (chat, completions, /tokenize) answers HTTP 200
                     with an HTML page (a proxy's welcome page in front of no
                     model); /v1/models, /health and /metrics stay well
"null_content"       every generation choice has ``"content": null`` (a server
                     that loses the text); judge answers are normal
==================== ==========================================================

Misnumbered choices (`MISNUMBERINGS`), set with ``misnumber=`` (on the paths in
``misnumber_paths``, default chat and completions; a streamed answer follows its chat
answer), each choice's text in place but its ``index`` wrong, as a proxy may send
(an answer rule, tests/testing/answers.py `renumbered`):

==================== ==========================================================
"zero"               every choice ``"index": 0``
"duplicate"          indexes 0, 0, 1, …, k − 2 (one choice's index repeated)
"out_of_range"       the last choice's index is k (one past the end)
"missing"            the choice at index 1 left out, the others keep theirs
                     (0, 2, 3, …); an answer of one choice is left as it is
==================== ==========================================================

``answer_model`` names that model in every answer in place of the one asked (a
proxy substituting models; an answer rule too); ``fixed_usage=(prompt, completion,
cached)`` puts that ``usage`` in every answer (a stub server's fixed usage; cached
over prompt, a server that counts its cache wrong; an answer rule too). On the wire
only (`WireSettings`, which the in-process door has not): ``stream_always=True`` answers every chat request as server-sent events, asked or
not (a proxy that forces streaming); ``stream_ignored=True`` answers a chat request
asking ``"stream": true`` with the plain JSON body (a server that ignores ``stream``); ``serve_completions=False`` makes
``/v1/completions`` FastAPI's 404 even with ``batching`` (a server that renders its
template but lacks the batched path).

``serve_health=False`` makes ``/health`` FastAPI's 404, as on a server that lacks it
(vllm-router health-checks its workers there); ``serve_usage=False`` leaves ``usage``
out of every answer, as some OpenAI-compatible servers do.

Errors are vLLM-style JSON ``{"error": {"message", "type", "param", "code"}}``: 400 for
a body that is not a JSON object, missing/invalid ``messages``, ``n`` < 1, negative
temperature, a prompt plus ``max_tokens`` over ``max_model_len``; 404 for an unknown model
(vLLM's ``_check_model``: "The model `X` does not exist.", type NotFoundError, on chat
and /tokenize alike). A route the server does not have (``serve_tokenize=False``: a
server without /tokenize) is FastAPI's 404 ``{"detail": "Not Found"}``, which names no
model. With ``api_key`` set, a request without ``Authorization: Bearer <api_key>`` gets
vLLM's 401 ``{"error": "Unauthorized"}``; with ``echo_auth=True`` as well, the 401 body
echoes the Authorization header it got, as some proxies do (a key leak to guard against).

``dialect="llamacpp_python"`` answers as llama-cpp-python's own server
(``python -m llama_cpp.server``) does, as measured
(../shared/reviews/external-servers-2026-12-02.md, section 1): /v1/models says
``owned_by: "me"`` with no context and no ``meta``; ``n`` is dropped (always one
choice); ``grammar`` and ``response_format`` json_object are honoured and
``structured_outputs`` ignored, as llama.cpp's; ``/tokenize``, ``/health``,
``/props`` and ``/metrics`` are 404, and ``POST /extras/tokenize/count`` counts
``{"input": text}`` as ``{"count": N}`` (`COUNT_PATH`).

``dialect="llamacpp"`` (``--dialect llamacpp``) answers as llama.cpp's
``llama-server`` does, as measured (../shared/reviews/external-servers-2026-12-01.md):
/v1/models says ``owned_by: llamacpp`` with ``meta.n_ctx`` (no ``max_model_len``);
``GET /props`` gives ``total_slots`` (``slots``, default 4); ``n`` above the slots is
a 400 ``Field 'n': Value must be between 1 <= value <= 4, but got 8``; ``usage``
counts one choice; /tokenize reads ``content`` and answers ``{"tokens": [...]}`` (to a
body without ``content``, vLLM's ``prompt``, ``{"tokens": []}``); ``structured_outputs``
is ignored but ``grammar`` (``root ::= "Y" | "N"``) and ``response_format``
``json_object`` are honoured; a prompt over the context is a 400
``exceed_context_size_error``; a chat request of n choices holds n slots while it is
served (``delay`` seconds), the rest wait in its queue. ``max_n`` > 0 (any dialect)
returns at most that many choices, silently (a server that honours ``n`` only partly);
with ``n_refusal`` as well, n above ``max_n`` is a 400 whose message is
``n_refusal.format(max_n=…, n=…)`` (a hosted API's or a proxy's own wording, or
one naming neither). ``stream_cut`` > 0 ends a stream with ``data: [DONE]`` after
that many words, with no finish event (llama-cpp-python's ``interrupt_requests``
cuts a stream off as soon as another request waits). ``prefix`` (``"/api"``) serves every path under it as well, as
a hosted gateway does (``https://host/api/v1``); records show the path without it.

Faults (`FAULT_KINDS`), queued with `LoopbackServer.fail_next` or drawn at random with
`LoopbackServer.set_fault_rates`; what a plain aiohttp client sees:

==================== ==========================================================
"500", "503"         that status with error JSON
"429"                429 with error JSON and ``Retry-After: <retry_after>``
"drop"               connection closed, no response (ServerDisconnectedError)
"truncate"           200, application/json, full Content-Length, half the body,
                     then the connection closes (ClientPayloadError on read)
"nonjson"            200, text/html ``<html>oops</html>``
"wrong_content_type" 200, the normal JSON body, ``Content-Type: text/plain``
"few_choices"        the normal answer with only the first ``n // 2`` choices
"empty_content"      the normal answer with every choice's content ""
"slow"               sleeps ``slow_seconds`` (default 5), then answers normally
==================== ==========================================================
"""

from __future__ import annotations

import argparse
import asyncio
import json as _stdjson
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from aiohttp import web

# the answers' rules, shared with the in-process transport (tests/testing/answers.py and its parts)
from .answers import AnswerModel
from .faults import FAULT_STATUS
from .info import BLOCK_SIZE, PREFIX_CHARS
from .messages import classify, parse_rendered, render_template
from .records import Recorded
from .rules import HTML_PAGE, expected_endings, expected_verdict, judge_blocks
from .settings import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    COUNT_PATH,
    FAULT_KINDS,
    KINDS,
    MAX_MODEL_LEN,
    MISBEHAVIOURS,
    MISNUMBERINGS,
    TRANSIENT_FAULTS,
    AnswerSettings,
    WireSettings,
    route,
)
from .streaming import stream_events
from .tokens import count_tokens, tokenize
from .validation import BadRequest, error_payload, is_int

try:  # msgspec is a dependency of the project, but the server does not insist on it
    import msgspec

    _encode = msgspec.json.encode
    _decode = msgspec.json.decode
    _DecodeError: tuple[type[BaseException], ...] = (msgspec.DecodeError,)
except ImportError:  # pragma: no cover - exercised only without msgspec

    def _encode(obj: Any) -> bytes:
        return _stdjson.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()

    def _decode(data: bytes) -> Any:
        return _stdjson.loads(data)

    _DecodeError = (ValueError, UnicodeDecodeError)

__all__ = [
    "BLOCK_SIZE",
    "CHAT_PATH",
    "COMPLETIONS_PATH",
    "COUNT_PATH",
    "FAULT_KINDS",
    "HTML_PAGE",
    "KINDS",
    "MAX_MODEL_LEN",
    "MISNUMBERINGS",
    "PREFIX_CHARS",
    "TRANSIENT_FAULTS",
    "LoopbackServer",
    "AnswerSettings",
    "Recorded",
    "WireSettings",
    "classify",
    "count_tokens",
    "expected_endings",
    "expected_verdict",
    "judge_blocks",
    "render_template",
    "parse_rendered",
    "tokenize",
]

# -------------------------------------------------------------------------- server


class LoopbackServer(AnswerModel):
    """An aiohttp OpenAI-compatible server on 127.0.0.1 in a background thread.

    `model` is one served model name or several. Its settings are two records
    (tests/testing/settings.py): `settings`, an `AnswerSettings` (what either door
    answers: `empty_rate`, `yes_rate`, `dialect`, `delay`, `slow_seconds`,
    `retry_after`, …), and `wire`, a `WireSettings` (this server's own: `port`,
    `max_concurrent`, `api_key`, `prefix`, `rate_limit`, …); keywords name their
    fields. Every one is also a plain attribute, settable at any time from any
    thread (`max_concurrent` and `prefix` before start). `max_concurrent` > 0 serves
    at most that many chat requests at once: a replica's capacity, for the scale-out
    tests and bench. `misbehave` (one of `MISBEHAVIOURS`, or None) makes the model
    not do the task. `reset` makes a used server as new (the tests share one,
    tests/conftest.py).
    """

    def __init__(self, model: str | Sequence[str] = "test-model", settings: AnswerSettings | None = None,
                 wire: WireSettings | None = None, **knobs: Any) -> None:
        """`model`: the served name(s); `settings` (an `AnswerSettings`, what either door
        answers) and `wire` (a `WireSettings`, this server's own), the defaults without
        them, with any of their fields given as keywords replaced, each in its record."""
        models: tuple[str, ...] = (model,) if isinstance(model, str) else tuple(model)
        if not models:
            raise ValueError("LoopbackServer needs at least one model name")
        answers, own = route("LoopbackServer", knobs, (AnswerSettings, WireSettings))
        self.settings = AnswerSettings.replaced("LoopbackServer", settings, answers)
        self.wire = WireSettings.replaced("LoopbackServer", wire, own)
        self.host = self.wire.host
        self.port = self.wire.port
        # The knobs, plain attributes a test may set at any time; `reset` restores them.
        self._knobs: dict[str, Any] = {
            "models": models, "model": models[0], **self.settings.values(),
            **{k: v for k, v in self.wire.values().items() if k not in ("host", "port")},
        }
        self.models: tuple[str, ...]
        self.model: str
        vars(self).update(self._knobs)
        self._init_model_state()  # records, faults, scripts, vocabulary, prefix cache, counters (answers.py)
        self._rate_window: tuple[float, int] | None = None  # `rate_limit`: (window start, chat requests in it)
        self._rate_refused = 0
        self._capacity: asyncio.Semaphore | None = None
        self._slot_free: asyncio.Condition | None = None
        self._slots_used = 0
        self._peak_slots = 0
        self._active = 0  # requests being served (in the server's loop)

        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        """"http://127.0.0.1:PORT", the server root (append /v1 for the OpenAI API)."""
        if not self.port:
            raise RuntimeError("LoopbackServer is not started; call start() or use `with`")
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> LoopbackServer:
        """Bind and serve; returns once the port is open. After stop(), start() serves
        again on the same port (so `base_url` stays valid) with an empty prefix cache
        and zeroed /metrics counters; records and faults are kept."""
        if self.running:
            raise RuntimeError("LoopbackServer is already running")
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                import uvloop

                loop = uvloop.new_event_loop()
            except ImportError:  # pragma: no cover
                loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                loop.run_until_complete(self._astart())
            except BaseException as exc:  # noqa: BLE001 - handed to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                self._drain_and_close(loop)

        self._init_counters()  # an empty prefix cache, counters at 0
        self._capacity = None  # a new loop: a new semaphore
        self._slot_free = None
        self._slots_used = self._peak_slots = 0
        self._thread = threading.Thread(target=run, name=f"LoopbackServer:{self.port}", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self, grace: float = 0.1) -> None:
        """Stop serving. In-flight requests get `grace` seconds, then are cancelled
        (their connections close without a response). Idempotent."""
        loop, thread = self._loop, self._thread
        if thread is None or loop is None or not thread.is_alive():
            self._thread = None
            return
        try:
            fut = asyncio.run_coroutine_threadsafe(self._astop(grace), loop)
            fut.result(timeout=grace * 4 + 5)
        except Exception:  # noqa: BLE001 - shutting down regardless
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = None

    def shutdown_hard(self) -> None:
        """Abort every connection at once (clients see a disconnect), then stop."""
        loop = self._loop
        if self.running and loop is not None:

            def abort_all() -> None:
                server = self._runner.server if self._runner is not None else None
                for conn in list(getattr(server, "_connections", ()) or ()):
                    tr = conn.transport
                    if tr is not None:
                        tr.abort()

            done = threading.Event()
            loop.call_soon_threadsafe(lambda: (abort_all(), done.set()))
            done.wait(timeout=5)
        self.stop(grace=0.01)

    def reset(self) -> LoopbackServer:
        """As a new server on the same port, for one shared by many tests: every knob
        as the constructor set it (attributes a test added are dropped), no records,
        faults, scripted answers, token vocabulary or prefix cache, /metrics counters
        at 0. A request still being served (left behind by the last test) is cancelled
        by a restart, so that it records nothing in the next test; a stopped server
        starts again."""
        if self.running and self._active:
            self.stop()
        for k in [k for k in vars(self) if not k.startswith("_") and k not in self._knobs
                  and k not in ("host", "port", "responders", "settings", "wire")]:
            delattr(self, k)
        vars(self).update(self._knobs)
        with self._lock:
            self._init_records()
            self._init_faults()
            self._init_vocabulary()
            self._rate_window, self._rate_refused = None, 0
            self.responders.clear()
            self._draws.clear()
        if self.running:  # idle: nothing in the server's loop uses these now
            self._init_counters()
            self._capacity = None
        else:
            self.start()  # a fresh prefix cache, semaphore and counters
        return self

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"port={self.port}" if self.running else "stopped"
        return f"<LoopbackServer models={list(self.models)} {state}>"

    async def _astart(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._auth, self._rate_limited])
        app.router.add_get("/v1/models", self._h_models)
        app.router.add_get("/health", self._h_health)
        app.router.add_get("/metrics", self._h_metrics)
        app.router.add_get("/props", self._h_props)
        app.router.add_post("/tokenize", self._h_tokenize)
        app.router.add_post(COUNT_PATH, self._h_count)
        app.router.add_post(CHAT_PATH, self._h_chat)
        app.router.add_post("/detokenize", self._h_detokenize)
        app.router.add_post(COMPLETIONS_PATH, self._h_completions)
        if self.prefix:  # a gateway's path prefix: the same handlers under it
            for route in list(app.router.routes()):
                if route.method in ("GET", "POST"):
                    app.router.add_route(route.method, self.prefix + route.resource.canonical, route.handler)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, backlog=1024)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = runner.addresses[0][1]

    async def _astop(self, grace: float) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            runner._shutdown_timeout = max(grace, 0.001)
            await runner.cleanup()

    @staticmethod
    def _drain_and_close(loop: asyncio.AbstractEventLoop) -> None:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    # ------------------------------------------------------------------ handlers

    def _json(self, payload: Any, status: int = 200) -> web.Response:
        return web.Response(body=_encode(payload), status=status, content_type="application/json")

    async def _h_health(self, request: web.Request) -> web.Response:
        if not self.serve_health or self.dialect == "llamacpp_python":
            return self._not_found(request)
        self._add_record(Recorded(request.path, request.method, None, 200, None, time.monotonic()))
        return web.Response(status=200)

    async def _h_models(self, request: web.Request) -> web.Response:
        t0 = time.monotonic()
        payload = self._models_payload()
        self._add_record(Recorded(request.path, request.method, None, 200, None, t0))
        return self._json(payload)

    async def _h_metrics(self, request: web.Request) -> web.Response:
        t0 = time.monotonic()
        if not self.serve_metrics or self.dialect == "llamacpp_python":
            self._add_record(Recorded(request.path, request.method, None, 404, None, t0))
            return web.Response(status=404, text="Not Found")
        text = self._metrics_text()
        self._add_record(Recorded(request.path, request.method, None, 200, None, t0))
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def _h_props(self, request: web.Request) -> web.Response:
        if self.dialect != "llamacpp" or not self.serve_props:
            return self._not_found(request)
        self._add_record(Recorded(request.path, request.method, None, 200, None, time.monotonic()))
        return self._json(self._props_payload())

    @property
    def peak_slots(self) -> int:
        """The most llama.cpp slots busy at once since the server started (dialect "llamacpp")."""
        return self._peak_slots

    async def _slots_held(self, n: int) -> None:
        """llama.cpp's slots: a request of n choices waits for n free ones, holds them for `delay`."""
        if self._slot_free is None:
            self._slot_free = asyncio.Condition()
        want = max(1, min(n, self.slots))
        async with self._slot_free:
            await self._slot_free.wait_for(lambda: self._slots_used + want <= self.slots)
            self._slots_used += want
            self._peak_slots = max(self._peak_slots, self._slots_used)
        try:
            if self.delay > 0:
                await asyncio.sleep(self.delay)
        finally:
            async with self._slot_free:
                self._slots_used -= want
                self._slot_free.notify_all()

    async def _read_json(self, request: web.Request) -> tuple[Any, bool]:
        raw = await request.read()
        try:
            return _decode(raw), True
        except _DecodeError:
            return None, False

    @web.middleware
    async def _auth(self, request: web.Request, handler) -> web.StreamResponse:
        if self.api_key is None:
            return await handler(request)
        got = request.headers.get("Authorization", "")
        if got == f"Bearer {self.api_key}":
            return await handler(request)
        self._add_record(Recorded(request.path, request.method, None, 401, None, time.monotonic()))
        if self.echo_auth:
            return self._json(error_payload(401, f"invalid credentials in header Authorization: {got}",
                                             "AuthenticationError"), status=401)
        return self._json({"error": "Unauthorized"}, status=401)

    @property
    def rate_refused(self) -> int:
        """Chat requests refused by `rate_limit` (429s) since the start or the last reset."""
        return self._rate_refused

    @web.middleware
    async def _rate_limited(self, request: web.Request, handler) -> web.StreamResponse:
        """`rate_limit` (N, T): chat requests counted in windows of T s from the first;
        each answer tells what is left and when the window refills, as OpenAI does."""
        path = request.path.removeprefix(self.prefix) if self.prefix else request.path
        if self.rate_limit is None or path not in (CHAT_PATH, COMPLETIONS_PATH):
            return await handler(request)
        limit, window = self.rate_limit
        now = time.monotonic()
        start, used = self._rate_window or (now, 0)
        if now - start >= window:
            start, used = now, 0
        used += 1
        self._rate_window = (start, used)
        left = window - (now - start)
        headers = {"x-ratelimit-limit-requests": str(limit),
                   "x-ratelimit-remaining-requests": str(max(0, limit - used)),
                   "x-ratelimit-reset-requests": f"{left * 1000:.0f}ms"}
        if used > limit:
            self._rate_refused += 1
            self._add_record(Recorded(path, request.method, None, 429, None, now))
            resp = self._json(error_payload(429, "Rate limit reached for requests", "RateLimitError"), 429)
        else:
            resp = await handler(request)
        if not resp.prepared:  # a stream has sent its headers already
            resp.headers.update(headers)
        return resp

    async def _h_count(self, request: web.Request) -> web.StreamResponse:
        if self.dialect != "llamacpp_python":
            return self._not_found(request)
        return await self._serve(request, chat=False, payload=self._count_payload)

    async def _h_tokenize(self, request: web.Request) -> web.StreamResponse:
        if not self.serve_tokenize or self.dialect == "llamacpp_python":
            self._add_record(Recorded(request.path, request.method, None, 404, None, time.monotonic()))
            return self._json({"detail": "Not Found"}, status=404)
        return await self._serve(request, chat=False)

    async def _h_chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _h_detokenize(self, request: web.Request) -> web.StreamResponse:
        if not self.batching:
            return self._not_found(request)
        return await self._serve(request, chat=False, payload=self._detokenize_payload)

    async def _h_completions(self, request: web.Request) -> web.StreamResponse:
        if not self.batching or not self.serve_completions:
            return self._not_found(request)
        return await self._serve(request, chat=True, payload=self._completions_payload)

    def _not_found(self, request: web.Request) -> web.Response:
        self._add_record(Recorded(request.path, request.method, None, 404, None, time.monotonic()))
        return self._json({"detail": "Not Found"}, status=404)

    async def _serve(self, request: web.Request, chat: bool, payload=None) -> web.StreamResponse:
        """Read, apply the fault, answer, record (also when cancelled by shutdown).
        `payload`: the answer's maker, when not the chat or /tokenize one."""
        make = payload
        t0 = time.monotonic()
        path = request.path.removeprefix(self.prefix) if self.prefix else request.path
        body: Any = None
        status = 0
        fault = self._take_fault(path)
        self._active += 1
        try:
            body, ok = await self._read_json(request)
            if chat and self.dialect == "llamacpp" and isinstance(body, dict) and make is None:
                n = body.get("n", 1)
                await self._slots_held(n if is_int(n) and n >= 1 else 1)
            elif chat and self.max_concurrent > 0:
                if self._capacity is None:  # made in the server's own loop
                    self._capacity = asyncio.Semaphore(self.max_concurrent)
                async with self._capacity:
                    if self.delay > 0:
                        await asyncio.sleep(self.delay)
            elif chat and self.delay > 0:
                await asyncio.sleep(self.delay)
            if fault in FAULT_STATUS:
                status, etype = FAULT_STATUS[fault]
                resp = self._json(error_payload(status, f"injected fault {fault}", etype), status)
                if fault == "429" and self.retry_after is not None:
                    resp.headers["Retry-After"] = str(self.retry_after)
                return resp
            if fault == "drop":
                request.transport.close()  # FIN, no response; aiohttp then skips writing
                return web.Response(status=204)
            if fault == "slow":
                await asyncio.sleep(self.slow_seconds)

            if not ok or not isinstance(body, dict):
                status = 400
                payload = error_payload(400, "the body is not a JSON object", "BadRequestError")
            else:
                try:
                    if make is not None:
                        payload = make(body, fault) if chat else make(body)
                    else:
                        payload = self._chat_payload(body, fault) if chat else self._tokenize_payload(body)
                    status = 200
                except BadRequest as e:
                    status = e.status
                    payload = error_payload(e.status, e.message, e.etype, e.param)

            if self.misbehave == "html200":
                status = 200
                return web.Response(text=HTML_PAGE, content_type="text/html")
            if status == 200 and not self.serve_usage and isinstance(payload, dict):
                payload = {k: v for k, v in payload.items() if k != "usage"}
            if chat and make is None and status == 200 and fault is None and (
                    (body.get("stream") is True and not self.stream_ignored) or self.stream_always):
                return await self._stream(request, body, payload)
            if fault == "nonjson":
                status = 200
                return web.Response(text="<html>oops</html>", content_type="text/html")
            data = _encode(payload)
            if fault == "wrong_content_type":
                return web.Response(body=data, status=status, content_type="text/plain")
            if fault == "truncate":
                head = (
                    f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                    f"Connection: close\r\n\r\n"
                ).encode()
                tr = request.transport
                tr.write(head + data[: len(data) // 2])
                tr.close()  # flushes the half body, then FIN
                return web.Response(status=204)
            return web.Response(body=data, status=status, content_type="application/json")
        finally:
            if not isinstance(body, dict):
                body = None
            self._add_record(Recorded(path, request.method, body, status, fault, t0))
            self._active -= 1


    async def _stream(self, request: web.Request, body: dict, payload: dict) -> web.StreamResponse:
        """The answer as vLLM streams it (``"stream": true``): server-sent events
        (answers.py `stream_events`, which the in-process door sends too)."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for event in stream_events(payload, body, dialect=self.dialect, stream_cut=self.stream_cut, encode=_encode):
            await resp.write(event)
        await resp.write_eof()
        return resp


# ----------------------------------------------------------------------- standalone


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--model", action="append", help="served model name (repeatable)")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds added to each chat request")
    ap.add_argument("--max-concurrent", type=int, default=0,
                    help="chat requests served at once, the others wait (0: no limit)")
    ap.add_argument("--fault-rate", type=float, default=0.0,
                    help="probability that a chat request gets a fault")
    ap.add_argument("--fault-kinds", default=",".join(TRANSIENT_FAULTS),
                    help="comma-separated kinds sharing --fault-rate equally")
    ap.add_argument("--seed", type=int, default=0, help="seed of the fault RNG")
    ap.add_argument("--empty-rate", type=float, default=0.0)
    ap.add_argument("--yes-rate", type=float, default=0.3)
    ap.add_argument("--malformed-rate", type=float, default=0.0)
    ap.add_argument("--slow-seconds", type=float, default=5.0)
    ap.add_argument("--max-model-len", type=int, default=MAX_MODEL_LEN)
    ap.add_argument("--misbehave", choices=MISBEHAVIOURS, default=None, help="a model that does not do the task")
    ap.add_argument("--no-health", action="store_true", help="/health answers 404, as on a server without it")
    ap.add_argument("--batching", action="store_true",
                    help="serve /detokenize, /v1/completions and templated /tokenize of messages (vLLM's)")
    ap.add_argument("--dialect", choices=("vllm", "llamacpp"), default="vllm",
                    help="llamacpp: answer as llama.cpp's llama-server does (the module docstring)")
    ap.add_argument("--slots", type=int, default=4, help="llama.cpp's slots (with --dialect llamacpp)")
    ap.add_argument("--max-n", type=int, default=0, help="> 0: at most this many choices per answer")
    args = ap.parse_args(argv)

    srv = LoopbackServer(
        args.model or ["test-model"], host=args.host, port=args.port, delay=args.delay,
        empty_rate=args.empty_rate, yes_rate=args.yes_rate, malformed_rate=args.malformed_rate,
        slow_seconds=args.slow_seconds, max_model_len=args.max_model_len, record=False,
        max_concurrent=args.max_concurrent, misbehave=args.misbehave, batching=args.batching,
        serve_health=not args.no_health, dialect=args.dialect, slots=args.slots, max_n=args.max_n,
    )
    if args.fault_rate > 0:
        kinds = [k.strip() for k in args.fault_kinds.split(",") if k.strip()]
        srv.set_fault_rates({k: args.fault_rate / len(kinds) for k in kinds}, seed=args.seed)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    srv.start()
    print(f"listening on {srv.base_url}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
