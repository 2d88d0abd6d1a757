"""The one cached LLM call: every chat answer of every pipeline comes through here.

    request ─► key (hash of the exact request) ─► LMDB lookup
       hit:  the stored record
       miss: `send(request)` (a router lane) ─► record ─► committer (group commit)

so keys, records and counts are the same for every pipeline. Two databases hold
the answers: "endings" a whole request's n texts (score's endings, generate's
stories and paragraphs, the know-it-all's continuations), "verdicts" a request's
one text (the judge's verdicts, the readers' answers); the names are historical
and part of the cache format.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

from tension.cache import records
from tension.cache.keys import request_key
from tension.cache.store import Store
from tension.core.llm.client import ChatResult
from tension.core.llm.protocol import ChatRequest

__all__ = ["Send", "SendMany", "CachedChat", "endings_record", "verdict_record"]

Send = Callable[[ChatRequest], Awaitable[ChatResult]]
# sends a list of requests and calls `done(j, result)` for the j-th as its answer arrives
SendMany = Callable[[list[ChatRequest], Callable[[int, ChatResult], None]], Awaitable[None]]
Answer = records.Endings | records.Verdict


def endings_record(res: ChatResult) -> records.Endings:
    return records.Endings(texts=res.texts, finish_reasons=res.finish_reasons, model=res.model,
                           usage=res.usage, created=time.time(), seconds=res.seconds)


def verdict_record(res: ChatResult) -> records.Verdict:
    return records.Verdict(text=res.texts[0], finish_reason=res.finish_reasons[0], model=res.model,
                           usage=res.usage, created=time.time(), seconds=res.seconds,
                           first_logprobs=res.first_logprobs[0] if res.first_logprobs else None)


_RECORD = {"endings": endings_record, "verdicts": verdict_record}


class CachedChat:
    """Answers from the cache by the hash of the exact request, else from `send`,
    then handed to the committer. Counts requests sent per role (`requests`), cache
    hits on the progress bar and the usage of every answer, cached or not."""

    def __init__(self, store: Store, committer, progress, requests: dict[str, int], usage_all: records.Usage):
        self.store = store
        self.committer = committer
        self.progress = progress
        self.requests = requests
        self.usage_all = usage_all

    async def one(self, db: str, req: ChatRequest, send: Send, *, role: str) -> Answer:
        """The record answering `req`: cached, or sent and committed."""
        key = request_key("chat", req)
        rec = self.store.get(db, key)
        if rec is None:
            self.requests[role] = self.requests.get(role, 0) + 1
            return self._keep(db, key, await send(req))
        self.progress.hit()
        self.usage_all.add(rec.usage)
        return rec

    async def many(self, db: str, reqs: Sequence[ChatRequest], send_many: SendMany, *, role: str,
                   warm_first: bool = False) -> list[Answer]:
        """The records answering `reqs`, in order: the cached ones read in one
        transaction, the others sent together through `send_many` (a router's
        `chat_many`: one batched request, or one request each). With `warm_first`,
        one request goes alone before the rest: requests that share a long prefix
        (a position's judge prompts) then find it in the server's prefix cache."""
        keys = [request_key("chat", r) for r in reqs]
        out: list[Answer | None] = list(self.store.get_many(db, keys))
        todo = [i for i, rec in enumerate(out) if rec is None]
        self.progress.hit(len(reqs) - len(todo))
        for rec in out:
            if rec is not None:
                self.usage_all.add(rec.usage)
        for part in ([todo[:1], todo[1:]] if warm_first else [todo]):
            if not part:
                continue

            def done(j: int, res: ChatResult, part=part) -> None:  # committed as each answer arrives
                out[part[j]] = self._keep(db, keys[part[j]], res)

            self.requests[role] = self.requests.get(role, 0) + len(part)
            await send_many([reqs[i] for i in part], done)
        return out

    def _keep(self, db: str, key: bytes, res: ChatResult) -> Answer:
        """The record of a fresh answer, handed to the committer and counted."""
        rec = _RECORD[db](res)
        self.committer.add(db, key, rec)
        self.progress.fresh(res.usage)
        self.usage_all.add(rec.usage)
        return rec
