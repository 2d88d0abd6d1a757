"""Weighted slots with an order key and a limit that may move: the one rule.

Three things in the tool hand out room by weight: the run's lanes (how many
requests a role has in flight, core/run/scheduler.py), a server's capacity (how
many sequences it is sent at once, core/llm/capacity.py) and the prefix-cache
simulator's model of those lanes (core/pipelines/prefix/schedule.py). They share
this rule, so what the simulator predicts is what the engine does:

- a holder takes `weight` slots (a batch of k judge prompts, a request of n
  choices), at most the whole limit: a weight above it runs alone;
- waiters are served by their order key (the work item's place,
  core/llm/ticket.py), then by arrival: the item started earliest completes
  first, and a large weight is not overtaken for ever by small ones;
- the limit may move (capacity halves it on an overload, and raises it again); a
  waiter whose weight no longer fits goes when nothing is held.

`SlotQueue` is the rule as a plain data structure, with no event loop: a waiter
is any value (a future, a callback), handed back by `ready` when its room is
taken for it. `Slots` is the rule on the event loop (`acquire` waits for room),
handing freed room on at once or at the loop's next turn.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Generic, TypeVar

from tension.core.llm.ticket import LAST

__all__ = ["SlotQueue", "Slots"]

W = TypeVar("W")


class SlotQueue(Generic[W]):
    """The rule of the module docstring; `limit` None: nothing binds."""

    def __init__(self, limit: float | None):
        self.limit = limit
        self.held = 0
        self._waiters: list[tuple[int, int, int, W]] = []  # (order, arrival, weight, waiter): a heap
        self._arrivals = itertools.count()

    def __len__(self) -> int:
        return len(self._waiters)

    def weigh(self, n: int) -> int:
        """The slots `n` units take: at least 1, at most the limit."""
        return max(1, min(n, int(self.limit))) if self.limit is not None else max(1, n)

    def fits(self, weight: int) -> bool:
        return self.limit is None or self.held + weight <= max(1, int(self.limit))

    def take(self, weight: int) -> bool:
        """Take `weight` slots now when no one waits and they fit (else `wait`)."""
        if not self._waiters and self.fits(weight):
            self.held += weight
            return True
        return False

    def wait(self, weight: int, order: int, waiter: W) -> None:
        heapq.heappush(self._waiters, (order, next(self._arrivals), weight, waiter))

    def release(self, weight: int) -> None:
        self.held -= weight

    def ready(self) -> list[tuple[W, int]]:
        """The waiters that fit now, in order, with their weights, their slots taken for them."""
        out = []
        while self._waiters and (self.fits(self._waiters[0][2]) or self.held == 0):
            _order, _arrival, weight, waiter = heapq.heappop(self._waiters)
            self.held += weight
            out.append((waiter, weight))
        return out

    def drop(self, waiter: W) -> bool:
        """`waiter` no longer waits (cancelled); False when it was not waiting."""
        for i, entry in enumerate(self._waiters):
            if entry[3] is waiter:
                self._waiters.pop(i)
                heapq.heapify(self._waiters)
                return True
        return False


class Slots:
    """`SlotQueue` on the event loop. `defer`: freed room is handed on at the loop's
    next turn, not at once (core/llm/capacity.py: the request that freed it asks
    for its next chunk meanwhile, and a later item does not take its room)."""

    def __init__(self, limit: float | None, *, defer: bool = False):
        self.queue: SlotQueue[asyncio.Future[None]] = SlotQueue(limit)
        self.defer = defer
        self._due = False

    async def acquire(self, weight: int, order: int = LAST) -> None:
        """Wait until `weight` slots are taken for the caller (`order`: its item's place)."""
        q = self.queue
        if q.take(weight):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        q.wait(weight, order, fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted as it was cancelled: give it back
                self.release(weight)
            else:
                q.drop(fut)
                self._wake()
            raise

    def release(self, weight: int) -> None:
        self.queue.release(weight)
        self._wake()

    def _wake(self) -> None:
        if not self.defer:
            self._hand_on()
        elif not self._due and len(self.queue):
            self._due = True
            asyncio.get_running_loop().call_soon(self._hand_on)

    def _hand_on(self) -> None:
        self._due = False
        again = True
        while again:
            again = False
            for fut, weight in self.queue.ready():
                if fut.done():  # cancelled while it waited: its room back, and on to the next
                    self.queue.release(weight)
                    again = True
                else:
                    fut.set_result(None)
