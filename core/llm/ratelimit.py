"""A hosted API's rate-limit headers, read so that a run paces itself before the
429s come (issue 35, hosted gateways).

OpenAI's form, which LiteLLM's proxy and most gateways copy: with every answer,
``x-ratelimit-remaining-requests`` / ``x-ratelimit-remaining-tokens`` (what is left in
the window) and ``x-ratelimit-reset-requests`` / ``x-ratelimit-reset-tokens`` (when the
window refills), the reset as a Go-style duration (``1s``, ``6m0s``, ``20ms``,
``1h2m3.5s``), as seconds (``0.5``), or by some gateways as a Unix time (seconds or
milliseconds). When a count is 0 the next request would be refused: the server's
record (core/llm/servers.py `Server.rate_limited`) holds every request to that server
until the reset instead, said once. A header that cannot be read is ignored: pacing
is a courtesy, the 429 path (Retry-After, back-off) still stands behind it.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping

import msgspec

__all__ = ["RateLimit", "Pacer", "read_rate_limit", "reset_seconds", "PACE_CAP_SECONDS"]

# The longest one hold waits before the next request is let through to ask again: a
# tokens-per-day window (hours) is not slept through in one piece, the server's answer
# (another 0, or a 429 with its Retry-After) decides what comes next.
PACE_CAP_SECONDS = 60.0

_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")


class RateLimit(msgspec.Struct, frozen=True, kw_only=True):
    limit_requests: int | None = None  # the window's size, where the server says it
    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_requests: float | None = None  # seconds from the answer
    reset_tokens: float | None = None

    def spent(self) -> tuple[str, float] | None:
        """(the window that is spent, seconds to its reset) when a count is 0 and its
        reset is known; the later of the two when both are."""
        out: tuple[str, float] | None = None
        for what, left, reset in (("requests", self.remaining_requests, self.reset_requests),
                                  ("tokens", self.remaining_tokens, self.reset_tokens)):
            if left is not None and left <= 0 and reset is not None and (out is None or reset > out[1]):
                out = (what, reset)
        return out


def reset_seconds(text: str, now: float | None = None) -> float | None:
    """Seconds until a reset given as ``1m30s``, ``250ms``, ``0.5`` or a Unix time; None
    when it cannot be read or is negative."""
    s = text.strip()
    if not s:
        return None
    try:
        value = float(s)
    except ValueError:
        parts = _PART.findall(s)
        if not parts or "".join(n + u for n, u in parts) != s:
            return None
        return sum(float(n) * _UNIT[u] for n, u in parts)
    if value != value or value < 0:  # NaN, negative
        return None
    wall = time.time() if now is None else now
    if value > 1e11:  # a Unix time in milliseconds
        return max(0.0, value / 1000 - wall)
    if value > 1e9:  # a Unix time in seconds
        return max(0.0, value - wall)
    return value


def _count(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(float(text.strip()))
    except ValueError:
        return None


def read_rate_limit(headers: Mapping[str, str]) -> RateLimit | None:
    """The rate-limit headers of an answer (None: it sent none), names case-insensitive."""
    got = {k.lower(): v for k, v in headers.items() if k.lower().startswith("x-ratelimit-")}
    if not got:
        return None

    def reset(name: str) -> float | None:
        v = got.get(name)
        return None if v is None else reset_seconds(v)

    return RateLimit(limit_requests=_count(got.get("x-ratelimit-limit-requests")),
                     remaining_requests=_count(got.get("x-ratelimit-remaining-requests")),
                     remaining_tokens=_count(got.get("x-ratelimit-remaining-tokens")),
                     reset_requests=reset("x-ratelimit-reset-requests"),
                     reset_tokens=reset("x-ratelimit-reset-tokens"))


class Pacer:
    """How many more requests one server takes before its window refills, learned from
    its answers' headers. An answer saying R left allows R less those still in flight
    (the server may not have counted them yet); a window spent (0 requests or 0 tokens
    left) holds every request until its reset, then lets through as many as the
    window holds (`x-ratelimit-limit-requests`), or one, whose answer tells the rest:
    so the requests held do not all go at once and spend the new window in a burst.
    A server that sends no such header is never held. Before its first answer nothing
    is known: the first requests in flight may overrun a small window once."""

    def __init__(self) -> None:
        self.allowance: int | None = None  # requests it takes before `window_end` (None: no limit known)
        self.window_end = 0.0
        self.limit: int | None = None
        self.in_flight = 0

    async def admit(self) -> None:
        while self.allowance is not None and self.allowance <= 0:
            left = self.window_end - time.monotonic()
            if left <= 0:
                self.allowance = self.limit or 1
                break
            await asyncio.sleep(left)
        if self.allowance is not None:
            self.allowance -= 1
        self.in_flight += 1

    def answered(self, limit: RateLimit | None) -> tuple[str, float] | None:
        """One request is no longer in flight; with its answer's headers, the window
        as they tell it. Returns the window spent and its reset when one is."""
        self.in_flight = max(0, self.in_flight - 1)
        if limit is None:
            return None
        now = time.monotonic()
        if limit.limit_requests is not None:
            self.limit = limit.limit_requests
        spent = limit.spent()
        if spent is not None:
            self.allowance = 0
            self.window_end = max(self.window_end, now + min(spent[1], PACE_CAP_SECONDS))
        elif limit.remaining_requests is not None and limit.reset_requests is not None:
            self.allowance = limit.remaining_requests - self.in_flight
            self.window_end = now + min(limit.reset_requests, PACE_CAP_SECONDS)
        return spent
