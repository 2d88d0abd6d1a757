"""The one place that speaks HTTP: a `Transport` sends a request and gives back
the status, the body, the Retry-After and rate-limit headers, or the lines of a streamed
body. `AiohttpTransport` is the real one (one session, one connection pool, for
the whole run); an in-process one (tests/testing/) stands in for it wherever a
test needs no sockets, and everything above it (retries, follow-ups, the
gate, the counts) runs unchanged.

Transport errors come out as `TransportError` (unreachable, reset, timed out),
which the client retries; everything else is the server's answer.

A client given no transport takes `default_transport`: aiohttp, except for the
server roots registered with `served_in_process` while it is made, whose
requests go to their in-process transport. That is how a test runs the CLI's
`main([...])` in process against an in-process fake server (its `--base-url`
names the registered root) with every layer above the bytes unchanged:

    with served_in_process(server.base_url, server):
        main(["score", corpus, "--out", out, "--base-url", server.base_url, ...])
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Protocol

import aiohttp
import msgspec

from tension.core.llm.ratelimit import RateLimit, read_rate_limit
from tension.core.llm.server_keys import server_key
from tension.core.redact import redact

__all__ = ["Reply", "Transport", "TransportError", "StreamStatus", "AiohttpTransport", "KEEPALIVE_SECONDS",
           "default_transport", "served_in_process"]

KEEPALIVE_SECONDS = 4.0  # below the 5 s after which llama.cpp's and vLLM's servers close an idle connection


class Reply(msgspec.Struct, kw_only=True, gc=False):
    status: int
    body: bytes
    retry_after: str | None = None
    rate_limit: RateLimit | None = None  # a hosted API's x-ratelimit-* headers (core/llm/ratelimit.py)


class TransportError(Exception):
    """The request got no answer: the server is unreachable, the connection broke,
    or it timed out (`timed_out`)."""

    def __init__(self, message: str, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


class Transport(Protocol):
    async def open(self, headers: dict[str, str]) -> None: ...

    async def close(self) -> None: ...

    async def send(self, method: str, url: str, body: bytes | None, headers: dict[str, str] | None,
                   timeout: float | None = None) -> Reply:
        """One request; `timeout` (seconds) overrides the transport's for this one."""
        ...

    def lines(self, url: str, body: bytes, headers: dict[str, str] | None) -> AsyncIterator[bytes]:
        """The lines of a streamed POST answer; a status other than 200 raises
        `StreamStatus` with the body."""
        ...


class StreamStatus(Exception):
    def __init__(self, status: int, body: bytes):
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body


class AiohttpTransport:
    """aiohttp: one session; `request` bounds a whole attempt, `connect` the connection."""

    def __init__(self, *, connect: float, request: float):
        self.connect = connect
        self.request = request
        self._session: aiohttp.ClientSession | None = None

    async def open(self, headers: dict[str, str]) -> None:
        self._session = aiohttp.ClientSession(
            # idle connections are dropped before the servers' own keep-alive ends them (llama.cpp's
            # and uvicorn's, vLLM's, close after 5 s; aiohttp's default keeps them 15 s), so a request
            # is seldom written to a connection the server has just closed
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=KEEPALIVE_SECONDS),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.request, connect=self.connect))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use `async with Client(...)` before sending")
        return self._session

    async def send(self, method: str, url: str, body: bytes | None, headers: dict[str, str] | None,
                   timeout: float | None = None) -> Reply:
        session = self._open_session()
        # only an explicit timeout is passed: aiohttp reads timeout=None as "no timeout"
        request = (session.request(method, url, data=body, headers=headers) if timeout is None else
                   session.request(method, url, data=body, headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=timeout)))
        try:
            async with request as resp:
                return Reply(status=resp.status, body=await resp.read(), retry_after=resp.headers.get("Retry-After"),
                             rate_limit=read_rate_limit(resp.headers))
        except TimeoutError as e:
            raise TransportError(f"timed out after {timeout or self.request:g} s", timed_out=True) from e
        except aiohttp.ClientError as e:
            raise TransportError(redact(f"{type(e).__name__}: {e}")) from e

    async def lines(self, url: str, body: bytes, headers: dict[str, str] | None) -> AsyncIterator[bytes]:
        session = self._open_session()
        for attempt in (1, 2):
            answered = False
            try:
                async with session.post(url, data=body, headers=headers) as resp:
                    answered = True
                    if resp.status != 200:
                        raise StreamStatus(resp.status, await resp.read())
                    async for line in resp.content:
                        yield line
                return
            except TimeoutError as e:
                raise TransportError(f"streamed answer timed out after {self.request:g} s", timed_out=True) from e
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                # Closed before any answer: a pooled connection the server had just dropped (the
                # keep-alive race). A streamed request is not retried (bench measures the server),
                # but this one never reached it as a request: sent once more, on a new connection.
                if answered or attempt == 2:
                    raise TransportError(redact(f"{type(e).__name__}: {e}")) from e
            except aiohttp.ClientError as e:
                raise TransportError(redact(f"{type(e).__name__}: {e}")) from e


# -- servers in process ---------------------------------------------------------------

_in_process: dict[str, Transport] = {}  # server key (`_key`) → the transport that serves it
_in_process_lock = threading.Lock()


def _key(url: str) -> str:
    """A URL's server key (core/llm/server_keys.py, the one way to name a server)."""
    return server_key(url)


@contextlib.contextmanager
def served_in_process(base_url: str, transport: Transport) -> Iterator[None]:
    """While inside, every client made without a transport sends the requests for
    the server at `base_url` (its key: scheme, host, port, path; no credentials) to
    `transport`, and the rest over HTTP (module docstring). A server is served by
    one transport at a time."""
    root = _key(base_url)
    with _in_process_lock:
        if root in _in_process:
            raise RuntimeError(f"{root} is already served in process")
        _in_process[root] = transport
    try:
        yield
    finally:
        with _in_process_lock:
            del _in_process[root]


def default_transport(*, connect: float, request: float) -> Transport:
    """The transport of a client given none: aiohttp, with the roots served in
    process at this moment (`served_in_process`) routed to their transports."""
    http = AiohttpTransport(connect=connect, request=request)
    with _in_process_lock:
        routes = dict(_in_process)
    return _Routed(routes, http) if routes else http


class _Routed:
    """Requests to a server in `routes` (a URL under its key) go to its transport, the rest to `http`."""

    def __init__(self, routes: dict[str, Transport], http: Transport):
        self.routes = routes
        self.http = http
        self._chosen: dict[str, Transport] = {}  # URL → its transport: a run sends to a few URLs, many times

    def _for(self, url: str) -> Transport:
        chosen = self._chosen.get(url)
        if chosen is None:
            key = _key(url)
            chosen = self._chosen[url] = next(
                (t for k, t in self.routes.items() if key == k or key.startswith(k + "/")), self.http)
        return chosen

    async def open(self, headers: dict[str, str]) -> None:
        await self.http.open(headers)
        for t in self.routes.values():
            await t.open(headers)

    async def close(self) -> None:
        for t in self.routes.values():
            await t.close()
        await self.http.close()

    async def send(self, method: str, url: str, body: bytes | None, headers: dict[str, str] | None,
                   timeout: float | None = None) -> Reply:
        return await self._for(url).send(method, url, body, headers, timeout)

    def lines(self, url: str, body: bytes, headers: dict[str, str] | None) -> AsyncIterator[bytes]:
        return self._for(url).lines(url, body, headers)
