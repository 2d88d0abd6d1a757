"""Who the test server (tension.testing.openai_server) serves, and when
(`WireLimits`, mixed into `LoopbackServer`): its API key (`api_key`, `echo_auth`),
a hosted API's rate limit (`rate_limit`, in OpenAI's x-ratelimit-* headers), a
replica's capacity (`max_concurrent` chat requests at once, each held `delay`
seconds) and llama.cpp's slots (dialect "llamacpp": a request of n choices holds n
of `slots`). The two middlewares run before every handler; `_wait_turn` is a chat
request's wait before it is answered."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from .records import Recorded
from .settings import CHAT_PATH, COMPLETIONS_PATH
from .validation import error_payload, is_int
from .wire_json import json_response


class WireLimits:
    """The key, the rate limit, the capacity and the slots of a LoopbackServer (its
    settings are the server's plain attributes; `_add_record` is its RecordBook's)."""

    api_key: str | None
    echo_auth: bool
    prefix: str
    rate_limit: tuple[int, float] | None
    max_concurrent: int
    delay: float
    dialect: str
    slots: int

    def _init_limits(self) -> None:
        """No rate-limit window, no refusal counted, and the state of a new loop."""
        self._rate_window: tuple[float, int] | None = None  # `rate_limit`: (window start, chat requests in it)
        self._rate_refused = 0
        self._limits_for_new_loop()

    def _limits_for_new_loop(self) -> None:
        """The capacity's semaphore and the slots' condition belong to one event loop:
        each start makes them anew (in the server's own loop, at the first request)."""
        self._capacity: asyncio.Semaphore | None = None
        self._slot_free: asyncio.Condition | None = None
        self._slots_used = 0
        self._peak_slots = 0

    # ------------------------------------------------------------------ the key

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.api_key is None:
            return await handler(request)
        got = request.headers.get("Authorization", "")
        if got == f"Bearer {self.api_key}":
            return await handler(request)
        self._add_record(Recorded(request.path, request.method, None, 401, None, time.monotonic()))
        if self.echo_auth:
            return json_response(error_payload(401, f"invalid credentials in header Authorization: {got}",
                                               "AuthenticationError"), status=401)
        return json_response({"error": "Unauthorized"}, status=401)

    # ----------------------------------------------------------- the rate limit

    @property
    def rate_refused(self) -> int:
        """Chat requests refused by `rate_limit` (429s) since the start or the last reset."""
        return self._rate_refused

    @web.middleware
    async def _rate_limited(self, request: web.Request, handler: Any) -> web.StreamResponse:
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
        resp: web.StreamResponse
        if used > limit:
            self._rate_refused += 1
            self._add_record(Recorded(path, request.method, None, 429, None, now))
            resp = json_response(error_payload(429, "Rate limit reached for requests", "RateLimitError"), 429)
        else:
            resp = await handler(request)
        if not resp.prepared:  # a stream has sent its headers already
            resp.headers.update(headers)
        return resp

    # ------------------------------------------------------ capacity and slots

    async def _wait_turn(self, body: Any, chat: bool, own_payload: bool) -> None:
        """A chat request's wait before its answer: llama.cpp's slots (a plain chat
        request, not one with an answer maker of its own), else the capacity's
        semaphore, else `delay`."""
        if chat and self.dialect == "llamacpp" and isinstance(body, dict) and not own_payload:
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
