"""A position's verdicts: one judge request per non-empty ending (sent together
as one batched completion request where the server allows, core/llm/batch.py).

Once all n verdicts of a position are known, their raw answers and summed usage
go into one "positions" record (`JudgedPosition`), keyed by everything the n
judge requests are made of; a rerun reads a position's verdicts with that one
lookup instead of n. Without it (a new position, or a cache written before that
record existed) the verdicts come from the "verdicts" records, the missing ones
from the judge, and the position's record is written (the run's engine does
both, core/run/engine.py `answers`). The verdict records stay the truth.

A judge server that refuses --judge-constraint choice (vLLM's structured_outputs:
transformers serve's 422) gets the position's requests again unconstrained, the
paper's judge, and so does every later position (core/pipelines/unconstrained.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from tension.cache.records import Usage
from tension.core.config import ScoreConfig
from tension.core.errors import RefusedError
from tension.core.llm.ticket import Ticket
from tension.core.pipelines.score.lookup import JudgeAsk, judge_ask
from tension.core.pipelines.score.requests import ScoreRequests
from tension.core.prompts import score as prompts
from tension.core.run.engine import Engine
from tension.core.run.reads import Answers

__all__ = ["Judge", "counted", "position_tickets"]


def position_tickets(story_id: str, k: int, place: int) -> tuple[Ticket, Ticket]:
    """A position's tickets, generation's and the judge's (core/llm/ticket.py): its
    generation request goes where the story's do (they share its prefix), its judge
    prompts where the position's do (they share the position's), both at the
    position's place in the feed."""
    return Ticket(key=story_id, place=place), Ticket(key=f"{story_id}\x00{k}", place=place)


def counted(constraint: str, answers: Answers) -> list[str | None]:
    """The verdict each ending counts (None: an empty ending, or no record)."""
    return [None if t is None else prompts.counted_verdict(constraint, t, lp)
            for t, lp in zip(answers.texts, answers.first_logprobs)]


class Judge:
    """The verdicts of a run's positions, through the run's engine."""

    def __init__(self, cfg: ScoreConfig, llm: Engine):
        self.cfg = cfg
        self.llm = llm

    async def verdicts(self, reqs: ScoreRequests, ticket: Ticket, sentences: Sequence[str], k: int,
                       endings: list[str], endings_key: bytes) -> tuple[JudgeAsk, list[str | None], Usage]:
        """The position's judge requests, the verdict per ending (None for an
        empty ending, not sent) and what its judge prompts used. The `ticket`'s key keeps a position's judge requests on
        one server: they share a prefix. With warm_judge one goes first and fills
        the server's prefix cache, then the rest find it there. `endings_key` is the
        key of the endings' record: the verdicts written carry their link to it."""
        router = self.llm.routers.get("judge")
        if router is not None:  # a server known to refuse the constraint is not sent it
            reqs.constraint.known(router.every_server())
        while True:
            ask = judge_ask(reqs, sentences, k, endings, endings_key)
            try:
                answers = await self.llm.answers("judge", ask.requests, ticket=ticket, group=ask.group,
                                                 warm_first=self.cfg.warm_judge, links=ask.links, link=ask.link)
            except RefusedError as e:
                if reqs.constraint.refused(e):  # asked again without it: the paper's judge
                    continue
                raise
            return ask, counted(reqs.constraint.used, answers), answers.usage
