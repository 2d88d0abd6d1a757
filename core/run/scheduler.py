"""The one place that creates tasks.

A ``Scheduler`` is an async context manager around an ``asyncio.TaskGroup``:
leaving the block joins every task; a failed task cancels its siblings and the
error comes out of the block; Ctrl-C cancels everything, and the ``finally``
blocks of the pipeline flush what completed (trio's rules, via TaskGroup).

Requests run in *lanes* (generation, judge, tokenize), each weighted slots
bounding the requests in flight to its endpoint (a batch of k prompts holds k
slots): the engine holds a slot while it calls the router itself,

    async with sched.slot("judge", weight=len(prompts), place=ticket.place):
        batch = await router.complete(ticket, template, prompts)

Time spent waiting for a lane is recorded apart from the time the request took,
as vLLM's benchmarks do, so a run can tell "the server is slow" from "we queue
too much".

Each item `feed` starts gets its place, handed to the item's function: its
requests carry it (core/llm/ticket.py), and a lane, like a server with few slots,
serves the item started earliest first (core/llm/slots.py, the one rule), so
items complete one after another, not all together at the end.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, TypeVar

import msgspec

from tension.core.llm.slots import Slots
from tension.core.llm.ticket import LAST

__all__ = ["LaneStats", "Scheduler"]

T = TypeVar("T")
R = TypeVar("R")


class LaneStats(msgspec.Struct, kw_only=True):
    limit: int
    started: int = 0
    finished: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    queue_seconds: float = 0.0
    busy_seconds: float = 0.0


class _Lane:
    """A lane's slots (core/llm/slots.py: by the item's place, then arrival; a
    weight above the limit takes the whole lane) and its figures."""

    def __init__(self, limit: int):
        self.slots = Slots(limit)
        self.stats = LaneStats(limit=limit)


class _Slot:
    """`Scheduler.slot`'s block (a class, not a generator: every request the run sends
    holds one): the wait timed apart from the request, the lane's figures kept."""

    __slots__ = ("lane", "weight", "place", "held", "t1")

    def __init__(self, lane: _Lane, weight: int, place: int):
        self.lane, self.weight, self.place = lane, weight, place
        self.held = 0
        self.t1 = 0.0

    async def __aenter__(self) -> None:
        ln, st = self.lane, self.lane.stats
        t0 = time.perf_counter()
        self.held = ln.slots.queue.weigh(self.weight)
        await ln.slots.acquire(self.held, self.place)
        self.t1 = time.perf_counter()
        st.queue_seconds += self.t1 - t0
        st.started += self.weight  # requests carried; in flight: slots held (never above the limit)
        st.in_flight += self.held
        st.peak_in_flight = max(st.peak_in_flight, st.in_flight)

    async def __aexit__(self, et: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        ln, st = self.lane, self.lane.stats
        ln.slots.release(self.held)
        st.in_flight -= self.held
        st.finished += self.weight
        st.busy_seconds += time.perf_counter() - self.t1


class Scheduler:
    """Owns the tasks and the request lanes of one run."""

    def __init__(self, lanes: dict[str, int]):
        for name, limit in lanes.items():
            if limit < 1:
                raise ValueError(f"lane {name!r}: limit must be >= 1, got {limit}")
        self._limits = dict(lanes)
        self._lanes: dict[str, _Lane] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._work: set[asyncio.Task] = set()
        self._services: list[asyncio.Task] = []
        self._places = itertools.count()  # the places of the items `feed` starts, in order

    async def __aenter__(self) -> Scheduler:
        # Semaphores bind to the running loop, so they are made here.
        self._lanes = {name: _Lane(limit) for name, limit in self._limits.items()}
        self._tg = asyncio.TaskGroup()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, et: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        tg = self._tg
        assert tg is not None  # entered
        if et is None:
            # Join the work first; services (e.g. the group-commit timer) run
            # until then. A failing task cancels us here, and the TaskGroup below
            # turns that into the task's own error.
            try:
                while self._work:
                    await asyncio.wait(list(self._work))
            except asyncio.CancelledError as e:
                et, exc, tb = type(e), e, e.__traceback__
        for t in self._services:
            t.cancel()
        self._tg = None
        await tg.__aexit__(et, exc, tb)

    @property
    def lane_stats(self) -> dict[str, LaneStats]:
        return {name: lane.stats for name, lane in self._lanes.items()}

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Start a task of the run's work; leaving the block waits for it."""
        if self._tg is None:
            raise RuntimeError("spawn() outside `async with Scheduler(...)`")
        task = self._tg.create_task(coro)
        self._work.add(task)
        task.add_done_callback(self._work.discard)
        return task

    def service(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Start a background task that runs until all work is done, then is cancelled."""
        if self._tg is None:
            raise RuntimeError("service() outside `async with Scheduler(...)`")
        task = self._tg.create_task(coro)
        self._services.append(task)
        return task

    def slot(self, lane: str, weight: int = 1, place: int = LAST) -> _Slot:
        """Hold `weight` slots of `lane` (at most all of them) for the block: a request
        that carries `weight` requests (a batch). `place`: its item's (module docstring)."""
        return _Slot(self._lanes[lane], weight, place)

    async def map(self, fn: Callable[[T], Coroutine[Any, Any, R]], items: Iterable[T]) -> list[R]:
        """``fn`` over every item concurrently, as tasks of this scheduler; results in order."""
        tasks = [self.spawn(fn(it)) for it in items]
        return [await t for t in tasks]

    async def feed(self, jobs: AsyncIterator[T] | Iterable[T], fn: Callable[[T, int], Awaitable[None]],
                   max_open: int) -> None:
        """Start ``fn(job, place)`` for each job in order, never more than ``max_open``
        at once (backpressure: the source is not read further while all are busy);
        `place` numbers the jobs in order: its requests go before a later job's
        (module docstring)."""
        gate = asyncio.Semaphore(max_open)

        async def run(job: T, place: int) -> None:
            try:
                await fn(job, place)
            finally:
                gate.release()

        if hasattr(jobs, "__aiter__"):
            async for job in jobs:
                await gate.acquire()
                self.spawn(run(job, next(self._places)))
        else:
            for job in jobs:
                await gate.acquire()
                self.spawn(run(job, next(self._places)))
