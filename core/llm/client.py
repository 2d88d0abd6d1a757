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

Base URLs are server roots (``http://host:8000``); a trailing ``/v1`` is accepted
and dropped, since vLLM's ``/tokenize`` lives at the root.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import urlsplit

import msgspec

from tension.cache.records import Usage
from tension.core.errors import RefusedError, RetryBudgetError, ServerError, StatusError
from tension.core.llm.failures import (
    Outages,
    Retryable,
    RetryPolicy,
    error_message,
    parse_retry_after,
    server_root,
    status_error,
)
from tension.core.llm.gate import Gate
from tension.core.llm.protocol import (
    ChatChunk,
    ChatRequest,
    ChatResponse,
    ModelList,
    TokenizeRequest,
    TokenizeResponse,
    routing_headers,
    salted,
    usage_of,
)
from tension.core.llm.results import ChatResult, ShortAnswerError, StreamResult, Timeouts
from tension.core.llm.transport import AiohttpTransport, StreamStatus, Transport, TransportError
from tension.core.llm.unreadable import Suspect
from tension.core.redact import redact, redact_secrets, register

__all__ = ["Timeouts", "ChatResult", "StreamResult", "ShortAnswerError", "Client", "normalize_base_url",
           "EMPTY_ANSWER_RETRIES"]

EMPTY_ANSWER_RETRIES = 2
# An answer is kept up to this many characters per token of its max_tokens (plus a
# margin): ≈ 4 for English text, and no tokenizer's tokens reach 32 characters, so
# only a server that ignores max_tokens (10 MB per verdict seen) is cut.
CHARS_PER_TOKEN = 32
CHARS_MARGIN = 1024
T = TypeVar("T")


def normalize_base_url(url: str) -> str:
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
        self.transport: Transport = transport or AiohttpTransport(connect=timeouts.connect, request=timeouts.request)
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
        self.max_model_len: dict[str, int] = {}  # base URL -> context length its /tokenize reported
        self.owners: dict[str, dict[str, str | None]] = {}  # base URL -> model id -> owned_by, from /v1/models
        # A router's URL (one the run started itself) -> how messages name it, and the check of its
        # workers when an answer through it is unreadable (core/llm/router.py `routing` sets both).
        self.names: dict[str, str] = {}
        self.suspects: dict[str, Suspect] = {}
        self._overlong: set[str] = set()  # server roots told to ignore max_tokens

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
        root = normalize_base_url(base_url)
        data = await self._call("GET", root + "/v1/models", None, self._models_dec, retry)
        self.owners[root] = {m.id: m.owned_by for m in data.data}
        return [m.id for m in data.data]

    def listed(self, base_url: str) -> bool:
        """Whether this client has the server's /v1/models answer."""
        return normalize_base_url(base_url) in self.owners

    def owned_by(self, base_url: str, model: str) -> str | None:
        """Who the server's /v1/models said owns `model` (None: not asked, or not said)."""
        return self.owners.get(normalize_base_url(base_url), {}).get(model)

    async def tokenize(self, base_url: str, model: str, text: str, retry: RetryPolicy | None = None,
                       key: str = "") -> int:
        await self.check_gate()
        body = self._enc.encode(TokenizeRequest(model=model, prompt=text))
        root = normalize_base_url(base_url)
        url = root + "/tokenize"
        try:
            data = await self._call("POST", url, body, self._tok_dec, retry, model=model,
                                    headers=routing_headers(key))
        except RefusedError as e:
            if e.missing == "endpoint":
                # A 404 that names no model: the path is missing, not the model.
                raise RefusedError(
                    e.status, url, e.body, "endpoint",
                    f"{base_url} has no /tokenize endpoint; token counts for pct need the generation "
                    "model's tokenizer: pass --tokenizer PATH/tokenizer.json, or --tokenizer words to "
                    "approximate with whitespace words") from e
            raise
        if data.max_model_len:
            self.max_model_len[root] = data.max_model_len
        return data.count

    async def chat(self, base_url: str, request: ChatRequest, retry: RetryPolicy | None = None,
                   key: str = "") -> ChatResult:
        """All `request.n` choices (`key`: the routing key, protocol.routing_headers).
        A short answer is completed by follow-up requests for the missing ones;
        never returned short. vLLM samples choice
        i of a seeded request with seed + i, so a follow-up for the last m of n
        choices asks n = m with seed + (n − m): it gets exactly the choices the
        full answer would have held, and a seeded run is reproducible through
        faults."""
        await self.check_gate()
        url = normalize_base_url(base_url) + "/v1/chat/completions"
        headers = routing_headers(key)
        t0 = time.perf_counter()
        texts: list[str] = []
        reasons: list[str | None] = []
        logprobs: list[dict[str, float] | None] = []
        usage = Usage()
        model = request.model
        req = request
        empty_retries = followups = 0
        for followup in range(self.retry.attempts + 1):
            data = await self._call("POST", url, self._enc.encode(req), self._chat_dec, retry, model=request.model,
                                    headers=headers)
            if (data.choices and empty_retries < EMPTY_ANSWER_RETRIES
                    and all(not (c.message.content or "").strip() for c in data.choices)):
                # Every choice empty: a glitch far more often than a real answer
                # (100 empty endings at T = 1.2?). Ask again, a bounded number of
                # times; if it stays empty, it is the model's answer and is kept.
                usage.requests += 1
                empty_retries += 1
                self.retries += 1
                continue
            usage.add(usage_of(data.usage))
            model = data.model or model
            for ch in sorted(data.choices, key=lambda c: c.index)[: req.n]:
                texts.append(self.answer_text(url, ch.message.content or "", request.max_tokens))
                reasons.append(ch.finish_reason)
                logprobs.append(ch.first_token_logprobs() if request.logprobs else None)
            missing = request.n - len(texts)
            if missing <= 0:
                return ChatResult(texts=texts, finish_reasons=reasons, model=model, usage=usage,
                                  seconds=time.perf_counter() - t0, followups=followups,
                                  first_logprobs=logprobs if request.logprobs else [])
            if followup == self.retry.attempts:
                break
            followups += 1
            seed = None if request.seed is None else request.seed + len(texts)
            req = msgspec.structs.replace(request, n=missing, seed=seed)
        raise ShortAnswerError(f"{url}: asked for {request.n} choices, got {len(texts)} after "
                               f"{self.retry.attempts} follow-up requests", usage, followups)

    def answer_text(self, url: str, text: str, max_tokens: int | None) -> str:
        """An answer's text as it is kept: without the key, and cut when it is far
        longer than `max_tokens` allows (CHARS_PER_TOKEN), said once per server."""
        text = redact_secrets(text)  # before the cut, which could leave part of a key
        limit = None if max_tokens is None else CHARS_PER_TOKEN * max_tokens + CHARS_MARGIN
        if limit is None or len(text) <= limit:
            return text
        root = server_root(url)
        if root not in self._overlong and self.outages.notice is not None:
            self._overlong.add(root)
            self.outages.notice(f"{self.names.get(root, root)} ignores max_tokens: it sent an answer of "
                                f"{len(text):,} characters for max_tokens {max_tokens}; every answer longer than "
                                f"{limit:,} characters is kept cut to that length")
        return text[:limit]

    async def post(self, base_url: str, path: str, body: msgspec.Struct, decoder: msgspec.json.Decoder[T], *,
                   model: str, key: str = "", retry: RetryPolicy | None = None) -> T:
        """POST `body` to `path` of the server root with the client's retries, after
        the gate; the answer decoded. For endpoints spoken elsewhere (core/llm/batch.py)."""
        await self.check_gate()
        return await self._call("POST", normalize_base_url(base_url) + path, self._enc.encode(body), decoder,
                                retry, model=model, headers=routing_headers(key))

    async def chat_stream(self, base_url: str, request: ChatRequest) -> StreamResult:
        """One streamed request, timed: time to first token and to the end. Not
        retried and never completed by follow-ups: a benchmark measures what the
        server does, and reports a failure instead of hiding it."""
        self._check_open()
        await self.check_gate()
        url = normalize_base_url(base_url) + "/v1/chat/completions"
        req = msgspec.structs.replace(request, stream=True, stream_options={"include_usage": True})
        parts: dict[int, list[str]] = {}
        usage = Usage(requests=1)
        model = request.model
        ttft = None
        events = 0
        self.sent += 1
        t0 = time.perf_counter()
        try:
            async for line in self.transport.lines(url, self._enc.encode(req), None):
                if not line.startswith(b"data:"):
                    continue  # blank separators, comments, event names
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                chunk = self._chunk_dec.decode(payload)
                model = chunk.model or model
                for ch in chunk.choices:
                    if ch.delta.content:
                        if ttft is None:
                            ttft = time.perf_counter() - t0
                        events += 1
                        parts.setdefault(ch.index, []).append(ch.delta.content)
                if chunk.usage is not None:
                    usage = chunk.usage.usage()
        except StreamStatus as e:
            raise status_error(e.status, url, error_message(e.body), request.model) from None
        except TransportError as e:
            raise ServerError(f"{url}: {e}") from e
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise ServerError(f"{url}: malformed event in the stream: {e}") from e
        texts = [redact_secrets("".join(parts.get(i, []))) for i in range(request.n)]
        return StreamResult(texts=texts, model=model, usage=usage, ttft=ttft,
                            seconds=time.perf_counter() - t0, events=events)

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
                    headers: dict[str, str] | None = None) -> T:
        self._check_open()
        policy = retry or self.retry
        start = time.monotonic()
        last: Retryable | None = None
        root = server_root(url)
        name = self.names.get(root, root)
        sent = headers
        for attempt in range(policy.attempts):
            try:
                result = await self._attempt(method, url, body, decoder, model, sent)
            except Retryable as e:
                last = e
                wait = min(policy.backoff_cap, policy.backoff * 2 ** attempt) * self._rng.uniform(0.5, 1.0)
                if e.retry_after is not None:
                    wait = min(policy.backoff_cap, max(wait, e.retry_after))
            except (StatusError, RefusedError):
                self.outages.answered(root, name)
                raise
            else:
                self.outages.answered(root, name)
                return result
            if attempt + 1 >= policy.attempts or time.monotonic() - start + wait > policy.total_seconds:
                break
            self.outages.retrying(name, method, url, last.kind, str(last), attempt, policy, start)
            self.retries += 1
            if last.kind == "unreadable":
                if (suspect := self.suspects.get(root)) is not None:
                    await suspect(method, urlsplit(url).path, body, decoder)  # takes the bad worker out
                sent = salted(headers, attempt)
            await asyncio.sleep(wait)
        raise RetryBudgetError(
            f"{url if name == root else f'{name}, {method} {urlsplit(url).path}'}: gave up after {attempt + 1} "
            f"attempt(s) in {time.monotonic() - start:.1f} s (retry budget: {policy.attempts} attempts, "
            f"{policy.total_seconds:g} s); last error: {last}", last) from last

    async def _attempt(self, method: str, url: str, body: bytes | None, decoder: msgspec.json.Decoder[T],
                       model: str | None = None, headers: dict[str, str] | None = None) -> T:
        self.sent += 1
        try:
            reply = await self.transport.send(method, url, body, headers)
        except TransportError as e:
            raise Retryable(str(e)) from e
        if reply.status == 200:
            try:
                return decoder.decode(reply.body)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                raise Retryable(redact(f"malformed answer ({e}): {reply.body[:120]!r}"),
                                 kind="unreadable") from e
        message = error_message(reply.body)
        if reply.status == 429 or reply.status >= 500:
            raise Retryable(f"HTTP {reply.status}: {message}", parse_retry_after(reply.retry_after),
                             "refused" if reply.status == 429 else "failed")
        raise status_error(reply.status, url, message, model)
