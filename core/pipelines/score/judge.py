"""A position's verdicts: one judge request per non-empty ending (sent together
as one batched completion request where the server allows, core/llm/batch.py).

Once all n verdicts of a position are known, their raw answers and summed usage
go into one "positions" record (`JudgedPosition`), keyed by everything the n
judge requests are made of; a rerun reads a position's verdicts with that one
lookup instead of n. Without it (a new position, or a cache written before that
record existed) the verdicts come from the "verdicts" records through the run's
cached call, the missing ones from the judge, and the position's record is
written. The verdict records stay the truth.
"""

from __future__ import annotations

import time

from tension.cache import records
from tension.cache.records import Usage
from tension.core.config import ScoreConfig
from tension.core.llm.router import Router
from tension.core.pipelines.score.requests import ScoreRequests
from tension.core.prompts import score as prompts
from tension.core.run.lifecycle import Run

__all__ = ["Judge"]


class Judge:
    """The verdicts of a run's positions, through `router` and the run's cached call."""

    def __init__(self, cfg: ScoreConfig, run: Run, router: Router):
        self.cfg = cfg
        self.run = run
        self.router = router

    async def verdicts(self, reqs: ScoreRequests, affinity: str, head: str, tail: str,
                       endings: list[str]) -> list[str | None]:
        """The verdict per ending (see `answer`); None for an empty ending (not sent).
        `affinity` keeps a position's judge requests on one replica: they share a prefix."""
        run = self.run
        pkey = reqs.position_key(head, tail, endings)
        judged = run.store.get("positions", pkey)
        if judged is not None:
            # The record stands for its verdicts: count them as the cache hits they replace.
            run.store.counts.hits["verdicts"] += judged.judged
            run.progress.hit(judged.judged)
            run.usage_all.add(judged.usage)
            logprobs = judged.first_logprobs or [None] * len(judged.texts)
            return [None if t is None else self.answer(t, lp) for t, lp in zip(judged.texts, logprobs)]
        texts, logprobs, usage = await self.ask(reqs, affinity, head, tail, endings)
        run.committer.add("positions", pkey, records.JudgedPosition(
            texts=texts, first_logprobs=logprobs if any(lp is not None for lp in logprobs) else [],
            usage=usage, judged=sum(t is not None for t in texts), created=time.time()))
        return [None if t is None else self.answer(t, lp) for t, lp in zip(texts, logprobs)]

    async def ask(self, reqs: ScoreRequests, affinity: str, head: str, tail: str, endings: list[str]):
        """The raw judge answers per ending (None for an empty ending), their first-token
        logprobs, and the usage summed over them: from the verdict records, the
        missing ones from the judge."""
        run = self.run
        asked = reqs.verdicts(head, tail, endings)
        # All judge prompts of a position share the continuation: with warm_judge one
        # goes first and fills the server's prefix cache, then the rest find it there.
        recs = await run.chat.many("verdicts", [r for _, r in asked],
                                   lambda rs, done: self.router.chat_many(run.sched, affinity, rs, done), role="judge",
                                   warm_first=self.cfg.warm_judge)
        texts: list[str | None] = [None] * len(endings)
        logprobs: list[dict[str, float] | None] = [None] * len(endings)
        usage = Usage()
        for (i, _), rec in zip(asked, recs):
            texts[i], logprobs[i] = rec.text, rec.first_logprobs
            usage.add(rec.usage)
        return texts, logprobs, usage

    def answer(self, text: str, first_logprobs: dict[str, float] | None) -> str:
        """The verdict text a position counts: the raw answer, or with a logprobs
        judge the letter its first-token probabilities favour."""
        if self.cfg.judge_constraint == "logprobs":
            return prompts.verdict_from_logprobs(first_logprobs)
        return text
