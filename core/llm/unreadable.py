"""Workers behind vllm-router that answer HTTP 200 with a body no client can read
(a proxy's HTML page, a broken server): found and taken out of the router.

To the router a 200 is a success, so its circuit breaker never opens for such a
worker, and the sticky policy sends every retry of a story back to it: one bad
server among several would fail the whole run. The client (core/llm/client.py)
therefore asks `Unreadable.check` before retrying an unreadable answer that came
through the router: each worker still in the router gets the same request, made
small (at most two choices of one token), directly; a worker whose answer is unreadable too is
removed from the router (its /remove_worker) while at least one other answers,
and `on_out` tells the run which one and why. The client's retry then goes to the
others (with a salted routing key, so it may move even when no worker could be
blamed).

    checker = Unreadable(local_router, client.transport, on_out=...)
    client.server(local_router.url).behind_router(name, checker.check)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import msgspec

from tension.core.llm.answer_checks import streamed_unasked
from tension.core.llm.transport import Transport, TransportError
from tension.core.llm.vllm_router import LocalRouter
from tension.core.redact import redact

__all__ = ["Unreadable", "Suspect", "small_probe"]

# What the client (core/llm/servers.py `Server.suspect`) asks before it retries an unreadable answer:
# (method, path, body, decoder) -> None, once the server behind that answer is found.
Suspect = Callable[[str, str, bytes | None, msgspec.json.Decoder], Awaitable[None]]

PROBE_TIMEOUT = 30.0  # one small request per worker
# A check that ran this recently answers every request that failed meanwhile
# (hundreds in flight meet one bad worker at once): one round of probes, not one each.
SETTLE_SECONDS = 1.0


def small_probe(body: bytes | None) -> bytes | None:
    """`body` asking as little as it can: at most two choices of one token (two, so
    that a worker numbering its choices wrongly shows it: core/llm/answer_checks.py),
    one prompt of a batch; a body that is not a JSON object goes as it is."""
    if body is None:
        return None
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body
    if not isinstance(doc, dict):
        return body
    if isinstance(doc.get("n"), int):
        doc["n"] = min(doc["n"], 2)
    if "max_tokens" in doc:
        doc["max_tokens"] = 1
    if isinstance(doc.get("prompt"), list) and doc["prompt"]:
        doc["prompt"] = doc["prompt"][:1]
    return msgspec.json.encode(doc)


class Unreadable:
    """The check of one router's workers (module docstring)."""

    def __init__(self, local: LocalRouter, transport: Transport, on_out: Callable[[str, str, list[str]], None]):
        self.local = local
        self.transport = transport
        self.on_out = on_out  # (worker, why, the workers left)
        self.out: set[str] = set()
        self.probes = 0  # requests sent by the checks
        self._lock = asyncio.Lock()
        self._checked = -SETTLE_SECONDS

    async def check(self, method: str, path: str, body: bytes | None, decoder: msgspec.json.Decoder) -> None:
        """A request to the router got an unreadable answer: find the workers that
        send one, and take them out while another is left."""
        async with self._lock:
            if time.monotonic() - self._checked < SETTLE_SECONDS:
                return
            live = [w for w in self.local.workers if w not in self.out]
            probe = small_probe(body)
            bad = {}
            for worker in live:
                why = await self._unreadable(method, worker + path, probe, decoder)
                if why is not None:
                    bad[worker] = why
            left = [w for w in live if w not in bad]
            if left:
                for worker, why in bad.items():
                    try:
                        await asyncio.to_thread(self.local.remove_worker, worker)
                    except OSError:  # the router did not take it: the client's retries go on as before
                        continue
                    self.out.add(worker)
                    self.on_out(worker, why, left)
            self._checked = time.monotonic()

    async def _unreadable(self, method: str, url: str, body: bytes | None,
                          decoder: msgspec.json.Decoder) -> str | None:
        """Why `url`'s answer cannot be read, or None (read well, refused, or not
        reached: a worker that is down is the router's health check's)."""
        self.probes += 1
        try:
            reply = await self.transport.send(method, url, body, None, PROBE_TIMEOUT)
        except TransportError:
            return None
        if reply.status != 200:
            return None
        try:
            decoder.decode(reply.body)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            if streamed_unasked(reply.body):  # a proxy that forces streaming (core/llm/answer_checks.py)
                return redact(f"HTTP 200 with a server-sent event stream, not asked for: {reply.body[:80]!r}")
            return redact(f"HTTP 200 with an unreadable body ({e}): {reply.body[:80]!r}")
        return None
