"""All `n` choices of a chat request, from as many HTTP requests as the server needs.

vLLM answers n = 100 in one request. Other servers honour `n` only partly: llama.cpp
refuses n above its slots with a 400 ("Field 'n': Value must be between 1 <= value
<= 4, but got 8"), hosted APIs return fewer choices than asked. Both samplers seed
choice i of a seeded request with seed + i, so the last m choices of n are one
request of n = m with seed + (n − m): asked in chunks, an answer holds exactly the
choices one request would have held, and a seeded run stays reproducible.

`gather` asks for what is missing until all n are there:

- what the server takes is learned once per server (`ServerTraits.max_n`: its
  slots, the limit its 400 names in any wording, a 400 that a smaller n does not
  get (core/llm/servers.py `NAsk`), or the same short count twice) and said once;
  from then on a request is sent in chunks of that many, up front;
- a chunk or follow-up that brings choices spends nothing of the retry budget
  (there can be at most n of them); only answers that bring none do, bounded by
  `RetryPolicy.attempts`;
- on a server whose constraint form is llama.cpp's, `structured_outputs` travels
  as its `grammar` / `response_format` (`Server.wire_form`); the cache key is
  the request as built, whatever the wire form;
- an answer that takes more than one request is kept piece by piece where the
  caller says how (`PARTS`: the run's engine keeps each chunk in the cache as it
  comes, core/run/engine.py), and a piece already kept is not asked again: a
  position's 25 chunks on a 4-slot llama.cpp server are 25 answers a stop keeps
  (H1 of ../shared/reviews/external-servers-2026-12-02.md).
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

import msgspec

from tension.cache.records import Usage
from tension.core.errors import StatusError
from tension.core.llm.failures import RetryPolicy
from tension.core.llm.protocol import ChatRequest, routing_headers, usage_of
from tension.core.llm.results import ChatResult, ShortAnswerError
from tension.core.llm.servers import NAsk

if TYPE_CHECKING:
    from tension.core.llm.client import Client

__all__ = ["gather", "chunk", "EMPTY_ANSWER_RETRIES", "Parts", "PARTS"]

EMPTY_ANSWER_RETRIES = 2


class Parts(Protocol):
    """Where the pieces of one answer are kept as they come: choices start …
    start + count − 1, asked as one request (`chunk`)."""

    def kept(self, start: int, count: int) -> ChatResult | None:
        """The piece already kept (None: ask for it)."""
        ...

    def keep(self, start: int, piece: ChatResult) -> None: ...


# The pieces of the request `gather` is asked for now, set around the call by its
# caller (the engine, for an endings request); None: kept only whole, by the caller.
PARTS: ContextVar[Parts | None] = ContextVar("tension_parts", default=None)


def chunk(request: ChatRequest, start: int, count: int) -> ChatRequest:
    """The request for choices start … start + count − 1 of `request` alone: n = count,
    seed + start (module docstring). gather's follow-ups and chunks are these, and so
    are adaptive endings' rounds (core/pipelines/score/rounds.py)."""
    seed = None if request.seed is None else request.seed + start
    return msgspec.structs.replace(request, n=count, seed=seed)


async def gather(client: Client, url: str, request: ChatRequest, retry: RetryPolicy | None, key: str) -> ChatResult:
    """All `request.n` choices from the server at the base URL `url` (module docstring)."""
    asks = NAsk(client.server(url))
    try:
        return await _gather(client, url, request, retry, key, asks)
    finally:
        asks.close()  # a search for the server's n limit this request led ends with it


async def _gather(client: Client, url: str, request: ChatRequest, retry: RetryPolicy | None, key: str,
                  asks: NAsk) -> ChatResult:
    server = asks.server
    server.in_record = True
    headers = routing_headers(key)
    t0 = time.perf_counter()
    texts: list[str] = []
    reasons: list[str | None] = []
    logprobs: list[dict[str, float] | None] = []
    usage = Usage()
    model = request.model
    empty_retries = followups = stalled = 0
    short: int | None = None  # the count of this request's last short answer
    parts = PARTS.get()
    if request.structured_outputs:
        server.constrained()
    asked = False  # one request at least: an n the server refuses (n = 0) is its 400 to give
    while len(texts) < request.n or not asked:
        asked = True
        ask = await asks.size(request.n - len(texts))
        req = request if ask == request.n and not texts else chunk(request, len(texts), ask)
        if parts is not None and req is not request and (piece := parts.kept(len(texts), ask)) is not None:
            texts += piece.texts  # kept by an earlier run: not asked again
            reasons += piece.finish_reasons
            logprobs += piece.first_logprobs or [None] * len(piece.texts)
            model = piece.model or model
            continue
        sent = time.perf_counter()
        try:
            data = await client.send_chat(url, req, retry, req.model, headers, weight=ask)
        except StatusError as e:
            if not asks.refused_with(ask, e):
                asks.gave_up()
                raise
            continue  # nothing answered, nothing spent: ask fewer
        asks.answered(ask, request.seed is not None)
        if (data.choices and empty_retries < EMPTY_ANSWER_RETRIES
                and all(not (c.message.content or "").strip() for c in data.choices)):
            # Every choice empty: a glitch far more often than a real answer
            # (100 empty endings at T = 1.2?). Ask again, a bounded number of
            # times; if it stays empty, it is the model's answer and is kept.
            usage.requests += 1
            empty_retries += 1
            client.retries += 1
            continue
        used = usage_of(data.usage)
        usage.add(used)
        server.answered_by(request.model, data.model)  # a proxy substituting models: kept, said once
        model = data.model or model
        got = sorted(data.choices, key=lambda c: c.index)[:ask]
        start = len(texts)
        for ch in got:
            texts.append(client.answer_text(url, ch.message.content or "", request.max_tokens))
            reasons.append(ch.finish_reason)
            logprobs.append(ch.first_token_logprobs() if request.logprobs else None)
        if parts is not None and got and not (start == 0 and len(texts) >= request.n):
            # a piece of an answer that takes more than one request: kept now, under its place
            parts.keep(start, ChatResult(texts=texts[start:], finish_reasons=reasons[start:], model=model,
                                         usage=used, seconds=time.perf_counter() - sent,
                                         first_logprobs=logprobs[start:] if request.logprobs else []))
        if len(texts) >= request.n:
            break
        if got and len(got) < ask:
            # The same short count twice in a row is the server's limit, not a glitch.
            if short == len(got):
                server.learned_n(len(got), "short answers", request.seed is not None)
            short = len(got)
        if not got:
            stalled += 1
            if stalled > client.retry.attempts:
                raise ShortAnswerError(f"{url}: asked for {request.n} choices, got {len(texts)} after "
                                       f"{followups} follow-up requests", usage, followups)
        followups += 1
    return ChatResult(texts=texts, finish_reasons=reasons, model=model, usage=usage,
                      seconds=time.perf_counter() - t0, followups=followups,
                      first_logprobs=logprobs if request.logprobs else [])
