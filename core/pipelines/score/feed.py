"""The order positions are opened in.

A story's positions go in ascending k, so their prompts share the story's prefix
in the server's prefix cache; stories go in corpus order. With several servers the
vLLM router spreads stories over them by their routing key (core/llm/router.py);
enough positions are open at once (`max_open`) that every server has stories.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable

from tension.core.config import ScoreConfig
from tension.core.errors import StatusError
from tension.core.inputs.corpus import Story
from tension.core.pipelines.score.positions import Position, PositionFinder
from tension.core.run.progress import Progress
from tension.core.run.record import Failure
from tension.core.run.scheduler import Scheduler

__all__ = ["PositionFeed", "max_open"]


def max_open(cfg: ScoreConfig, n_gen: int, n_judge: int) -> int:
    """Positions open at once: enough to keep every lane full, few enough that each
    generation lane works on one story's prefix at a time."""
    return n_gen * cfg.gen_concurrency + max(2, 2 * math.ceil(n_judge * cfg.judge_concurrency / cfg.endings))


class PositionFeed:
    """The stories' positions, found by `finder`, fed to a run's positions. A story
    whose tokens the server refuses to count fails (into `failed`), the others go on."""

    def __init__(self, finder: PositionFinder, stories: list[Story], progress: Progress,
                 failed: dict[int, Failure]):
        self.finder = finder
        self.stories = stories
        self.progress = progress
        self.failed = failed

    async def run(self, sched: Scheduler, position: Callable[[Position], Awaitable[None]], limit: int) -> None:
        """Feed every position to `position`, at most `limit` open at once."""
        await sched.feed(self.stream(), position, limit)

    async def stream(self) -> AsyncIterator[Position]:
        """Positions in corpus order, each story's in ascending k (their prompts
        share the story's prefix, which the server's prefix cache serves)."""
        for si, story in enumerate(self.stories):
            try:
                ps = await self.finder.positions(si, story)
            except StatusError as e:
                self.failed[si] = Failure(id=story.id, stage="tokenize", error=str(e))
                continue
            self.progress.item_started(len(ps))
            for p in ps:
                yield p
