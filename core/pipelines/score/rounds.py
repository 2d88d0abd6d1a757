"""Adaptive endings (docs/metrics.md 1.7): a position's endings in rounds, each round
its own generation request (`ScoreRequests.endings_round`: its own seed and cache key)
and its own judged record, until the stopping rule (kernels/stopping.py) holds.

A round found in the cache costs nothing, so a later run with a tighter target
replays the early rounds and asks only for the missing ones. The rounds' endings and
verdicts are joined in draw order into what a fixed run of as many endings holds.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec

from tension.cache.records import Endings, Usage
from tension.core.config import ScoreConfig
from tension.core.llm.ticket import Ticket
from tension.core.pipelines.score.judge import Judge
from tension.core.pipelines.score.requests import ScoreRequests
from tension.core.pipelines.score.round_walk import RoundWalk
from tension.core.run.engine import Engine
from tension.core.run.reads import chat_key
from tension.kernels.stopping import rounds_distribution

__all__ = ["Drawn", "draw", "AdaptiveTally"]


class Drawn(msgspec.Struct, kw_only=True):
    """A position's endings over its rounds, and its verdicts (None: an empty ending)."""

    endings: Endings  # the rounds' records joined: texts, finish reasons, summed usage
    answers: list[str | None]
    judge_usage: Usage
    rounds: int


async def draw(llm: Engine, judge: Judge, reqs: ScoreRequests, tickets: tuple[Ticket, Ticket],
               sentences: Sequence[str], k: int) -> Drawn:
    """The position's rounds until the rule stops them (a round is judged before the next is asked)."""
    walk = RoundWalk(reqs, sentences, k)
    judge_usage = Usage()
    for request in walk.requests():
        rec = await llm.endings("generation", request, ticket=tickets[0])
        _ask, votes, usage = await judge.verdicts(reqs, tickets[1], sentences, k, rec.texts, chat_key(request))
        judge_usage.add(usage)
        walk.add(rec, votes)
    return Drawn(endings=walk.endings(time.time()), answers=walk.votes, judge_usage=judge_usage, rounds=walk.rounds)


class AdaptiveTally:
    """The endings each position used, for run.json's `adaptive` and the report's line."""

    def __init__(self, cfg: ScoreConfig):
        self.cfg = cfg
        self.used: dict[tuple[int, int], int] = {}  # (story index, k) -> endings

    def add(self, key: tuple[int, int], endings: int) -> None:
        self.used[key] = endings

    def body(self, kept: set[tuple[int, int]]) -> dict[str, object]:
        """Settings and summary over the positions written (`kept`)."""
        c = self.cfg
        used = [n for key, n in sorted(self.used.items()) if key in kept]
        fixed = len(used) * c.max_endings
        return {"target_half_width": c.target_half_width, "round_endings": c.round_endings,
                "max_endings": c.max_endings, "positions": len(used), "endings_used": sum(used),
                "endings_fixed": fixed, "share_of_fixed": round(sum(used) / fixed, 6) if fixed else None,
                "rounds": rounds_distribution(used, c.round_endings, c.max_endings)}
