"""The order positions are opened in.

A story's positions go in ascending k, so their prompts share the story's prefix
in the server's prefix cache; stories go in corpus order. With several
generation replicas each is fed its own stories (those it comes first for): a
feed in plain corpus order would keep only one or two stories, hence replicas,
busy at a time. A replica whose queue runs dry takes unstarted stories over from
the longest other queue (work stealing).
"""

from __future__ import annotations

import collections
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator

from tension.core.config import ScoreConfig
from tension.core.errors import StatusError
from tension.core.inputs.corpus import Story
from tension.core.llm.router import Router
from tension.core.pipelines.score.positions import Position, PositionFinder
from tension.core.run.progress import Progress
from tension.core.run.record import Failure
from tension.core.run.scheduler import Scheduler

__all__ = ["PositionFeed", "max_open"]

Queues = dict[str, collections.deque[int]]  # generation replica URL -> story indices


def max_open(cfg: ScoreConfig, n_gen: int, n_judge: int) -> int:
    """Positions open at once: enough to keep every lane full, few enough that each
    generation lane works on one story's prefix at a time."""
    return cfg.gen_concurrency + max(2, 2 * math.ceil(n_judge * cfg.judge_concurrency / (n_gen * cfg.endings)))


class PositionFeed:
    """The stories' positions, found by `finder`, fed to a run's positions. A story
    whose tokens the server refuses to count fails (into `failed`), the others go on."""

    def __init__(self, finder: PositionFinder, stories: list[Story], router: Router, progress: Progress,
                 failed: dict[int, Failure]):
        self.finder = finder
        self.stories = stories
        self.router = router
        self.progress = progress
        self.failed = failed
        self.queues = self.story_queues()

    async def run(self, sched: Scheduler, position: Callable[[Position], Awaitable[None]], limit: int) -> None:
        """Feed every position to `position`, at most `limit` open at once (per
        generation replica, each from its own queue, when there are several)."""
        if self.router.single:
            await sched.feed(self.stream(), position, limit)
            return
        await sched.map(lambda url: sched.feed(self.stream(self.take_stories(url)), position, limit),
                        list(self.queues))

    async def stream(self, stories: Iterable[int] | None = None) -> AsyncIterator[Position]:
        """Positions in corpus order (of `stories`, default all), each story's in
        ascending k (their prompts share the story's prefix, which the server's
        prefix cache serves)."""
        for si in range(len(self.stories)) if stories is None else stories:
            story = self.stories[si]
            try:
                ps = await self.finder.positions(si, story)
            except StatusError as e:
                self.failed[si] = Failure(id=story.id, stage="tokenize", error=str(e))
                continue
            self.progress.item_started(len(ps))
            for p in ps:
                yield p

    def story_queues(self) -> Queues:
        """Generation replica URL -> the stories it comes first for, in corpus order."""
        queues: Queues = {url: collections.deque() for url in self.router.urls}
        for si, story in enumerate(self.stories):
            queues[self.router.preference(story.id)[0]].append(si)
        return queues

    def take_stories(self, url: str) -> Iterator[int]:
        """The stories `url`'s feed opens: its own queue, then, while it is up,
        the last unstarted story of the longest other queue, which moves to it
        whole (pinned): with story affinity the replica with the most stories
        would otherwise finish alone while the others idle."""
        own = self.queues[url]
        while True:
            if own:
                yield own.popleft()
                continue
            victim = max(self.queues.values(), key=len)
            if not victim or not self.router.is_up(url):
                return
            si = victim.pop()
            self.router.pin(self.stories[si].id, url)
            yield si
