"""What the cache holds for a run's requests, read only: the keys of chat,
tokenize and context records, the records built from answers, and `CacheReads`,
the one walk of a group of answers (its group record, else a record per request)
that the engine (core/run/engine.py), `estimate` and the view all read through.
`CacheReplay` answers a pipeline's asking methods from the cache alone."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol, TypeVar

import msgspec

from tension.cache import records
from tension.cache.keys import request_key
from tension.cache.records import Usage
from tension.cache.store import Store
from tension.core.errors import TensionError
from tension.core.llm.choices import chunk
from tension.core.llm.client import ChatResult
from tension.core.llm.protocol import ChatRequest
from tension.core.llm.ticket import NO_TICKET, Ticket

__all__ = ["Answers", "CacheReads", "Shelf", "Asks", "NotCached", "CacheReplay", "chat_key", "chunk_key", "tokens_key",
           "context_key", "typed", "endings_record", "verdict_record"]

R = TypeVar("R", bound=records.Record)
A = TypeVar("A", records.Endings, records.Verdict)  # a chat answer's record


def chat_key(request: ChatRequest) -> bytes:
    """The cache key of a chat request's answer."""
    return request_key("chat", request)


def chunk_key(request: ChatRequest, start: int, count: int) -> bytes:
    """The cache key of choices start … start + count − 1 of `request`, asked as one
    request (core/llm/choices.py `chunk`). Seeded, it is that request's own key (a
    seeded follow-up's, an adaptive round's: the same request, the same answer).
    Unseeded, every chunk of a request is the same request (n = count, no seed), so
    the chunk's place in the whole request is in its key: each is its own draw."""
    if request.seed is not None:
        return chat_key(chunk(request, start, count))
    return request_key("chat-chunk", {"of": chat_key(request), "start": start, "count": count})


def tokens_key(model: str, text: str) -> bytes:
    return request_key("tokenize", {"model": model, "prompt": text, "add_special_tokens": False})


def context_key(model: str) -> bytes:
    return request_key("context", {"model": model})


def typed(rec: records.Record | None, kind: type[R]) -> R | None:
    """A record of the kind its database holds (a stranger is a miss)."""
    return rec if isinstance(rec, kind) else None


def endings_record(res: ChatResult, asked: str) -> records.Endings:
    """The record of `res`, the answer to a request that asked for model `asked`."""
    return records.Endings(texts=res.texts, finish_reasons=res.finish_reasons, model=res.model,
                           usage=res.usage, created=time.time(), seconds=res.seconds, asked=asked)


def verdict_record(res: ChatResult, asked: str) -> records.Verdict:
    """The record of `res`, the answer to a request that asked for model `asked`."""
    return records.Verdict(text=res.texts[0], finish_reason=res.finish_reasons[0], model=res.model,
                           usage=res.usage, created=time.time(), seconds=res.seconds,
                           first_logprobs=res.first_logprobs[0] if res.first_logprobs else None, asked=asked)


class Answers(msgspec.Struct, kw_only=True):
    """The answers to a group of requests, one slot per request: the raw text and
    first-token logprobs, None where the slot holds no request (or, read from the
    cache only, no record). `group` says they came from the group's one record."""

    texts: list[str | None]
    first_logprobs: list[dict[str, float] | None]
    usage: Usage
    group: bool = False

    @property
    def found(self) -> int:
        return sum(t is not None for t in self.texts)

    def record(self, asked: str = "") -> records.JudgedPosition:
        """The group record of these answers, to requests that asked for model `asked`."""
        logprobs = self.first_logprobs if any(lp is not None for lp in self.first_logprobs) else []
        return records.JudgedPosition(texts=self.texts, first_logprobs=logprobs, usage=self.usage,
                                      judged=self.found, created=time.time(), asked=asked)


class CacheReads:
    """What the cache holds, read only: the one walk of a group of answers (its
    group record, else a record per request), used by the engine, `estimate` and
    the view alike."""

    def __init__(self, store: Store):
        self.store = store

    def endings(self, request: ChatRequest) -> records.Endings | None:
        return self.endings_at(chat_key(request))

    def endings_at(self, key: bytes) -> records.Endings | None:
        return typed(self.store.get("endings", key), records.Endings)

    def group_at(self, key: bytes) -> records.JudgedPosition | None:
        return typed(self.store.get("positions", key), records.JudgedPosition)

    def group_answers(self, key: bytes, since: float | None = None) -> Answers | None:
        """The answers a group record under `key` holds, if there is one (written
        at `since` or later, when given)."""
        judged = self.group_at(key)
        if judged is not None and since is not None and judged.created < since:
            self.store.counts.not_taken("positions")
            return None
        if judged is None:
            return None
        logprobs = judged.first_logprobs or [None] * len(judged.texts)
        return Answers(texts=list(judged.texts), first_logprobs=list(logprobs), usage=judged.usage, group=True)

    def verdicts(self, requests: Sequence[ChatRequest]) -> list[records.Verdict | None]:
        return [typed(r, records.Verdict) for r in self.store.get_many("verdicts", [chat_key(q) for q in requests])]

    def answers(self, requests: Sequence[ChatRequest | None], group: bytes | None,
                since: float | None = None) -> Answers:
        """The answers the cache holds for `requests` (None: a slot without a
        request): from the group's record under `group`, else from each request's
        record (None where missing). With `since`, records written before it are
        not taken (`--refresh`: they are asked again)."""
        if group is not None and (found := self.group_answers(group, since)) is not None:
            return found
        asked = [i for i, r in enumerate(requests) if r is not None]
        recs = self.verdicts([r for r in requests if r is not None])
        out = Answers(texts=[None] * len(requests), first_logprobs=[None] * len(requests), usage=Usage())
        stale = [rec for rec in recs if rec is not None and since is not None and rec.created < since]
        if stale:
            self.store.counts.not_taken("verdicts", len(stale))
        for i, rec in zip(asked, recs):
            if rec is not None and (since is None or rec.created >= since):
                out.texts[i], out.first_logprobs[i] = rec.text, rec.first_logprobs
                out.usage.add(rec.usage)
        return out

    def token_counts(self, model: str, texts: Sequence[str]) -> list[int | None]:
        return [r.count if isinstance(r, records.TokenCount) else None
                for r in self.store.get_many("tokens", [tokens_key(model, t) for t in texts])]

    def context_said(self, model: str) -> int | None:
        """`model`'s context length as the cache keeps it: what a server said when a run
        asked, 0 where it said none (llama-cpp-python's token counter); None: never asked."""
        rec = typed(self.store.get("tokens", context_key(model)), records.TokenCount)
        return rec.count if rec is not None else None


class Shelf:
    """The pieces of one endings request the cache holds (core/llm/ticket.py
    `Shelf`, what the engine puts on the request's ticket): a read of the store,
    nothing else; `--refresh`: pieces kept before `since` are asked again."""

    def __init__(self, reads: CacheReads, request: ChatRequest, since: float | None):
        self.reads = reads
        self.request = request
        self.since = since

    def kept(self, start: int, count: int) -> ChatResult | None:
        rec = self.reads.endings_at(chunk_key(self.request, start, count))
        if rec is None or len(rec.texts) != count or (self.since is not None and rec.created < self.since):
            return None
        return ChatResult(texts=rec.texts, finish_reasons=rec.finish_reasons, model=rec.model, usage=rec.usage,
                          seconds=rec.seconds)


class Asks(Protocol):
    """What a pipeline asks of an engine, whichever answers it (`Engine` sends;
    `CacheReplay` reads the cache only)."""

    async def endings(self, server: str, request: ChatRequest, *, ticket: Ticket = NO_TICKET,
                      role: str | None = None) -> records.Endings: ...

    async def answer(self, server: str, request: ChatRequest, *, ticket: Ticket = NO_TICKET,
                     role: str | None = None) -> records.Verdict: ...


class NotCached(TensionError):
    """A record a read-only replay looked for is not in the cache."""


class CacheReplay:
    """The engine's asking methods answered from the cache alone, never sending
    (the view replays a run's requests with it); a missing record raises NotCached."""

    def __init__(self, store: Store):
        self.reads = CacheReads(store)

    async def endings(self, server: str, request: ChatRequest, *, ticket: Ticket = NO_TICKET,
                      role: str | None = None) -> records.Endings:
        rec = self.reads.endings(request)
        if rec is None:
            raise NotCached(f"a {role or server} request is not in the cache")
        return rec

    async def answer(self, server: str, request: ChatRequest, *, ticket: Ticket = NO_TICKET,
                     role: str | None = None) -> records.Verdict:
        (rec,) = self.reads.verdicts([request])
        if rec is None:
            raise NotCached(f"a {role or server} request is not in the cache")
        return rec
