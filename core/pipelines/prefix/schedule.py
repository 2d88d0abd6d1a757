"""A score run's requests replayed on models of its servers' prefix caches.

The client side is `score`'s: positions opened in the feed's order
(`score/feed.py`: a story's positions in ascending k, `spread` stories at once),
at most `max_open` at a time; a lane per role holding `gen_concurrency` and
`judge_concurrency` requests in flight, served by the position's place in the
feed, then arrival, a batch of k judge prompts holding k slots (`run/scheduler.py`,
by the one rule of `llm/slots.py`); per position the generation
request, then (once it answers) the warm-up judge prompt, then the other judge
prompts as one batched request (`score/judge.py`, `llm/batch.py`). The server
side is `engine.Engine`, one per server; the generation and judge roles may share
one (the embedded server) or not (the paper's two engines on one H200).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

import msgspec

from tension.core.llm.slots import SlotQueue
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
    """A run lane as the engine's are (core/llm/slots.py `SlotQueue`: by place, then
    arrival; a weight above the limit takes the whole lane), its waiters callbacks."""

    def __init__(self, limit: int):
        self.queue: SlotQueue[Callable[[], None]] = SlotQueue(limit)

    def acquire(self, weight: int, place: int, then: Callable[[int], None]) -> None:
        held = self.queue.weigh(weight)
        if self.queue.take(held):
            then(held)
        else:
            self.queue.wait(held, place, lambda: then(held))

    def release(self, weight: int) -> None:
        self.queue.release(weight)
        for fn, _weight in self.queue.ready():
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

    def send(lane: str, engine: Engine, group: Group, place: int, then: Callable[[], None]) -> None:
        def go(held: int) -> None:
            def done() -> None:
                lanes[lane].release(held)
                then()
            engine.submit(group, done)
        lanes[lane].acquire(group.k if lane == "judge" else 1, place, go)

    def open_more() -> None:
        while not state["exhausted"] and state["open"] < sched.max_open:
            pw = next(it, None)
            if pw is None:
                state["exhausted"] = True
                return
            state["open"] += 1
            start(pw, state["positions"])  # its place: the feed numbers positions as it opens them
            state["positions"] += 1

    def close() -> None:
        state["open"] -= 1
        open_more()

    def start(pw: PositionWork, place: int) -> None:
        def batch() -> None:
            if pw.batch is None:
                close()
            else:
                send("judge", judge_engine, pw.batch, place, close)

        def judged() -> None:
            if pw.warm is None:
                batch()
            else:
                send("judge", judge_engine, pw.warm, place, batch)

        send("generation", gen_engine, pw.generation, place, judged)

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
