"""All `n` choices of a chat request, from as many HTTP requests as the server needs.

vLLM answers n = 100 in one request. Other servers honour `n` only partly: llama.cpp
refuses n above its slots with a 400 ("Field 'n': Value must be between 1 <= value
<= 4, but got 8"), hosted APIs return fewer choices than asked. Both samplers seed
choice i of a seeded request with seed + i, so the last m choices of n are one
request of n = m with seed + (n − m): asked in chunks, an answer holds exactly the
choices one request would have held, and a seeded run stays reproducible.

`pieces` asks for what is missing until all n are there:

- what the server takes is learned once per server (`ServerTraits.max_n`: its
  slots, the limit its 400 names in any wording, a 400 that a smaller n does not
  get (`NAsk`, below), or the same short count twice) and said once;
  from then on a request is sent in chunks of that many, up front;
- a chunk or follow-up that brings choices spends nothing of the retry budget
  (there can be at most n of them); only answers that bring none do, bounded by
  `RetryPolicy.attempts`;
- on a server whose constraint form is llama.cpp's, `structured_outputs` travels
  as its `grammar` / `response_format` (`Server.wire_form`); the cache key is
  the request as built, whatever the wire form;
- an answer that takes more than one request comes back piece by piece
  (`pieces` yields each `Piece` as it comes, then the whole answer): the run's
  engine keeps each in the cache at once (core/run/engine.py), and a piece the
  request's ticket shelf holds already is not asked again (core/llm/ticket.py):
  a position's 25 chunks on a 4-slot llama.cpp server are 25 answers a stop keeps
  (H1 of ../shared/reviews/external-servers-2026-12-02.md).

This is the client's private layer between its endpoints (core/llm/client.py)
and its retry loop (core/llm/sending.py): it sends through a `Sender`, and
nothing here knows the client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable

import msgspec

from tension.cache.records import Usage
from tension.core.errors import ContextLengthError, NLimitError, StatusError
from tension.core.llm.failures import RetryPolicy
from tension.core.llm.protocol import ChatRequest, ChatResponse, body_bytes, routing_headers, usage_of
from tension.core.llm.refusals import dropped_logprobs, field_refusal, refused_fields
from tension.core.llm.results import ChatResult, ShortAnswerError
from tension.core.llm.sending import Attempt, Sender
from tension.core.llm.servers import Server
from tension.core.llm.ticket import Piece, Shelf, Ticket
from tension.core.llm.traits import n_limit
from tension.core.redact import redact_secrets

__all__ = ["pieces", "chunk", "answer_text", "EMPTY_ANSWER_RETRIES", "NAsk", "N_PROBES"]

EMPTY_ANSWER_RETRIES = 2
# How many 400s to requests of n > 1 a server may answer before its n limit is found by asking
# smaller (`NAsk`): a handful per server, not per request; past it a 400 is the request's error.
N_PROBES = 8
# An answer is kept up to this many characters per token of its max_tokens (plus a
# margin): ≈ 4 for English text, and no tokenizer's tokens reach 32 characters, so
# only a server that ignores max_tokens (10 MB per verdict seen) is cut.
CHARS_PER_TOKEN = 32
CHARS_MARGIN = 1024

_ENC = msgspec.json.Encoder()
_CHAT = msgspec.json.Decoder(ChatResponse)


def chunk(request: ChatRequest, start: int, count: int) -> ChatRequest:
    """The request for choices start … start + count − 1 of `request` alone: n = count,
    seed + start (module docstring). The follow-ups and chunks of `pieces` are these,
    and so are adaptive endings' rounds (core/pipelines/score/rounds.py)."""
    seed = None if request.seed is None else request.seed + start
    return msgspec.structs.replace(request, n=count, seed=seed)


def answer_text(server: Server, text: str, max_tokens: int | None) -> str:
    """An answer's text as it is kept: without the key, and cut when it is far
    longer than `max_tokens` allows (CHARS_PER_TOKEN), said once per server."""
    text = redact_secrets(text)  # before the cut, which could leave part of a key
    limit = None if max_tokens is None else CHARS_PER_TOKEN * max_tokens + CHARS_MARGIN
    if limit is None or len(text) <= limit:
        return text
    server.overlong(len(text), max_tokens or 0, limit)
    return text[:limit]


async def pieces(sender: Sender, server: Server, request: ChatRequest, ticket: Ticket,
                 retry: RetryPolicy | None,
                 ready: Callable[[], Awaitable[None]]) -> AsyncGenerator[Piece | ChatResult, None]:
    """All `request.n` choices from `server` (module docstring): each piece of an
    answer that takes more than one request as it comes (read back from the
    ticket's shelf, or fresh), then the whole answer, last. One generator, none
    nested in it: each layer costs every request (bench/client.py).

    `ready` is awaited once, before the first request is sent (the servers' check, a
    seed probe: core/llm/router.py `Router.pieces`): an answer the shelf holds whole in
    pieces sends nothing at all, so the rerun of a stopped run needs no server for it.
    Until then the pieces are looked up by the counts earlier runs kept them under
    (`Server.given`); after it, the request is sized again by what the check told."""
    asks = NAsk(server)
    try:
        server.in_record = True
        checked = False
        headers = routing_headers(ticket.key)
        url = server.root + "/v1/chat/completions"
        t0 = time.perf_counter()
        texts: list[str] = []
        reasons: list[str | None] = []
        logprobs: list[dict[str, float] | None] = []
        usage = Usage()
        model = request.model
        empty_retries = followups = stalled = 0
        short: int | None = None  # the count of this request's last short answer
        shelf = ticket.shelf
        asked = False  # one request at least: an n the server refuses (n = 0) is its 400 to give
        while len(texts) < request.n or not asked:
            ask = await asks.size(request.n - len(texts))
            req = request if ask == request.n and not texts else chunk(request, len(texts), ask)
            if shelf is not None and (piece := _shelved(shelf, server, request, len(texts), ask,
                                                        whole=req is request)) is not None:
                yield Piece(start=len(texts), result=piece, kept=True)  # kept by an earlier run: not asked again
                texts += piece.texts
                reasons += piece.finish_reasons
                logprobs += piece.first_logprobs or [None] * len(piece.texts)
                model = piece.model or model
                asked = True
                continue
            if not checked:  # something is to be sent: the server checked first, and what it said used
                await ready()
                server.recall(request.model, request.n, request.seed is not None)  # what an earlier run learned of it
                if request.structured_outputs:  # said by the kind the check told
                    server.constrained()
                checked = True
                continue
            asked = True
            if ask < request.n - len(texts):  # cut to the server's limit: a resume looks the piece up by its count
                server.gave(request.model, ask)
            sent = time.perf_counter()
            try:
                data = await sender.call(Attempt(method="POST", url=url, body=body_bytes(_ENC, server.wire_form(req)),
                                                 decoder=_CHAT, server=server, model=req.model, headers=headers,
                                                 weight=ask, place=ticket.place, retry=retry))
            except StatusError as e:
                if fields := refused_fields(e, req):  # a field it never takes: the run's settings must change
                    asks.gave_up()
                    raise field_refusal(server, fields, e) from None
                if not asks.refused_with(ask, e):
                    asks.gave_up()
                    raise
                continue  # nothing answered, nothing spent: ask fewer
            asks.answered(ask, request.seed is not None)
            if (dropped := dropped_logprobs(server, request, data)) is not None:
                raise dropped  # its every verdict would read as empty
            if (data.choices and empty_retries < EMPTY_ANSWER_RETRIES
                    and all(not (c.message.content or "").strip() for c in data.choices)):
                # Every choice empty: a glitch far more often than a real answer
                # (100 empty endings at T = 1.2?). Ask again, a bounded number of
                # times; if it stays empty, it is the model's answer and is kept.
                usage.requests += 1
                empty_retries += 1
                sender.empty_answer()
                continue
            used = usage_of(data.usage)
            usage.add(used)
            server.answered_by(request.model, data.model)  # a proxy substituting models: kept, said once
            model = data.model or model
            got = sorted(data.choices, key=lambda c: c.index)[:ask]
            start = len(texts)
            for ch in got:
                texts.append(answer_text(server, ch.message.content or "", request.max_tokens))
                reasons.append(ch.finish_reason)
                logprobs.append(ch.first_token_logprobs() if request.logprobs else None)
            if shelf is not None and got and not (start == 0 and len(texts) >= request.n):
                # a piece of an answer that takes more than one request: handed up now, under its place
                yield Piece(start=start, result=ChatResult(
                    texts=texts[start:], finish_reasons=reasons[start:], model=model, usage=used,
                    seconds=time.perf_counter() - sent, first_logprobs=logprobs[start:] if request.logprobs else []))
            if len(texts) >= request.n:
                break
            if got and len(got) < ask:
                server.gave(request.model, len(got))  # the count its pieces are kept under (`_shelved`)
                # The same short count twice in a row is the server's limit, not a glitch.
                if short == len(got):
                    server.learned_n(len(got), "short answers", request.seed is not None)
                short = len(got)
            if not got:
                stalled += 1
                if stalled > sender.retry.attempts:
                    raise ShortAnswerError(f"{server.name}: asked for {request.n} choices, got {len(texts)} after "
                                           f"{followups} follow-up requests", usage, followups)
            followups += 1
        yield ChatResult(texts=texts, finish_reasons=reasons, model=model, usage=usage,
                         seconds=time.perf_counter() - t0, followups=followups,
                         first_logprobs=logprobs if request.logprobs else [])
    finally:
        asks.close()  # a search for the server's n limit this request led ends with it


def _shelved(shelf: Shelf, server: Server, request: ChatRequest, start: int, ask: int,
             whole: bool) -> ChatResult | None:
    """The piece of `request` the shelf holds from `start` on: of the `ask` choices asked
    now (not when that is the whole request: the engine looked it up), else of a count
    the server gives (`Server.given`: its limit, its short answers' counts, an earlier
    run's too). A piece is found by what it is, whatever count this run asks first: a
    resume asks its first request whole until it knows the server's limit, while the
    piece an earlier run kept is under the count the server returned (M1 of
    ../shared/reviews/external-servers-2026-12-07.md)."""
    for count in ([] if whole else [ask]) + [c for c in server.given(request.model) if c < ask]:
        if (piece := shelf.kept(start, count)) is not None:
            return piece
    return None


class NAsk:
    """How many choices one request asks its server for at a time, while the
    server's `n` limit is learned from its refusals (issue 35).

    A 400 to a request of n > 1 is an `n` limit when it names a number below the n
    asked (llama.cpp's "Field 'n': Value must be between 1 <= value <= 4, but got 8",
    OpenAI's "Expected a value <= 8, but got 20", any other wording): learned at
    once. A 400 that names none (not the context: that is the position's) is asked
    again with half the n, down to 1, by that one request while the server's other
    requests wait for the outcome: when a smaller n is answered, that is the limit;
    when even n = 1 is refused, the 400 was the request's own and is raised,
    nothing learned. At most N_PROBES such 400s per server; past them a 400 is the
    request's error. `close` ends what this request led, however it ended."""

    def __init__(self, server: Server):
        self.server = server
        self.refused: int | None = None  # the smallest n of this request refused without a number
        self._all_missing = True

    async def size(self, missing: int) -> int:
        """How many to ask now, of the `missing` choices (after a search another request leads)."""
        s = self.server
        while s.n_search is not None and s.n_search[0] is not self and missing > 1:
            await s.n_search[1].wait()
        limits = [x for x in (s.traits.max_n, self.refused and self.refused // 2) if x]
        self._all_missing = not limits or missing <= min(limits)  # the last chunk: it says nothing of the limit
        return min([missing, *limits])

    def refused_with(self, ask: int, e: StatusError) -> bool:
        """Whether the 400 `e` to a request of `ask` choices means: ask fewer (class docstring)."""
        s = self.server
        if e.status != 400 or ask <= 1 or isinstance(e, ContextLengthError):
            return False
        limit = n_limit(e.body, ask) if isinstance(e, NLimitError) else None
        if limit is not None:
            s.learned_n(limit, "HTTP 400")
            return True
        if s.traits.max_n is not None and ask > s.traits.max_n:
            return True  # sent before the limit was learned: ask that now
        if s.n_search is not None and s.n_search[0] is not self:
            return True  # sent before another request began the search: wait for it
        if s.n_probes >= N_PROBES:
            return False
        s.n_probes += 1
        if s.n_search is None:
            s.n_search = (self, asyncio.Event())
        self.refused = ask
        return True

    def answered(self, ask: int, seeded: bool = True) -> None:
        """A request of `ask` choices was answered: below what this request was
        refused, that is the server's limit."""
        if self.refused is not None and ask < self.refused and not self._all_missing:
            self.server.learned_n(ask, "HTTP 400 to a larger n", seeded)
            self.refused = None
            self.close()

    def gave_up(self) -> None:
        """Even n = 1 was refused (or the 400 is another): not an n limit."""
        self.refused = None
        self.close()

    def close(self) -> None:
        s = self.server
        if s.n_search is not None and s.n_search[0] is self:
            s.n_search[1].set()
            s.n_search = None
