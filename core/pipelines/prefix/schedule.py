"""A score run's requests replayed on models of its servers' prefix caches.

The client side is `score`'s: positions opened in the feed's order
(`score/feed.py`: a story's positions in ascending k, `spread` stories at once),
at most `max_open` at a time; a lane per role holding `gen_concurrency` and
`judge_concurrency` requests in flight, first come first served, a batch of k
judge prompts holding k slots (`run/scheduler.py`); per position the generation
request, then (once it answers) the warm-up judge prompt, then the other judge
prompts as one batched request (`score/judge.py`, `llm/batch.py`). The server
side is `engine.Engine`, one per server; the generation and judge roles may share
one (the embedded server) or not (the paper's two engines on one H200).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Iterator

import msgspec

from tension.core.pipelines.prefix.engine import Clock, Engine, EngineSpec, Group, RoleTotals

__all__ = ["PositionWork", "Schedule", "Prediction", "simulate"]


class PositionWork(msgspec.Struct, kw_only=True):
    """One position's requests: the generation request (its n copies), the warm-up
    judge prompt and the batch of the others (None: not sent)."""

    generation: Group
    warm: Group | None = None
    batch: Group | None = None


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    gen_concurrency: int = 64
    judge_concurrency: int = 512
    max_open: int = 76


class Prediction(msgspec.Struct, kw_only=True):
    """What the model predicts, per role and in all: prompt tokens queried, hit,
    computed; the hit rate; and what it took."""

    roles: dict[str, RoleTotals]
    positions: int = 0
    steps: int = 0  # engine steps the run took in the model
    never_fit: int = 0  # requests larger than a whole KV cache (skipped)
    seconds: float = 0.0

    @property
    def total(self) -> RoleTotals:
        return RoleTotals(requests=sum(r.requests for r in self.roles.values()),
                          queries=sum(r.queries for r in self.roles.values()),
                          hits=sum(r.hits for r in self.roles.values()))


class _Lane:
    """`run/scheduler._Lane`'s rule: waiters in order, a weight above the limit takes the whole lane."""

    def __init__(self, limit: int):
        self.limit = limit
        self.free = limit
        self.waiters: collections.deque[tuple[int, Callable[[], None]]] = collections.deque()

    def acquire(self, weight: int, then: Callable[[int], None]) -> None:
        weight = min(weight, self.limit)
        if not self.waiters and self.free >= weight:
            self.free -= weight
            then(weight)
        else:
            self.waiters.append((weight, lambda: then(weight)))

    def release(self, weight: int) -> None:
        self.free += weight
        while self.waiters and self.free >= self.waiters[0][0]:
            w, fn = self.waiters.popleft()
            self.free -= w
            fn()


def simulate(work: Iterable[PositionWork], sched: Schedule, generation: EngineSpec,
             judge: EngineSpec | None = None) -> Prediction:
    """Run the positions of `work` (in the feed's order) through lanes and engines;
    `judge` None: the judge prompts go to the generation server."""
    t0 = time.perf_counter()
    clock = Clock()
    gen_engine = Engine(generation, clock)
    judge_engine = gen_engine if judge is None else Engine(judge, clock)
    clock.engines = [gen_engine] if judge is None else [gen_engine, judge_engine]
    lanes = {"generation": _Lane(sched.gen_concurrency), "judge": _Lane(sched.judge_concurrency)}
    it: Iterator[PositionWork] = iter(work)
    state = {"open": 0, "positions": 0, "exhausted": False}

    def send(lane: str, engine: Engine, group: Group, then: Callable[[], None]) -> None:
        def go(held: int) -> None:
            def done() -> None:
                lanes[lane].release(held)
                then()
            engine.submit(group, done)
        lanes[lane].acquire(group.k if lane == "judge" else 1, go)

    def open_more() -> None:
        while not state["exhausted"] and state["open"] < sched.max_open:
            pw = next(it, None)
            if pw is None:
                state["exhausted"] = True
                return
            state["open"] += 1
            state["positions"] += 1
            start(pw)

    def close() -> None:
        state["open"] -= 1
        open_more()

    def start(pw: PositionWork) -> None:
        def batch() -> None:
            if pw.batch is None:
                close()
            else:
                send("judge", judge_engine, pw.batch, close)

        def judged() -> None:
            if pw.warm is None:
                batch()
            else:
                send("judge", judge_engine, pw.warm, batch)

        send("generation", gen_engine, pw.generation, judged)

    open_more()
    clock.run()
    roles: dict[str, RoleTotals] = {}
    for e in {id(e): e for e in clock.engines}.values():
        for role, rt in e.roles.items():
            into = roles.setdefault(role, RoleTotals())
            into.requests += rt.requests
            into.queries += rt.queries
            into.hits += rt.hits
    return Prediction(roles=roles, positions=state["positions"], steps=clock.now,
                      never_fit=sum(e.never_fits for e in {id(e): e for e in clock.engines}.values()),
                      seconds=time.perf_counter() - t0)
