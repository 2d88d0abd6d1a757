"""What a request needs on its way down besides itself: its `Ticket`.

A request goes from the run's engine to the socket through the router, the
client, the gathering of its choices and the retry loop. Three things about it
are not in the request (they never enter its cache key) and each floor may need
them: which server it should meet (the routing key), when it is served if its
server is full (its work item's place) and, for an answer that takes several
requests, which of its pieces the cache holds already. They travel together, as
one typed, frozen record handed down as an argument: no floor reads them from
ambient state, and none below the engine calls back into it (a `Shelf` only
reads; the pieces that come back are return values, `Piece`, core/llm/choices.py).

    ticket = Ticket(key=story.id, place=place)   # a score position's generation request
    rec = await run.llm.endings("generation", request, ticket=ticket)
"""

from __future__ import annotations

import sys
from typing import Protocol

import msgspec

from tension.core.llm.results import ChatResult

__all__ = ["Ticket", "Shelf", "Piece", "LAST", "NO_TICKET"]

# The place of a request of no work item: after every item's, in arrival order.
LAST = sys.maxsize


class Shelf(Protocol):
    """Where the pieces of one answer the cache holds are read: choices start …
    start + count − 1, asked as one request (core/llm/choices.py `chunk`)."""

    def kept(self, start: int, count: int) -> ChatResult | None:
        """The piece the cache holds (None: ask for it). A read, nothing else."""
        ...


class Ticket(msgspec.Struct, frozen=True, kw_only=True):
    """A request's routing key, its item's place and its pieces' shelf (module docstring)."""

    # Requests with one key meet one server behind a router (`X-Session-ID`,
    # protocol.routing_headers): a story's prompts share its prefix, so its prefix cache.
    key: str = ""
    # The place of the work item it serves (the scheduler's feed numbers them as it
    # starts them): a full server serves the earliest item first (core/llm/capacity.py).
    place: int = LAST
    # The cache's pieces of this answer; None: it is kept whole only, by the caller.
    shelf: Shelf | None = None


NO_TICKET = Ticket()  # a request of no work item, no routing key, kept whole


class Piece(msgspec.Struct, kw_only=True):
    """A piece of an answer that took more than one request: its choices from
    `start` on, read back from the shelf (`kept`) or fresh from the server."""

    start: int
    result: ChatResult
    kept: bool = False
