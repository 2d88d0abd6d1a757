"""The HTTP client for OpenAI-compatible servers (vLLM and others).

One aiohttp session for the whole run; bodies encoded and decoded with msgspec.
The client sends; it never decides how many requests run at once (the scheduler
does). Retries wrap each request: 429 (honouring Retry-After), 5xx, connection
errors, timeouts and unreadable bodies are retried with exponential backoff and
jitter, bounded by a count and a total time. Other 4xx answers are not retried:
the request itself is wrong and sending it again cannot help. 401/403 (the key)
and 404/405 (no such model, no such endpoint) refuse every request alike: they are
a RefusedError, which stops the run (core/errors.py).

A failed attempt is said at once, through `notice`, in the words of what happened
(did not answer, refused with 429, failed with 5xx, sent an unreadable answer) and
at most once per server per interval (core/llm/failures.py `Outages`): what is
retried and until when (the retry budget). A retry after an unreadable answer
from a router the run started first asks the router's check of its workers
(`suspects`, core/llm/unreadable.py), and goes with a new routing key, so it can
reach another worker.
Everything a server sends that goes into an error message passes the one
redactor (core/redact.py); so do answer texts, for the API key.

`set_gate` holds the first chat or /tokenize request until a check has passed
(core/llm/preflight.py: every server and model a run needs), so a run that is
fully cached sends nothing, and one that is not finds a wrong model or an
unreachable server before its first chat request.

    async with Client(api_key=...) as client:
        result = await client.chat(base_url, ChatRequest(...))

Every request goes through one retry loop (`_call`) and one transport
(core/llm/transport.py), the only code that speaks HTTP. The client counts only
what is its own, HTTP attempts and retries; what an answer used (its usage, its
follow-ups) comes back with the answer, and the run's engine counts it
(core/run/engine.py).

Base URLs are server roots (``http://host:8000``, or a gateway's
``https://host/api``); a trailing ``/v1`` is accepted and dropped, since vLLM's
``/tokenize`` lives at the root. What the run knows of a server is its `Server`
record (core/llm/servers.py), under the one key `server_key`: `Client.server(url)`
is the way in.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar
from urllib.parse import urlsplit

import msgspec

from tension.cache.records import Usage
from tension.core.errors import RefusedError, RetryBudgetError, ServerError, StatusError
from tension.core.llm.answer_checks import STREAMED_UNASKED, streamed_unasked
from tension.core.llm.choices import EMPTY_ANSWER_RETRIES, chunk, gather
from tension.core.llm.failures import (
    Outages,
    Retryable,
    RetryPolicy,
    error_message,
    parse_retry_after,
    status_error,
)
from tension.core.llm.gate import Gate
from tension.core.llm.protocol import (
    ChatChunk,
    ChatRequest,
    ChatResponse,
    CountTokenizeRequest,
    ModelList,
    Props,
    TokenizeResponse,
    routing_headers,
    salted,
)
from tension.core.llm.results import ChatResult, ShortAnswerError, StreamResult, Timeouts
from tension.core.llm.servers import NAsk, Server, Servers
from tension.core.llm.stream import chat_stream
from tension.core.llm.transport import Reply, Transport, TransportError, default_transport
from tension.core.redact import redact, redact_secrets, register

__all__ = ["Timeouts", "ChatResult", "StreamResult", "ShortAnswerError", "Client", "normalize_base_url",
           "EMPTY_ANSWER_RETRIES"]

# An answer is kept up to this many characters per token of its max_tokens (plus a
# margin): ≈ 4 for English text, and no tokenizer's tokens reach 32 characters, so
# only a server that ignores max_tokens (10 MB per verdict seen) is cut.
CHARS_PER_TOKEN = 32
CHARS_MARGIN = 1024
T = TypeVar("T")


TOKENIZER_ADVICE = ("token counts for pct need the generation model's tokenizer: pass --tokenizer "
                    "PATH/tokenizer.json, or --tokenizer words to approximate with whitespace words")


def normalize_base_url(url: str) -> str:
    """The base URL requests are sent to (credentials kept: they are sent); not a
    key: what is known of a server is under `servers.server_key`."""
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


class Client:
    """An OpenAI-compatible client. Unopened → open (``async with``) → closed.
    `transport` (default aiohttp) is what sends the bytes."""

    def __init__(self, *, api_key: str | None = None, timeouts: Timeouts = Timeouts(),
                 retry: RetryPolicy = RetryPolicy(), seed: int | None = None,
                 notice: Callable[[str], None] | None = None, transport: Transport | None = None):
        self._api_key = api_key
        register(api_key)  # never printed or stored, even when a server echoes it
        self.outages = Outages(notice)  # says at once when a server does not answer, and when it answers again
        self._gate = Gate()
        self.timeouts = timeouts
        self.retry = retry
        self.transport: Transport = transport or default_transport(connect=timeouts.connect, request=timeouts.request)
        self._state = "unopened"
        self._rng = random.Random(seed)
        self._enc = msgspec.json.Encoder()
        self._chat_dec = msgspec.json.Decoder(ChatResponse)
        self._tok_dec = msgspec.json.Decoder(TokenizeResponse)
        self._models_dec = msgspec.json.Decoder(ModelList)
        self._chunk_dec = msgspec.json.Decoder(ChatChunk)
        # The client's own figures, over its life (run.json "http").
        self.sent = 0  # HTTP attempts, retries included
        self.retries = 0
        self.servers = Servers(notice)  # per server: everything the run knows of it (`server`)
        self._props_dec = msgspec.json.Decoder(Props)

    def server(self, url: str) -> Server:
        """What the run knows of the server at `url` (core/llm/servers.py): the one way in."""
        return self.servers.server(url)

    @property
    def has_key(self) -> bool:
        """Whether requests carry an API key (an Authorization header)."""
        return bool(self._api_key)

    def __repr__(self) -> str:  # never show the key
        return f"<Client {self._state} key={'set' if self._api_key else 'none'}>"

    async def __aenter__(self) -> Client:
        if self._state == "closed":
            raise RuntimeError("this Client is closed; make a new one")
        if self._state == "open":
            raise RuntimeError("this Client is already open")
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        await self.transport.open(headers)
        self._state = "open"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._state == "open":
            await self.transport.close()
        self._state = "closed"

    def _check_open(self) -> None:
        if self._state != "open":
            raise RuntimeError("use `async with Client(...)` before sending")

    # -- the gate -----------------------------------------------------------------

    def set_gate(self, check: Callable[[], Awaitable[None]]) -> None:
        """Run `check` once, before the first chat or /tokenize request is sent; its
        error is every such request's error. Requests it sends itself pass."""
        self._gate.set(check)

    async def check_gate(self) -> None:
        """Run the gate's check now if it has not run (a verb that will send anyway
        checks before its work starts); chat and /tokenize call it themselves."""
        await self._gate.wait()

    # -- endpoints ------------------------------------------------------------

    # `retry` on an endpoint overrides the client's policy for that call (None: the
    # client's); the replica router asks for a short one where another replica can help.

    async def models(self, base_url: str, retry: RetryPolicy | None = None) -> list[str]:
        root, srv = normalize_base_url(base_url), self.server(base_url)
        srv.in_record = True
        data = await self._call("GET", root + "/v1/models", None, self._models_dec, retry, server=srv)
        probe = srv.kind_probe(data.data)  # what tells its kind, when owned_by alone does not
        srv.listed(data.data, await self._props(root) if probe == "/props" else None,
                   probe is not None and probe != "/props" and await self._counts(root + probe))
        return [m.id for m in data.data]

    async def _counts(self, url: str) -> bool:
        """Whether llama-cpp-python's token counter at `url` answers with a count, asked once."""
        try:
            reply = await self.transport.send("POST", url, self._enc.encode(CountTokenizeRequest(input="a")), None,
                                              10.0)
            return reply.status == 200 and self._tok_dec.decode(reply.body).count is not None
        except (TransportError, msgspec.DecodeError, msgspec.ValidationError):
            return False

    async def _props(self, root: str) -> Props | None:
        """llama.cpp's /props (its slots), asked once; None when it does not answer it."""
        text = await self.get_text(root, "/props")
        try:
            return self._props_dec.decode(text) if text is not None else None
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None

    async def tokenize(self, base_url: str, model: str, text: str, retry: RetryPolicy | None = None,
                       key: str = "") -> int:
        """`text`'s token count by the server's /tokenize, in its dialect (vLLM's
        `prompt` → `count`, llama.cpp's `content` → `tokens`; llama-cpp-python's
        /extras/tokenize/count, `input` → `count`). An answer that counts
        nothing of a non-empty text, or none at all, is a server that cannot count:
        a ConfigError naming the way out, never retried as an outage."""
        await self.check_gate()
        srv = self.server(base_url)
        srv.in_record = True
        url = normalize_base_url(base_url) + srv.tokenize_path
        try:
            data = await self._call("POST", url, self._enc.encode(srv.tokenize_body(model, text)), self._tok_dec,
                                    retry, model=model, headers=routing_headers(key), server=srv)
        except RefusedError as e:
            if e.missing == "endpoint":
                # A 404 that names no model: the path is missing, not the model.
                raise RefusedError(e.status, url, e.body, "endpoint",
                                   f"{base_url} has no /tokenize endpoint; {TOKENIZER_ADVICE}") from e
            raise
        srv.counted(data.max_model_len)
        count = data.count if data.count is not None else (len(data.tokens) if data.tokens is not None else None)
        if count is None or (count == 0 and text.strip()):
            said = "answered without a count" if count is None else "counted 0 tokens in a non-empty text"
            raise RefusedError(200, url, "", "endpoint",
                               f"{base_url}/tokenize {said}: this server cannot count tokens the way the "
                               f"tool asks (it is not vLLM's /tokenize, nor llama.cpp's); {TOKENIZER_ADVICE}")
        return count

    async def chat(self, base_url: str, request: ChatRequest, retry: RetryPolicy | None = None,
                   key: str = "") -> ChatResult:
        """All `request.n` choices (`key`: the routing key, protocol.routing_headers),
        never returned short: from chunks the server takes and follow-ups for missing
        ones, with the seeds moved on as one request's choices have them
        (core/llm/choices.py)."""
        await self.check_gate()
        return await gather(self, normalize_base_url(base_url), request, retry, key)

    async def send_chat(self, base_url: str, request: ChatRequest, retry: RetryPolicy | None, model: str,
                        headers: dict[str, str] | None, weight: int) -> ChatResponse:
        """One chat request through the retry loop, holding `weight` units of its
        server's capacity while it is on the wire (core/llm/capacity.py)."""
        srv = self.server(base_url)
        return await self._call("POST", normalize_base_url(base_url) + "/v1/chat/completions",
                                self._enc.encode(srv.wire_form(request)), self._chat_dec, retry, model=model,
                                headers=headers, weight=weight, server=srv)

    def answer_text(self, base_url: str, text: str, max_tokens: int | None) -> str:
        """An answer's text as it is kept: without the key, and cut when it is far
        longer than `max_tokens` allows (CHARS_PER_TOKEN), said once per server."""
        text = redact_secrets(text)  # before the cut, which could leave part of a key
        limit = None if max_tokens is None else CHARS_PER_TOKEN * max_tokens + CHARS_MARGIN
        if limit is None or len(text) <= limit:
            return text
        self.server(base_url).overlong(len(text), max_tokens or 0, limit)
        return text[:limit]

    async def post(self, base_url: str, path: str, body: msgspec.Struct, decoder: msgspec.json.Decoder[T], *,
                   model: str, key: str = "", retry: RetryPolicy | None = None) -> T:
        """POST `body` to `path` of the server root with the client's retries, after
        the gate; the answer decoded. For endpoints spoken elsewhere (core/llm/batch.py)."""
        await self.check_gate()
        return await self._call("POST", normalize_base_url(base_url) + path, self._enc.encode(body), decoder,
                                retry, model=model, headers=routing_headers(key), server=self.server(base_url))

    async def chat_stream(self, base_url: str, request: ChatRequest) -> StreamResult:
        """`request.n` choices streamed, timed, never retried (core/llm/stream.py):
        in chunks of what the server takes, as `chat` asks (its n limit, learned the
        same way: core/llm/servers.py `NAsk`), one after another; the time to the
        first token is the first chunk's. An answer short of its choices, or one
        whose stream ended before a choice finished, is a ServerError: a benchmark
        reports a failure, never a figure from a cut answer."""
        self._check_open()
        await self.check_gate()
        srv, root = self.server(base_url), normalize_base_url(base_url)
        srv.in_record = True
        asks = NAsk(srv)
        try:
            return await self._streamed(srv, root, request, asks)
        finally:
            asks.close()

    async def _streamed(self, srv: Server, root: str, request: ChatRequest, asks: NAsk) -> StreamResult:
        done: list[StreamResult] = []
        got = 0
        t0 = time.perf_counter()
        while got < request.n:
            ask = await asks.size(request.n - got)
            req = request if ask == request.n else chunk(request, got, ask)
            self.sent += 1
            try:
                res = await chat_stream(self.transport, self._enc, self._chunk_dec, root, srv.wire_form(req))
            except StatusError as e:
                if asks.refused_with(ask, e):
                    continue
                asks.gave_up()
                raise
            asks.answered(ask, request.seed is not None)
            _whole_stream(srv.name, req, res)
            done.append(res)
            got += ask
        if len(done) == 1:
            return done[0]
        return StreamResult(texts=[t for r in done for t in r.texts], model=done[-1].model,
                            usage=_summed(r.usage for r in done), ttft=done[0].ttft,
                            seconds=time.perf_counter() - t0, events=sum(r.events for r in done),
                            finish_reasons=[f for r in done for f in r.finish_reasons],
                            plain=any(r.plain for r in done))

    async def get_text(self, base_url: str, path: str, timeout: float = 10.0) -> str | None:
        """GET a text endpoint of the server root (e.g. ``/metrics``) once, without
        retries: the body of a 200 answer, None for anything else or a server that
        cannot be reached (figures from optional endpoints go without)."""
        self._check_open()
        try:
            reply = await self.transport.send("GET", normalize_base_url(base_url) + path, None, None, timeout)
        except TransportError:
            return None
        return reply.body.decode("utf-8", "replace") if reply.status == 200 else None

    # -- the retry loop -------------------------------------------------------

    async def _call(self, method: str, url: str, body: bytes | None, decoder: msgspec.json.Decoder[T],
                    retry: RetryPolicy | None = None, model: str | None = None,
                    headers: dict[str, str] | None = None, weight: int = 0, *, server: Server) -> T:
        self._check_open()
        policy = retry or self.retry
        start = time.monotonic()
        last: Retryable | None = None
        root, name = server.key, server.name
        sent = headers
        for attempt in range(policy.attempts):
            try:
                result = await (self._held(server, weight, method, url, body, decoder, model, sent) if weight else
                                self._attempt(method, url, body, decoder, model, sent, server))
            except Retryable as e:
                last = e
                if e.streamed and (attempt > 0 or server.suspect is None):
                    # no retry reads it; behind the router one retry, after its workers are checked
                    raise RefusedError(200, self._where(server, method, url), str(e), "stream",
                                       STREAMED_UNASKED) from None
                wait = min(policy.backoff_cap, policy.backoff * 2 ** attempt) * self._rng.uniform(0.5, 1.0)
                if e.retry_after is not None:
                    wait = min(policy.backoff_cap, max(wait, e.retry_after))
            except (StatusError, RefusedError):
                self.outages.answered(root, name, server.waiting_until)
                raise
            else:
                self.outages.answered(root, name, server.waiting_until)
                return result
            if attempt + 1 >= policy.attempts or time.monotonic() - start + wait > policy.total_seconds:
                break
            why = str(last)
            if last.retry_after is not None and last.retry_after > wait:
                # the wait actually taken, and that the server asked for more (Retry-After past the cap)
                why += (f"; it asked to wait {last.retry_after:,.0f} s (Retry-After), waiting {wait:.0f} s, "
                        "the longest wait between tries")
            server.waiting_until = max(server.waiting_until, time.monotonic() + wait)
            self.outages.retrying(root, name, method, url, last.kind, why, attempt, policy, start)
            self.retries += 1
            if last.kind == "unreadable":
                if (suspect := server.suspect) is not None:
                    await suspect(method, urlsplit(url).path, body, decoder)  # takes the bad worker out
                sent = salted(headers, attempt)
            await asyncio.sleep(wait)
        raise RetryBudgetError(
            f"{self._where(server, method, url)}: gave up after "
            f"{attempt + 1} attempt(s) in {time.monotonic() - start:.1f} s (retry budget: {policy.attempts} attempts, "
            f"{policy.total_seconds:g} s); last error: {last}", last) from last

    async def _held(self, server: Server, weight: int, method: str, url: str, body: bytes | None,
                    decoder: msgspec.json.Decoder[T], model: str | None, headers: dict[str, str] | None) -> T:
        """One attempt once its server has room (core/llm/capacity.py): the wait is
        outside the attempt's time-out; a time-out or 503 lowers the room, an answer
        raises it."""
        cap = server.capacity
        held = cap.weigh(weight)
        await cap.acquire(held)
        epoch = cap.epoch
        try:
            result = await self._attempt(method, url, body, decoder, model, headers, server)
        except Retryable as e:
            if e.overload:
                server.overloaded(str(e), epoch)
            raise
        else:
            cap.answered()
            return result
        finally:
            cap.release(held)

    @staticmethod
    def _where(server: Server, method: str, url: str) -> str:
        """How an error names where it came from: the URL, or for a router the run
        started, the servers behind it and the path (never its private port)."""
        return url if server.router_name is None else f"{server.name}, {method} {urlsplit(url).path}"

    async def _attempt(self, method: str, url: str, body: bytes | None, decoder: msgspec.json.Decoder[T],
                       model: str | None, headers: dict[str, str] | None, server: Server) -> T:
        await server.paced()  # its rate limit spent: wait for the reset, not for a 429
        self.sent += 1
        reply: Reply | None = None
        try:
            reply = await self.transport.send(method, url, body, headers)
        except TransportError as e:
            raise Retryable(str(e), overload=e.timed_out) from e
        finally:  # answered, failed or cancelled: no longer in flight
            server.rate_limited(reply.rate_limit if reply is not None else None)
        if reply.status == 200:
            try:
                return decoder.decode(reply.body)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                if streamed_unasked(reply.body):
                    raise Retryable(redact(f"a stream, not asked for: {reply.body[:120]!r}"), kind="unreadable",
                                    streamed=True) from e
                raise Retryable(redact(f"malformed answer ({e}): {reply.body[:120]!r}"),
                                 kind="unreadable") from e
        message = error_message(reply.body)
        if reply.status == 429 or reply.status >= 500:
            raise Retryable(f"HTTP {reply.status}: {message}", parse_retry_after(reply.retry_after),
                             "refused" if reply.status == 429 else "failed", overload=reply.status == 503)
        raise status_error(reply.status, url, message, model,
                           None if server.router_name is None else self._where(server, method, url))


def _whole_stream(name: str, request: ChatRequest, res: StreamResult) -> None:
    """A streamed answer with every choice asked, each finished, or a ServerError (H3
    of ../shared/reviews/external-servers-2026-12-02.md: a server that drops `n`, or
    cuts a stream off, gave "0.2 tokens per ending" with exit 0)."""
    cut = sum(1 for t, f in zip(res.texts, res.finish_reasons) if t and f is None)
    if cut and not res.plain:  # (a plain answer is whole: a choice without a reason is the server's way)
        raise ServerError(f"{name}: the server ended the stream before {cut} of {request.n} choice(s) finished (no "
                          "finish_reason): a cut answer is no figure (llama-cpp-python cuts a stream as soon as "
                          "another request waits, unless its interrupt_requests setting is off; or use --no-stream)")
    given = sum(1 for f in res.finish_reasons if f is not None)
    if given < request.n and res.plain:
        raise ServerError(f"{name}: a request for {request.n} choices brought {given}, in a plain answer (the server "
                          "ignores `stream`: no time to first token); the server does not honour n, so no figure is "
                          "taken from it (try --no-stream, which asks for what is missing)")
    if given < request.n:
        raise ServerError(f"{name}: a streamed request for {request.n} choices brought {given}; the server does "
                          "not honour n when streaming, so no figure is taken from it (try --no-stream, which asks "
                          "for what is missing)")


def _summed(usages: Iterable[Usage]) -> Usage:
    total = Usage()
    for u in usages:
        total.add(u)
    return total
