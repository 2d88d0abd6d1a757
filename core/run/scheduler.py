"""The one place that creates tasks.

A ``Scheduler`` is an async context manager around an ``asyncio.TaskGroup``:
leaving the block joins every task; a failed task cancels its siblings and the
error comes out of the block; Ctrl-C cancels everything, and the ``finally``
blocks of the pipeline flush what completed (trio's rules, via TaskGroup).

Requests run in *lanes* (generation, judge, tokenize), each a semaphore bounding
the requests in flight to its endpoint (a batch of k prompts holds k slots). Time spent waiting for a lane is recorded
apart from the time the request took, as vLLM's benchmarks do, so a run can tell
"the server is slow" from "we queue too much".

Each item `feed` starts has its place (core/llm/capacity.py `ORDER`): a server
with few slots serves the item started earliest first, so items complete one
after another, not all together at the end.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, TypeVar

import msgspec

from tension.core.llm.capacity import ORDER

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
    """A semaphore whose holders take `weight` slots: a batched request of k prompts
    (core/llm/batch.py) counts as the k requests it carries. Waiters are served in
    order, so a large batch is not overtaken for ever by small ones; a weight above
    the limit takes the whole lane."""

    def __init__(self, limit: int):
        self.limit = limit
        self.free = limit
        self.waiters: collections.deque[tuple[int, asyncio.Future]] = collections.deque()
        self.stats = LaneStats(limit=limit)

    async def acquire(self, weight: int) -> int:
        weight = min(weight, self.limit)
        if not self.waiters and self.free >= weight:
            self.free -= weight
            return weight
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append((weight, fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted as it was cancelled: give it back
                self.release(weight)
            else:
                with contextlib.suppress(ValueError):  # `_wake` may have dropped it already
                    self.waiters.remove((weight, fut))
                self._wake()
            raise
        return weight

    def release(self, weight: int) -> None:
        self.free += weight
        self._wake()

    def _wake(self) -> None:
        while self.waiters and self.free >= self.waiters[0][0]:
            weight, fut = self.waiters.popleft()
            if not fut.done():
                self.free -= weight
                fut.set_result(None)


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

    async def request(self, lane: str, fn: Callable[..., Awaitable[R]], *args: Any) -> R:
        """Run one request in a lane: wait for a slot, then call ``fn(*args)``."""
        return await self.request_weighted(lane, 1, fn, *args)

    async def request_weighted(self, lane: str, weight: int, fn: Callable[..., Awaitable[R]], *args: Any) -> R:
        """Run a request that carries `weight` requests (a batch): it holds that many
        slots of the lane (at most all of them) while it runs."""
        ln = self._lanes[lane]
        st = ln.stats
        t0 = time.perf_counter()
        held = await ln.acquire(weight)
        t1 = time.perf_counter()
        st.queue_seconds += t1 - t0
        st.started += weight  # requests carried; in flight: slots held (never above the limit)
        st.in_flight += held
        st.peak_in_flight = max(st.peak_in_flight, st.in_flight)
        try:
            return await fn(*args)
        finally:
            ln.release(held)
            st.in_flight -= held
            st.finished += weight
            st.busy_seconds += time.perf_counter() - t1

    async def map(self, fn: Callable[[T], Coroutine[Any, Any, R]], items: Iterable[T]) -> list[R]:
        """``fn`` over every item concurrently, as tasks of this scheduler; results in order."""
        tasks = [self.spawn(fn(it)) for it in items]
        return [await t for t in tasks]

    async def feed(self, jobs: AsyncIterator[T] | Iterable[T], fn: Callable[[T], Awaitable[None]],
                   max_open: int) -> None:
        """Start ``fn(job)`` for each job in order, never more than ``max_open`` at
        once (backpressure: the source is not read further while all are busy)."""
        gate = asyncio.Semaphore(max_open)

        async def run(job: T, place: int) -> None:
            ORDER.set(place)  # its requests before a later item's (module docstring); its task's own context
            try:
                await fn(job)
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
