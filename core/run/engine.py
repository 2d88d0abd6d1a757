"""The run's LLM work, typed, in one place: every answer of every pipeline.

    pipeline ─► Engine.endings / answer / answers / token_counts / context_len
                   │  key (a hash of the exact request) ─► LMDB (CacheReads)
                   │  hit:  the stored record, counted
                   │  miss: the role's Scheduler lane ─► Router (one server, or
                   │        vllm-router) ─► Client ─► Transport
                   └► record ─► Committer (group commit) ─► the answer, returned

Data moves down and answers come back as return values: nothing below holds a
scheduler, a committer or a progress bar. The engine owns, for one run, the
cache lookups, the lanes (`serving` opens them, with the routers, the commit
loop and the routers' figures), the choice of the batched judge path, and every
count (`Counts`: requests per role, usage sent and used, follow-ups; the store
counts hits and misses per database).

Databases: "endings" holds a whole request's n texts (score's endings,
generate's stories and paragraphs, the know-it-all's continuations), "verdicts"
a request's one text (the judge's verdicts, the readers' answers), "positions" a
group of answers stored as one record (a position's n verdicts), "tokens" token
counts and context lengths. The names are historical and part of the cache
format.

Every request goes down with its `Ticket` (core/llm/ticket.py): the routing key
and the work item's place the pipeline gives (`ticket=`), and for an endings
request the shelf of its pieces. An answer that takes several requests (`n` asked
in chunks: a llama.cpp server's slots, a hosted API's n limit, follow-ups to short
answers) comes back piece by piece (`Router.pieces`), each kept as it comes under
the key of its own request (core/run/reads.py `chunk_key`), and whole once all are
there (the key it always had): a stop keeps every chunk that came back, and the
rerun reads them from the shelf (core/run/reads.py `Shelf`, a read-only view of the cache) and asks
for the missing ones only (H1 of ../shared/reviews/external-servers-2026-12-02.md).
An answer that takes one request is kept whole only, as before. Nothing below the
engine calls back into it: the shelf only reads, and the pieces are return values.

`CacheReads` (core/run/reads.py) is the read-only half: what the cache holds for requests, without
sending or counting anything beyond the store's own hits and misses; `estimate`
and the view read through it, and the engine reads through the same methods.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from pathlib import Path
from typing import TypeVar

import msgspec

from tension.cache import records
from tension.cache.records import Usage
from tension.cache.store import Store
from tension.core.errors import StatusError, TensionError
from tension.core.llm.client import ChatResult
from tension.core.llm.protocol import ChatRequest
from tension.core.llm.refusals import FieldRefusedError
from tension.core.llm.router import Router
from tension.core.llm.routing import routing
from tension.core.llm.ticket import NO_TICKET, Piece, Ticket
from tension.core.run.commit import Committer, Kept
from tension.core.run.counts import Counts, ShortCounted
from tension.core.run.progress import Progress
from tension.core.run.reads import (
    Answers,
    CacheReads,
    Shelf,
    chat_key,
    chunk_key,
    context_key,
    endings_record,
    tokens_key,
    typed,
    verdict_record,
)
from tension.core.run.scheduler import Scheduler

__all__ = ["Engine"]

A = TypeVar("A", records.Endings, records.Verdict)  # a chat answer's record


class _Pieces(msgspec.Struct):
    """What the pieces of one endings answer came to, as they came (`Engine._pieces`)."""

    cached: Usage = msgspec.field(default_factory=Usage)  # what the pieces read back used
    fresh: tuple[int, int] = (0, 0)  # (pieces, texts) kept by this request: its whole record settles them
    texts: int = 0  # texts of the pieces, read back or fresh (counted as they come)


class Engine:
    """One run's LLM work (module docstring). Open `serving(...)` to send; the
    read-only `reads` work at any time."""

    def __init__(self, store: Store, progress: Progress, roles: Sequence[str] = (),
                 partial: Path | None = None, refresh: Collection[str] = (), since: float = 0.0):
        self.store = store
        # `--refresh`: the roles whose records written before `since` (the run's
        # start) are asked again and written over the old ones (a broken setup's
        # answers are not replayed once it is fixed); records this run wrote are used.
        self.refresh = frozenset(refresh)
        self.since = since
        self.partial = partial  # the run's partial file of finished output lines
        self.progress = progress
        self.reads = CacheReads(store)
        self.counts = Counts(requests=dict.fromkeys(roles, 0))
        self.routers: dict[str, Router] = {}
        self._sched: Scheduler | None = None
        self._committer: Committer | None = None
        self.kept = Kept()  # what the run's commits made durable (a stop says it)
        self._short = ShortCounted(self.counts)

    # -- the run's sending part -------------------------------------------------

    @contextlib.asynccontextmanager
    async def serving(self, *routers: Router, lanes: dict[str, int] | None = None,
                      route: bool = True) -> AsyncIterator[Scheduler]:
        """Send through `routers` for the length of the block: vllm-router started
        in front of a role with several servers (`route`), a Scheduler lane per
        role (`lanes`, default the routers' own), the commit loop (records are
        committed in groups, core/run/commit.py) and the routers' per-server
        figures as services. On leaving, the work is joined and the committer
        closed, once: every completed answer is on disk. A failed last commit is
        the block's error unless the work failed first."""
        self.routers.update({r.role: r for r in routers})
        if lanes is None:
            lanes = {}
            for r in routers:
                lanes.update({**r.lanes(), **r.tokenize_lanes()})
        several = [r for r in routers if not r.single] if route else []
        self._committer = committer = Committer(self.store, self.partial, self.kept)
        try:
            async with contextlib.AsyncExitStack() as stack:
                if route:
                    await stack.enter_async_context(routing(*routers))
                for r in several:
                    await r.scrape_metrics("start")
                if several:
                    self.progress.extra = lambda: " ".join(r.postfix() for r in several)
                async with Scheduler(lanes) as sched:
                    self._sched = sched
                    sched.service(committer.run())
                    for r in several:
                        sched.service(r.watch())
                    yield sched
                for r in several:
                    await r.scrape_metrics("end")
        except BaseException:
            with contextlib.suppress(TensionError):  # the work's error is the run's
                self._close_committer()
            raise
        self._close_committer()

    def _close_committer(self) -> None:
        committer, self._committer = self._committer, None  # nothing is kept after the block
        if committer is not None:
            committer.close()

    @property
    def sched(self) -> Scheduler:
        if self._sched is None:
            raise RuntimeError("the engine sends only inside `serving(...)`")
        return self._sched

    @property
    def lane_stats(self) -> dict[str, object]:
        return {k: msgspec.to_builtins(v) for k, v in self._sched.lane_stats.items()} if self._sched else {}

    def _keep(self, db: str, key: bytes, rec: records.Record, replace: bool = False, *, chunk: bool = False,
              settles: tuple[int, int] = (0, 0)) -> None:
        if self._committer is None:
            raise RuntimeError("the engine keeps records only inside `serving(...)`")
        self._committer.add(db, key, rec, replace, chunk=chunk, settles=settles)

    def _refreshing(self, role: str) -> float | None:
        """The time before which `role`'s records are asked again; None: not refreshed."""
        return self.since if role in self.refresh else None

    def output(self, line: bytes) -> None:
        """A finished output line (a position's result, a reader's value): appended
        to the run's partial file once the records it stands on are durable."""
        if self._committer is None:
            raise RuntimeError("output lines only inside `serving(...)`")
        self._committer.lines.append(line)

    def _fresh(self, res: ChatResult) -> None:
        self.progress.fresh(res.usage)
        self.counts.usage_all.add(res.usage)
        self.counts.spend(res.usage, res.followups)

    def _cached(self, usage: Usage, n: int = 1) -> None:
        self.progress.hit(n)
        self.counts.usage_all.add(usage)

    # -- chat answers ----------------------------------------------------------------

    async def _chat(self, server: str, ticket: Ticket, request: ChatRequest) -> ChatResult:
        router = self.routers[server]
        with self._short:
            async with self.sched.slot(router.role, place=ticket.place):
                res = await router.chat(ticket, request)
        self._fresh(res)
        return res

    async def _pieces(self, server: str, ticket: Ticket, request: ChatRequest, since: float | None
                      ) -> tuple[ChatResult, _Pieces]:
        """An endings answer, each piece of it kept as it comes (module docstring)."""
        router = self.routers[server]
        ticket = msgspec.structs.replace(ticket, shelf=Shelf(self.reads, request, since))
        got = _Pieces()
        whole: ChatResult | None = None
        with self._short:
            async with self.sched.slot(router.role, place=ticket.place), \
                    contextlib.aclosing(router.pieces(ticket, request)) as stream:
                async for item in stream:
                    if isinstance(item, Piece):
                        self._piece(request, item, got, since)
                    else:
                        whole = item
        assert whole is not None  # the last thing `pieces` gives
        self._fresh(whole)
        return whole, got

    def _piece(self, request: ChatRequest, piece: Piece, got: _Pieces, since: float | None) -> None:
        n = len(piece.result.texts)
        got.texts += n
        if piece.kept:  # read back from the shelf
            self._cached(piece.result.usage)
            got.cached.add(piece.result.usage)
            return
        self._keep("endings", chunk_key(request, piece.start, n), endings_record(piece.result, request.model),
                   replace=since is not None, chunk=True)
        got.fresh = (got.fresh[0] + 1, got.fresh[1] + n)
        self.progress.answered(n)  # the bar moves before the position is done

    async def endings(self, server: str, request: ChatRequest, *, ticket: Ticket = NO_TICKET,
                      role: str | None = None) -> records.Endings:
        """The n texts answering `request`, from the cache or from the `server`
        role's router (routed and placed by `ticket`); sent requests are counted
        under `role` (default `server`)."""
        ck = chat_key(request)
        rec, stale, since = self._cached_record("endings", ck, records.Endings, role or server)
        if rec is not None and not stale:
            return rec
        # an endings answer may take several requests: each piece is kept as it comes
        try:
            res, got = await self._pieces(server, ticket, request, since)
        except BaseException:
            self.counts.sent(role or server)  # asked, and failed or stopped: a request of the run's
            raise
        if res.usage.requests or not got.cached.requests:  # not an answer put together from kept pieces alone
            self.counts.sent(role or server)
        rec = endings_record(res, request.model)
        self.progress.answered(max(0, len(rec.texts) - got.texts))  # pieces: counted as they came
        if got.cached.requests:
            rec.usage = Usage()  # the whole answer's: its pieces read back included
            for used in (res.usage, got.cached):
                rec.usage.add(used)
        self._keep("endings", ck, rec, replace=stale, settles=got.fresh)
        return rec

    async def answer(self, server: str, request: ChatRequest, *, ticket: Ticket = NO_TICKET,
                     role: str | None = None) -> records.Verdict:
        """The one text answering `request` (a reader's answer, a verdict)."""
        ck = chat_key(request)
        rec, stale, _since = self._cached_record("verdicts", ck, records.Verdict, role or server)
        if rec is not None and not stale:
            return rec
        self.counts.sent(role or server)
        fresh = verdict_record(await self._chat(server, ticket, request), request.model)
        self.progress.answered()
        self._keep("verdicts", ck, fresh, replace=stale)
        return fresh

    def _cached_record(self, db: str, ck: bytes, kind: type[A], role: str) -> tuple[A | None, bool, float | None]:
        """The record the cache holds for `ck` (counted as a hit when it is used),
        whether it is stale (`--refresh`), and the time before which `role`'s records are."""
        rec = typed(self.store.get(db, ck), kind)
        since = self._refreshing(role)
        stale = rec is not None and since is not None and rec.created < since
        if stale:
            self.store.counts.not_taken(db)
        elif rec is not None:
            self._cached(rec.usage)
        return rec, stale, since

    async def answers(self, server: str, requests: Sequence[ChatRequest | None], *, ticket: Ticket = NO_TICKET,
                      group: bytes | None = None, warm_first: bool = False, role: str | None = None,
                      links: Sequence[bytes] = (), link: bytes = b"") -> Answers:
        """The answer to each request (a slot without one stays None), read as
        `CacheReads.answers` reads them, the missing ones sent: with `warm_first`
        one alone first (requests that share a long prefix then find it in the
        server's prefix cache), the rest together, as one batched completion
        request where the server takes it (core/llm/batch.py), else a chat request
        each. With `group`, the answers are kept as one record under it too, and
        a rerun reads them with that one lookup. `links` (one per request) and
        `link` (the group record's) say which endings the records written judged
        (`records.ending_link`)."""
        since = self._refreshing(role or server)
        out = self.reads.answers(requests, group, since)
        if out.group:
            # The record stands for its answers: count them as the cache hits they replace.
            self.store.counts.stood_for("verdicts", out.found)
            self._cached(out.usage, out.found)
            return out
        todo = [(i, r) for i, r in enumerate(requests) if r is not None and out.texts[i] is None]
        self._cached(out.usage, out.found)

        def keep(i: int, request: ChatRequest, rec: records.Verdict) -> None:
            # committed as each answer arrives: a stop loses only what is in flight
            if links:
                rec.of_ending = links[i]
            self._keep("verdicts", chat_key(request), rec, replace=since is not None)
            self.progress.answered()
            out.texts[i], out.first_logprobs[i] = rec.text, rec.first_logprobs
            out.usage.add(rec.usage)

        for part in ([todo[:1], todo[1:]] if warm_first else [todo]):
            if part:
                self.counts.sent(role or server, len(part))
                await self._send_many(server, ticket, part, keep)
        if group is not None:
            judged = out.record(next((r.model for r in requests if r is not None), ""))
            judged.of_endings = link
            self._keep("positions", group, judged, replace=since is not None)
        return out

    async def _send_many(self, server: str, ticket: Ticket, asked: list[tuple[int, ChatRequest]],
                         keep: Callable[[int, ChatRequest, records.Verdict], None]) -> None:
        """Fresh answers to `asked` (slot, request), each handed to `keep`: from one
        batched request holding a lane slot per prompt, or one chat request each."""
        router = self.routers[server]
        template = await router.batch_template([r for _, r in asked])
        if template is None:
            refused: list[StatusError | FieldRefusedError] = []

            async def one(item: tuple[int, ChatRequest]) -> None:
                i, request = item
                try:
                    keep(i, request, verdict_record(await self._chat(server, ticket, request), request.model))
                except (StatusError, FieldRefusedError) as e:  # this request refused: the caller's to handle (a
                    refused.append(e)  # position over the context is skipped, a refused constraint left out),
                    # not the whole run's

            await self.sched.map(one, asked)
            if refused:
                raise refused[0]
            return
        requests = [r for _, r in asked]
        with self._short:
            async with self.sched.slot(router.role, weight=len(requests), place=ticket.place):
                batch = await router.complete(ticket, template, requests)
        self.progress.fresh(batch.usage)
        self.counts.spend(batch.usage, batch.followups)
        for (i, request), res in zip(asked, batch.results):
            rec = verdict_record(res, request.model)
            self.counts.usage_all.add(rec.usage)
            keep(i, request, rec)

    # -- token counts ---------------------------------------------------------------

    async def token_counts(self, server: str, model: str, texts: Sequence[str], *,
                           ticket: Ticket = NO_TICKET) -> list[int]:
        """Token counts of `texts` by `model`'s tokenizer: cached, or from the
        `server` role's /tokenize (its "tokenize" lane), then kept."""
        counts = self.reads.token_counts(model, texts)
        router = self.routers[server]

        async def one(i: int) -> None:
            self.counts.sent("tokenize")
            async with self.sched.slot("tokenize", place=ticket.place):
                n = await router.tokenize(ticket, model, texts[i])
            counts[i] = n
            self._keep("tokens", tokens_key(model, texts[i]), records.TokenCount(count=n, model=model,
                                                                                  created=time.time()))

        await self.sched.map(one, [i for i, c in enumerate(counts) if c is None])
        return [c if c is not None else 0 for c in counts]

    async def context_len(self, server: str, model: str, *, ticket: Ticket = NO_TICKET,
                          ask: bool = True) -> int | None:
        """`model`'s context length: cached, else (with `ask`) what the `server`
        role's /tokenize reports, then kept; None when unknown. A server that says
        none (llama-cpp-python) is kept as such (a count of 0), so a rerun does not
        ask it again: a fully cached rerun sends nothing."""
        said = self.reads.context_said(model)
        if said is not None or not ask:
            return said or None
        router = self.routers[server]
        if router.max_model_len() is None:
            self.counts.sent("tokenize")
            async with self.sched.slot("tokenize", place=ticket.place):
                await router.tokenize(ticket, model, "")
        learned = router.max_model_len()
        self._keep("tokens", context_key(model), records.TokenCount(count=learned or 0, model=model,
                                                                     created=time.time()))
        return learned
