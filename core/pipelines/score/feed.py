"""The order positions are opened in.

A story's positions go in ascending k, so their prompts share the story's prefix
in the server's prefix cache; stories go in corpus order. With several generation
servers the vLLM router keeps each story on one of them (core/llm/router.py), so
the feed works on as many stories at once as there are servers, a position of
each in turn: fed one story after another, only one or two servers would have
work at a time.
"""

from __future__ import annotations

import collections
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
    per_request = cfg.endings_per_request()
    return n_gen * cfg.gen_concurrency + max(2, 2 * math.ceil(n_judge * cfg.judge_concurrency / per_request))


class PositionFeed:
    """The stories' positions, found by `finder`, fed to a run's positions. A story
    whose tokens the server refuses to count fails (into `failed`), the others go on."""

    def __init__(self, finder: PositionFinder, stories: list[Story], progress: Progress,
                 failed: dict[int, Failure], spread: int = 1):
        self.finder = finder
        self.stories = stories
        self.progress = progress
        self.failed = failed
        self.spread = spread  # stories worked on at once: one per generation server

    async def run(self, sched: Scheduler, position: Callable[[Position, int], Awaitable[None]], limit: int) -> None:
        """Feed every position to `position` with its place, at most `limit` open at once."""
        await sched.feed(self.stream(), position, limit)

    async def stream(self) -> AsyncIterator[Position]:
        """Each story's positions in ascending k (their prompts share the story's
        prefix, which the server's prefix cache serves); `spread` stories at a time,
        in corpus order, one position of each in turn."""
        stories = iter(enumerate(self.stories))
        open_: collections.deque[collections.deque[Position]] = collections.deque()
        while True:
            while len(open_) < self.spread and (nxt := next(stories, None)) is not None:
                ps = await self._positions(*nxt)
                if ps:
                    open_.append(collections.deque(ps))
            if not open_:
                return
            story = open_.popleft()
            yield story.popleft()
            if story:
                open_.append(story)

    async def _positions(self, si: int, story: Story) -> list[Position]:
        """A story's positions (none when the server refused to count its tokens: it fails)."""
        try:
            ps = await self.finder.positions(si, story)
        except StatusError as e:
            self.failed[si] = Failure(id=story.id, stage="tokenize", error=str(e))
            return []
        self.progress.item_started(len(ps))
        return ps
