"""How many sequences one server is sent at once: what it says it holds, lowered
when it shows it cannot keep up, raised again as it answers.

The run's lanes (core/run/scheduler.py) decide how much work a run has open; a
server's capacity is another thing, a property of the server shared by every
role that uses it. A llama.cpp server with 4 slots queues whatever is sent beyond
4 sequences, and a request that waits in its queue spends its time-out there: at
the default 64 generation and 512 judge requests in flight, requests timed out,
were re-sent at the back of the queue, and the run took 4× as long as at a
concurrency the server held (F2 of ../shared/reviews/external-servers-2026-12-01.md).

So a request holds `weight` units of its server's `Capacity` (its choices, at
most the limit) while it is on the wire, and waits for them before it is sent:
the client's time-out then counts the server's work, not its queue. The limit
starts at the server's slots where it says them (llama.cpp's /props); where it
does not, there is no limit until the server times out or answers 503, which
halves what it is sent (multiplicative decrease); each answer adds 1/limit back
(additive increase), up to the slots, or, on a server that never said, until the
limit no longer binds and is dropped. Waiting here is outside the time-out.

Who waits goes by the work item it serves, not by arrival (H1 of
../shared/reviews/external-servers-2026-12-02.md): a request carries its item's
place (`ORDER`, set by the scheduler's feed for each item it starts: a score
position, an idea), and room goes to the item started earliest, arrival breaking
ties. First come first served, a 4-slot server given 33 positions' chunks of 4
advanced them all in lockstep, and none completed for 40 minutes; by place, the
positions complete one after another and their results are written as they do.
Room freed is handed on at the loop's next turn, not at once: the request that
freed it asks for its next chunk meanwhile, and a later item does not take the room
the earlier one was about to ask for again.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import sys
from contextvars import ContextVar

import msgspec

__all__ = ["Capacity", "CapacityStats", "ORDER"]

# The place of the work item a request serves (lower: started earlier, served first);
# requests of no item come after every item's, in arrival order.
ORDER: ContextVar[int] = ContextVar("tension_capacity_order", default=sys.maxsize)


class CapacityStats(msgspec.Struct, kw_only=True):
    """A server's capacity over the run (run.json `servers[].capacity`)."""

    limit: int | None  # the limit now (None: none binds)
    ceiling: int | None  # what the server said it holds (slots)
    lowered: int = 0  # times a time-out or a 503 halved it
    peak_in_flight: int = 0
    wait_seconds: float = 0.0  # requests' time waiting for it, outside the time-out


class Capacity:
    """A weighted semaphore whose limit moves (module docstring)."""

    def __init__(self, ceiling: int | None):
        self.ceiling = ceiling
        self.limit: float | None = float(ceiling) if ceiling else None
        self.in_flight = 0
        self.epoch = 0  # how many times the limit was lowered
        self.stats = CapacityStats(limit=ceiling, ceiling=ceiling)
        # a heap of (the item's place, arrival, weight, future): the earliest item first
        self._waiters: list[tuple[int, int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()
        self._wake_due = False

    def _room(self, weight: int) -> bool:
        return self.limit is None or self.in_flight + weight <= max(1, int(self.limit))

    def weigh(self, n: int) -> int:
        """A request of `n` choices holds this many units (a request above the limit, all of it)."""
        return max(1, min(n, int(self.limit))) if self.limit is not None else max(1, n)

    async def acquire(self, weight: int) -> None:
        if not self._waiters and self._room(weight):
            self._take(weight)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (ORDER.get(), next(self._arrivals), weight, fut)
        heapq.heappush(self._waiters, entry)
        t0 = asyncio.get_running_loop().time()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(weight)
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(entry)
                    heapq.heapify(self._waiters)
                self._wake_soon()
            raise
        finally:
            self.stats.wait_seconds += asyncio.get_running_loop().time() - t0

    def _take(self, weight: int) -> None:
        self.in_flight += weight
        self.stats.peak_in_flight = max(self.stats.peak_in_flight, self.in_flight)

    def release(self, weight: int) -> None:
        self.in_flight -= weight
        self._wake_soon()

    def _wake_soon(self) -> None:
        """Hand freed room on at the loop's next turn (module docstring)."""
        if not self._wake_due and self._waiters:
            self._wake_due = True
            asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_due = False
        while self._waiters and (self._room(self._waiters[0][2]) or self.in_flight == 0):
            _order, _arrival, weight, fut = heapq.heappop(self._waiters)
            if not fut.done():
                self._take(weight)
                fut.set_result(None)

    def overloaded(self, epoch: int) -> bool:
        """A time-out or 503 of a request sent at `epoch` (`self.epoch` when it was
        sent): halve what the server is sent. Only a request sent since the last
        lowering lowers it again; the others of a burst were sent at the old limit.
        True when the limit was lowered."""
        if epoch != self.epoch:
            return False
        now = self.in_flight if self.limit is None else min(self.limit, self.in_flight)
        self.limit = max(1.0, now / 2)
        self.epoch += 1
        self.stats.lowered += 1
        self.stats.limit = int(self.limit)
        return True

    def answered(self) -> None:
        """An answer: additive increase, up to the ceiling; without one, the limit
        is dropped once it is well above what is in flight (it no longer binds)."""
        if self.limit is None:
            return
        self.limit += 1 / max(1.0, self.limit)
        if self.ceiling is not None:
            self.limit = min(self.limit, float(self.ceiling))
        elif self.limit > 2 * max(1, self.in_flight) + 8 and not self._waiters:
            self.limit = None
        self.stats.limit = None if self.limit is None else int(self.limit)
        self._wake_soon()
