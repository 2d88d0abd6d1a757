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
place (its `Ticket`, core/llm/ticket.py: the scheduler's feed numbers the items it
starts, a score position, an idea), and room goes to the item started earliest,
arrival breaking ties (core/llm/slots.py, the rule the run's lanes share).
First come first served, a 4-slot server given 33 positions' chunks of 4
advanced them all in lockstep, and none completed for 40 minutes; by place, the
positions complete one after another and their results are written as they do.
Room freed is handed on at the loop's next turn, not at once: the request that
freed it asks for its next chunk meanwhile, and a later item does not take the room
the earlier one was about to ask for again.
"""

from __future__ import annotations

import asyncio

import msgspec

from tension.core.llm.slots import Slots
from tension.core.llm.ticket import LAST

__all__ = ["Capacity", "CapacityStats"]


class CapacityStats(msgspec.Struct, kw_only=True):
    """A server's capacity over the run (run.json `servers[].capacity`)."""

    limit: int | None  # the limit now (None: none binds)
    ceiling: int | None  # what the server said it holds (slots)
    lowered: int = 0  # times a time-out or a 503 halved it
    peak_in_flight: int = 0
    wait_seconds: float = 0.0  # requests' time waiting for it, outside the time-out


class Capacity:
    """Weighted slots whose limit moves (module docstring)."""

    def __init__(self, ceiling: int | None):
        self.ceiling = ceiling
        self.slots = Slots(float(ceiling) if ceiling else None, defer=True)
        self.epoch = 0  # how many times the limit was lowered
        self.stats = CapacityStats(limit=ceiling, ceiling=ceiling)

    @property
    def limit(self) -> float | None:
        return self.slots.queue.limit

    @property
    def in_flight(self) -> int:
        return self.slots.queue.held

    def weigh(self, n: int) -> int:
        """A request of `n` choices holds this many units (a request above the limit, all of it)."""
        return self.slots.queue.weigh(n)

    async def acquire(self, weight: int, place: int = LAST) -> None:
        """Wait for `weight` units; `place`: the request's item's (module docstring)."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            await self.slots.acquire(weight, place)
        finally:
            self.stats.wait_seconds += loop.time() - t0
        self.stats.peak_in_flight = max(self.stats.peak_in_flight, self.in_flight)

    def release(self, weight: int) -> None:
        self.slots.release(weight)

    def overloaded(self, epoch: int) -> bool:
        """A time-out or 503 of a request sent at `epoch` (`self.epoch` when it was
        sent): halve what the server is sent. Only a request sent since the last
        lowering lowers it again; the others of a burst were sent at the old limit.
        True when the limit was lowered."""
        if epoch != self.epoch:
            return False
        q = self.slots.queue
        now = q.held if q.limit is None else min(q.limit, q.held)
        q.limit = max(1.0, now / 2)
        self.epoch += 1
        self.stats.lowered += 1
        self.stats.limit = int(q.limit)
        return True

    def answered(self) -> None:
        """An answer: additive increase, up to the ceiling; without one, the limit
        is dropped once it is well above what is in flight (it no longer binds)."""
        q = self.slots.queue
        if q.limit is None:
            return
        q.limit += 1 / max(1.0, q.limit)
        if self.ceiling is not None:
            q.limit = min(q.limit, float(self.ceiling))
        elif q.limit > 2 * max(1, q.held) + 8 and not len(q):
            q.limit = None
        self.stats.limit = None if q.limit is None else int(q.limit)
        self.slots.release(0)  # room may have grown: hand it on
