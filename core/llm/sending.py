"""The one retry loop every request to a server goes through, and its attempt.

An `Attempt` is one typed record of a request as the loop sends it (method, URL,
body, the decoder of its answer, its `Server`, the capacity it holds while on the
wire and its item's place), so the loop's three floors, `call` → `_held` →
`_once`, pass one value down instead of seven loose ones (openai-python's one
retry loop over a typed options object; httpx's private method chain).

Retries: 429 (honouring Retry-After), 5xx, connection errors, time-outs and
unreadable bodies, with exponential backoff and jitter, bounded by a count and a
total time (`RetryPolicy`). Other 4xx answers are not retried: the request itself
is wrong. A failed attempt is said at once, at most once per server per interval
(core/llm/failures.py `Outages`). A retry after an unreadable answer from a router
the run started first asks the router's check of its workers (`Server.suspect`,
core/llm/unreadable.py) and goes with a new routing key, so it can reach another
worker.

The `Sender` counts what is its own, HTTP attempts and retries (run.json "http").
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Generic, TypeVar
from urllib.parse import urlsplit

import msgspec

from tension.core.errors import RefusedError, RetryBudgetError, StatusError
from tension.core.llm.answer_checks import STREAMED_UNASKED, streamed_unasked
from tension.core.llm.failures import Outages, Retryable, RetryPolicy, error_message, parse_retry_after, status_error
from tension.core.llm.protocol import salted
from tension.core.llm.servers import Server
from tension.core.llm.ticket import LAST
from tension.core.llm.transport import Reply, Transport, TransportError
from tension.core.redact import redact

__all__ = ["Attempt", "Sender"]

T = TypeVar("T")


class Attempt(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """One request as the retry loop sends it (module docstring)."""

    method: str
    url: str  # the server's root (`Server.root`) and the endpoint's path
    body: bytes | None
    decoder: msgspec.json.Decoder[T]
    server: Server
    model: str | None = None  # named in a 404's error (no such model)
    headers: dict[str, str] | None = None  # the routing key's (protocol.routing_headers)
    weight: int = 0  # units of the server's capacity held on the wire (0: none, core/llm/capacity.py)
    place: int = LAST  # its work item's place: who waits for capacity first (core/llm/ticket.py)
    retry: RetryPolicy | None = None  # None: the sender's policy

    def where(self) -> str:
        """How an error names where it came from: the URL, or for a router the run
        started, the servers behind it and the path (never its private port)."""
        if self.server.router_name is None:
            return self.url
        return f"{self.server.name}, {self.method} {urlsplit(self.url).path}"


class Sender:
    """The retry loop over one transport (module docstring)."""

    def __init__(self, transport: Transport, retry: RetryPolicy, notice: Callable[[str], None] | None,
                 seed: int | None):
        self.transport = transport
        self.retry = retry
        self.outages = Outages(notice)  # says at once when a server does not answer, and when it answers again
        self._rng = random.Random(seed)
        self.sent = 0  # HTTP attempts, retries included
        self.retries = 0

    def count_attempt(self) -> None:
        """An HTTP attempt sent outside the loop (a timed stream, core/llm/stream.py)."""
        self.sent += 1

    def empty_answer(self) -> None:
        """An answer whose every choice was empty, asked again (core/llm/choices.py): a retry."""
        self.retries += 1

    async def call(self, a: Attempt[T]) -> T:
        """`a` through the retry loop: its decoded answer, or the error that ended it."""
        policy = a.retry or self.retry
        server = a.server
        start = time.monotonic()
        last: Retryable | None = None
        headers = a.headers  # a retry after an unreadable answer salts the routing key (once per attempt)
        for attempt in range(policy.attempts):
            try:
                result = await (self._held(a, headers) if a.weight else self._once(a, headers))
            except Retryable as e:
                last = e
                if e.streamed and (attempt > 0 or server.suspect is None):
                    # no retry reads it; behind the router one retry, after its workers are checked
                    raise RefusedError(200, a.where(), str(e), "stream", STREAMED_UNASKED) from None
                wait = min(policy.backoff_cap, policy.backoff * 2 ** attempt) * self._rng.uniform(0.5, 1.0)
                if e.retry_after is not None:
                    wait = min(policy.backoff_cap, max(wait, e.retry_after))
            except (StatusError, RefusedError):
                self.outages.answered(server.outage, server.name)
                raise
            else:
                self.outages.answered(server.outage, server.name)
                return result
            if attempt + 1 >= policy.attempts or time.monotonic() - start + wait > policy.total_seconds:
                break
            why = str(last)
            if last.retry_after is not None and last.retry_after > wait:
                # the wait actually taken, and that the server asked for more (Retry-After past the cap)
                why += (f"; it asked to wait {last.retry_after:,.0f} s (Retry-After), waiting {wait:.0f} s, "
                        "the longest wait between tries")
            server.outage.waiting_until = max(server.outage.waiting_until, time.monotonic() + wait)
            self.outages.retrying(server.outage, server.name, a.method, a.url, last.kind, why, attempt, policy, start)
            self.retries += 1
            if last.kind == "unreadable":
                if (suspect := server.suspect) is not None:
                    await suspect(a.method, urlsplit(a.url).path, a.body, a.decoder)  # takes the bad worker out
                headers = salted(a.headers, attempt)
            await asyncio.sleep(wait)
        raise RetryBudgetError(
            f"{a.where()}: gave up after "
            f"{attempt + 1} attempt(s) in {time.monotonic() - start:.1f} s (retry budget: {policy.attempts} attempts, "
            f"{policy.total_seconds:g} s); last error: {last}", last) from last

    async def _held(self, a: Attempt[T], headers: dict[str, str] | None) -> T:
        """One attempt once its server has room (core/llm/capacity.py): the wait is
        outside the attempt's time-out; a time-out or 503 lowers the room, an answer
        raises it."""
        server = a.server
        cap = server.capacity
        held = cap.weigh(a.weight)
        await cap.acquire(held, a.place)
        epoch = cap.epoch
        try:
            result = await self._once(a, headers)
        except Retryable as e:
            if e.overload:
                server.overloaded(str(e), epoch)
            raise
        else:
            cap.answered()
            return result
        finally:
            cap.release(held)

    async def _once(self, a: Attempt[T], headers: dict[str, str] | None) -> T:
        server = a.server
        await server.paced()  # its rate limit spent: wait for the reset, not for a 429
        self.sent += 1
        reply: Reply | None = None
        try:
            reply = await self.transport.send(a.method, a.url, a.body, headers)
        except TransportError as e:
            raise Retryable(str(e), overload=e.timed_out) from e
        finally:  # answered, failed or cancelled: no longer in flight
            server.rate_limited(reply.rate_limit if reply is not None else None)
        if reply.status == 200:
            try:
                return a.decoder.decode(reply.body)
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
        raise status_error(reply.status, a.url, message, a.model, None if server.router_name is None else a.where())
