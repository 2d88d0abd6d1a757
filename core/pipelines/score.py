"""`tension-run score`: the 100-Endings pipeline (METRICS.md 1.1–1.4).

    corpus ─► stories ─► sentences ─► positions (k, pct, anchor)
       ─► generation request (n endings)   ◄─► LMDB endings
       ─► judge requests (one per ending)  ◄─► LMDB verdicts
       ─► no-rate(k) ─► curve ─► kernels ─► story and group statistics

Every LLM answer is looked up in the cache before it is requested and committed
to it as soon as it is complete, so a rerun costs nothing, a changed judge only
costs verdicts, and an interrupted run continues where it stopped. Position
results stream to ``positions.partial.jsonl`` as their records are committed; the
final ``positions.jsonl`` is written in corpus order when the run completes, so
it is the same bytes however the run was interrupted and resumed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import math
import os
import platform
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from tension.cache import records
from tension.cache.keys import request_key
from tension.cache.records import Usage
from tension.cache.store import Store, default_path

from tension.core.prompts import score as prompts
from tension.core.llm.client import Client, RetryPolicy, Timeouts
from tension.core.llm.protocol import ChatRequest
from tension.core.config import ScoreConfig
from tension.core.inputs.corpus import Corpus, Skipped, Story, read_corpus
from tension.core.errors import ConfigError, ServerError, StatusError, TensionError
from tension.core.inputs.jsonl import atomic_write
from tension.core.reports.metrics import Curve, compute, groups_csv, stories_csv
from tension.core.run.progress import Progress
from tension.core.llm.replicas import Router, in_shard
from tension.core.run.record import Failure
from tension.core.run.scheduler import Scheduler
from tension.core.inputs.segment import candidates, continuation_text, prefix_text, split_sentences, story_text

__all__ = ["Position", "PositionResult", "Failure", "RunSummary", "score", "score_async"]

COMMIT_INTERVAL = 0.05  # seconds: group commit of completed records (DESIGN.md)
COMMIT_BATCH = 512  # records: commit sooner when this many are waiting
# Tokens a chat template adds around the messages (role markers, BOS/EOS), on top
# of the system prompt and instruction, when checking that a prompt fits the context.
CHAT_TEMPLATE_SLACK = 32


class Position(msgspec.Struct, frozen=True, kw_only=True):
    story: int  # index in the corpus's kept stories
    k: int
    pct: float
    tokens: int = 0  # tokens of the story prefix s[0:k] (what pct is made of; `estimate` sums them)
    story_tokens: int = 0  # tokens of the whole story


class PositionResult(msgspec.Struct, kw_only=True):
    id: str
    group: str
    k: int
    pct: float
    n_endings: int
    n_match: int
    n_empty: int
    n_malformed: int
    no_rate: float


class RunSummary(msgspec.Struct, kw_only=True):
    status: str  # "complete", "failed", "interrupted"
    out: str
    stories: int
    positions: int
    failures: list[Failure]
    input_errors: list[str]
    skipped: int
    skipped_stories: list[Skipped]  # left out by the word filter, with the reason
    too_long: dict[str, int]  # story id -> positions skipped because the prompt would not fit
    no_positions: dict[str, str]  # story id -> why it has no position (its statistics are NaN)
    requests: dict[str, int]
    cache_hits: dict[str, int]
    error: str | None = None
    # role -> per-replica figures (core/replicas.py ReplicaStats), and what happened
    # to replicas during the run ("… taken out: why", "… re-admitted")
    replicas: dict[str, list[dict[str, Any]]] = {}
    replica_events: list[str] = []


_line_encoder = msgspec.json.Encoder()


class _Committer:
    """Group commit: records and finished position lines wait here ≤ 50 ms, then
    go to LMDB in one transaction, after which the lines are appended to the
    partial file. The commit (which waits for the disk) runs on one writer
    thread, so the event loop keeps sending requests meanwhile; batches commit in
    order, and a line is never written before its records are durable."""

    def __init__(self, store: Store, partial: Path | None):
        self.store = store
        self.records: list[tuple[str, bytes, records.Record]] = []
        self.lines: list[bytes] = []
        # No partial file: records only (`estimate` keeps the token counts it asked for).
        self._partial = partial.open("ab") if partial is not None else None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tension-commit")
        self._pending: list[Future] = []

    def add(self, db: str, key: bytes, rec: records.Record) -> None:
        self.records.append((db, key, rec))
        if len(self.records) >= COMMIT_BATCH:
            self.flush()

    def flush(self) -> None:
        """Hand what is waiting to the writer thread (returns at once)."""
        if not self.records and not self.lines:
            return
        batch, self.records = self.records, []
        lines, self.lines = self.lines, []
        self._pending.append(self._writer.submit(self._commit, batch, lines))
        self.check()

    def _commit(self, batch, lines) -> None:
        if batch:
            self.store.put_many(batch)
        if lines and self._partial is not None:
            self._partial.write(b"".join(lines))
            self._partial.flush()

    def check(self) -> None:
        """Raise the error of a failed commit (e.g. a full cache) in the caller."""
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        for f in done:
            f.result()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(COMMIT_INTERVAL)
            self.flush()
            self.check()

    def close(self) -> None:
        """Commit everything still waiting and wait for the writer: after this,
        every completed answer is on disk."""
        try:
            self.flush()
        finally:
            self._writer.shutdown(wait=True)
            if self._partial is not None:
                self._partial.close()
        for f in self._pending:
            f.result()


def make_tokenizer(cfg: ScoreConfig) -> Callable[[str], int] | None:
    """A local token counter for --tokenizer words|PATH; None means the server's
    /tokenize. Built before a run starts, so a bad path is a usage error."""
    t = cfg.tokenizer
    if t == "server":
        return None
    if t == "words":
        return lambda text: len(text.split())
    if not os.path.isfile(t):
        raise ConfigError(f"--tokenizer: {t} is not a file (expected 'server', 'words' or a tokenizer.json)")
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise ConfigError("--tokenizer PATH needs the `tokenizers` package: "
                          "pip install 'tension-run[tokenizer]'") from e
    try:
        tok = Tokenizer.from_file(t)
    except Exception as e:  # the library raises its own Exception types
        raise ConfigError(f"--tokenizer: cannot load {t}: {e}") from e
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


class _Run:
    """State of one score run; methods are the pipeline's stages."""

    def __init__(self, cfg: ScoreConfig, corpus: Corpus, store: Store, client: Client,
                 out: Path, progress: Progress):
        self.cfg = cfg
        self.corpus = corpus
        self.store = store
        self.client = client
        self.out = out
        self.progress = progress
        self.replica_events: list[str] = []
        self.gen_router = Router("generation", cfg.generation_replicas(), client, limit=cfg.gen_concurrency,
                                 tokenize_limit=cfg.tokenize_concurrency, total_seconds=cfg.retry_seconds,
                                 on_change=self.replica_events.append)
        self.judge_router = Router("judge", cfg.judge_replicas(), client, limit=cfg.judge_concurrency,
                                   total_seconds=cfg.retry_seconds, on_change=self.replica_events.append)
        self.gen_url = self.gen_router.urls[0]
        self.judge_url = self.judge_router.urls[0]
        self.gen_model = cfg.model or ""
        self.judge_model = cfg.judge_model or ""
        self.template_kwargs = {"enable_thinking": False} if cfg.reasoning_off else None
        self.sentences: dict[int, list[str]] = {}
        self.results: dict[tuple[int, int], PositionResult] = {}
        self.texts: dict[tuple[int, int], dict[str, Any]] = {}
        self.failed: dict[int, Failure] = {}
        self.too_long: dict[str, int] = {}  # story id -> positions skipped: prompt over the context
        self.no_positions: dict[str, str] = {}  # story id -> why no position was kept
        self.context_len: int | None = cfg.max_model_len
        self.prompt_overhead: int | None = None
        self.requests = {"generation": 0, "judge": 0, "tokenize": 0, "models": 0}
        self.usage_all = Usage()  # what every answer used, cached or not
        self.tokenizer: Callable[[str], int] | None = None
        self.sched: Scheduler | None = None
        self.committer: _Committer | None = None
        self.groups = {}

    # -- setup ----------------------------------------------------------------

    async def resolve_models(self) -> None:
        """Model ids for the cache keys. Given ids are used as they are (so a
        cached rerun sends nothing); otherwise the server's first model. Several
        replicas of a role are each asked, and must all serve the model."""
        gen, judge = self.gen_router, self.judge_router
        same = judge.urls == gen.urls
        if not gen.single:
            self.requests["models"] += len(gen.urls)
            self.gen_model = await gen.check_models(self.cfg.model, "--model")
        elif not self.gen_model:
            self.gen_model = await self._first_model(self.gen_url, "--model")
        if not judge.single:
            self.requests["models"] += len(judge.urls)
            self.judge_model = await judge.check_models(
                self.cfg.judge_model or (self.gen_model if same else None), "--judge-model")
        elif not self.judge_model:
            self.judge_model = self.gen_model if same else await self._first_model(self.judge_url, "--judge-model")

    async def _first_model(self, url: str, flag: str) -> str:
        self.requests["models"] += 1
        ids = await self.client.models(url)
        if not ids:
            raise ServerError(f"{url}/v1/models lists no model; pass {flag}")
        return ids[0]

    def setup_tokenizer(self) -> None:
        self.tokenizer = make_tokenizer(self.cfg)


    # -- stage 1: positions ---------------------------------------------------

    async def positions(self, si: int, story: Story) -> list[Position]:
        sents = split_sentences(story.text)
        self.sentences[si] = sents
        cands = candidates(sents, self.cfg.min_anchor_words)
        if not cands:
            self.no_positions[story.id] = (
                f"{len(sents)} sentence(s): no sentence boundary found" if len(sents) < 2 else
                f"no sentence of >= {self.cfg.min_anchor_words} words to anchor a position")
            return []
        texts = [story_text(sents)] + [prefix_text(sents, c.k) for c in cands]
        counts = await self.token_counts(texts, story.id)
        limit = await self.prompt_limit(story.id)
        total = counts[0]
        out = []
        for c, n in zip(cands, counts[1:]):
            pct = n / total if total else 0.0
            if not self.cfg.pct_min <= pct <= self.cfg.pct_max:
                continue
            if limit is not None and n > limit:
                # Sending it would only earn a 400: skip it, and say so.
                self.too_long[story.id] = self.too_long.get(story.id, 0) + 1
                continue
            out.append(Position(story=si, k=c.k, pct=pct, tokens=n, story_tokens=total))
        if not out and story.id not in self.too_long:
            self.no_positions[story.id] = f"no position with pct in [{self.cfg.pct_min}, {self.cfg.pct_max}]"
        return out

    async def prompt_limit(self, affinity: str) -> int | None:
        """Longest story prefix (in tokens) whose generation prompt, with room for
        the endings, fits the generation model's context; None when unknown."""
        key = request_key("context", {"model": self.gen_model})
        if self.context_len is None:
            rec = self.store.get("tokens", key)
            if rec is not None:
                self.context_len = rec.count
            elif self.tokenizer is None:
                # Not in the cache (an older cache, or one filled with --max-model-len):
                # ask the server, whose /tokenize reports it, rather than guess.
                if self.gen_router.max_model_len() is None:
                    self.requests["tokenize"] += 1
                    await self.gen_router.tokenize(self.sched, affinity, self.gen_model, "")
                learned = self.gen_router.max_model_len()
                if learned is not None:
                    self.context_len = learned
                    self.committer.add("tokens", key, records.TokenCount(count=learned, model=self.gen_model,
                                                                         created=time.time()))
        if self.context_len is None:
            return None
        if self.prompt_overhead is None:
            template = prompts.ENDING_SYSTEM + "\n" + prompts.ENDING_USER.format(prefix="")
            self.prompt_overhead = (await self.token_counts([template], affinity))[0] + CHAT_TEMPLATE_SLACK
        return self.context_len - self.prompt_overhead - self.cfg.max_tokens

    async def token_counts(self, texts: list[str], affinity: str) -> list[int]:
        """Token counts, from the cache or from `affinity`'s generation replica."""
        if self.tokenizer is not None:
            return [self.tokenizer(t) for t in texts]
        keys = [request_key("tokenize", {"model": self.gen_model, "prompt": t, "add_special_tokens": False})
                for t in texts]
        cached = self.store.get_many("tokens", keys)
        counts = [r.count if r is not None else -1 for r in cached]
        missing = [i for i, c in enumerate(counts) if c < 0]

        async def one(i: int) -> None:
            self.requests["tokenize"] += 1
            n = await self.gen_router.tokenize(self.sched, affinity, self.gen_model, texts[i])
            counts[i] = n
            self.committer.add("tokens", keys[i], records.TokenCount(count=n, model=self.gen_model,
                                                                      created=time.time()))

        await self.sched.map(one, missing)
        return counts

    # -- stage 2: endings -----------------------------------------------------

    async def endings(self, pos: Position) -> records.Endings:
        sents = self.sentences[pos.story]
        req = generation_request(self, prompts.ending_messages(prefix_text(sents, pos.k)))
        key = request_key("chat", req)
        rec = self.store.get("endings", key)
        if rec is None:
            self.requests["generation"] += 1
            res = await self.gen_router.chat(self.sched, self.corpus.stories[pos.story].id, req)
            rec = records.Endings(texts=res.texts, finish_reasons=res.finish_reasons, model=res.model,
                                  usage=res.usage, created=time.time(), seconds=res.seconds)
            self.committer.add("endings", key, rec)
            self.progress.fresh(res.usage)
        else:
            self.progress.hit()
        self.usage_all.add(rec.usage)
        return rec

    # -- stage 3: verdicts ----------------------------------------------------

    async def verdicts(self, pos: Position, endings: list[str]) -> list[str | None]:
        """The verdict per ending (see `_answer`); None for an empty ending (not sent).
        A rerun reads them from the position's record; without it (a new position,
        or a cache from before that record existed) from the n verdict records,
        asking the judge for those missing, and then writes the position's record."""
        sents = self.sentences[pos.story]
        head, tail = prompts.judge_parts(sents[pos.k - 1],
                                         continuation_text(sents, pos.k, self.cfg.continuation_words))
        pkey = self.position_key(head, tail, endings)
        judged = self.store.get("positions", pkey)
        if judged is not None:
            # The record stands for its verdicts: count them as the cache hits they replace.
            self.store.counts.hits["verdicts"] += judged.judged
            self.progress.hit(judged.judged)
            self.usage_all.add(judged.usage)
            logprobs = judged.first_logprobs or [None] * len(judged.texts)
            return [None if t is None else self._answer(t, lp) for t, lp in zip(judged.texts, logprobs)]
        texts, logprobs, usage = await self.judge(pos, head, tail, endings)
        self.committer.add("positions", pkey, records.JudgedPosition(
            texts=texts, first_logprobs=logprobs if any(lp is not None for lp in logprobs) else [],
            usage=usage, judged=sum(t is not None for t in texts), created=time.time()))
        return [None if t is None else self._answer(t, lp) for t, lp in zip(texts, logprobs)]

    def position_key(self, head: str, tail: str, endings: list[str]) -> bytes:
        """Key of a position's judged record: everything its n judge requests are made
        of (the request without the user text, whose head and tail are shared and
        whose middle is the ending), so it changes whenever any of their keys would."""
        return request_key("judged", {"request": judge_request(self, []), "system": prompts.JUDGE_SYSTEM,
                                      "head": head, "tail": tail, "endings": endings})

    async def judge(self, pos: Position, head: str, tail: str, endings: list[str]):
        """The raw judge answers per ending (None for an empty ending), their first-token
        logprobs, and the usage summed over them: from the verdict records, the
        missing ones from the judge."""
        reqs: list[tuple[int, ChatRequest, bytes]] = []
        for i, e in enumerate(endings):
            if e.strip():
                req = judge_request(self, prompts.judge_messages_from_parts(head, tail, e))
                reqs.append((i, req, request_key("chat", req)))
        texts: list[str | None] = [None] * len(endings)
        logprobs: list[dict[str, float] | None] = [None] * len(endings)
        usage = Usage()
        affinity = f"{self.corpus.stories[pos.story].id}\x00{pos.k}"  # a position's judge prompts share a prefix
        cached = self.store.get_many("verdicts", [k for _, _, k in reqs])
        todo = []
        for (i, req, key), rec in zip(reqs, cached):
            if rec is None:
                todo.append((i, req, key))
            else:
                texts[i], logprobs[i] = rec.text, rec.first_logprobs
                usage.add(rec.usage)
        self.progress.hit(len(reqs) - len(todo))

        async def one(item) -> None:
            i, req, key = item
            self.requests["judge"] += 1
            res = await self.judge_router.chat(self.sched, affinity, req)
            rec = records.Verdict(text=res.texts[0], finish_reason=res.finish_reasons[0], model=res.model,
                                  usage=res.usage, created=time.time(), seconds=res.seconds,
                                  first_logprobs=res.first_logprobs[0] if res.first_logprobs else None)
            self.committer.add("verdicts", key, rec)
            usage.add(rec.usage)
            self.progress.fresh(res.usage)
            texts[i], logprobs[i] = rec.text, rec.first_logprobs

        if todo and self.cfg.warm_judge:
            # All judge prompts of a position share the continuation: one first
            # fills the server's prefix cache, then the rest find it there.
            await one(todo[0])
            todo = todo[1:]
        await self.sched.map(one, todo)
        self.usage_all.add(usage)
        return texts, logprobs, usage

    def _answer(self, text: str, first_logprobs: dict[str, float] | None) -> str:
        """The verdict text a position counts: the raw answer, or with a logprobs
        judge the letter its first-token probabilities favour."""
        if self.cfg.judge_constraint == "logprobs":
            return prompts.verdict_from_logprobs(first_logprobs)
        return text

    # -- one position, one story ---------------------------------------------

    async def position(self, pos: Position) -> None:
        if pos.story in self.failed:
            return
        story = self.corpus.stories[pos.story]
        try:
            rec = await self.endings(pos)
            answers = await self.verdicts(pos, rec.texts)
        except StatusError as e:
            # The request itself was refused (e.g. a prompt longer than the
            # model's context): this story fails, the others go on.
            self.failed.setdefault(pos.story, Failure(id=story.id, stage=f"position {pos.k}", error=str(e)))
            self.progress.position_done()
            return
        n_match = n_empty = n_malformed = 0
        for a in answers:
            if a is None:
                n_empty += 1
                continue
            match, malformed = prompts.parse_verdict(a)
            n_match += match
            n_malformed += malformed
        n = len(rec.texts)
        res = PositionResult(id=story.id, group=story.group, k=pos.k, pct=pos.pct, n_endings=n, n_match=n_match,
                             n_empty=n_empty, n_malformed=n_malformed, no_rate=1.0 - n_match / n)
        self.results[(pos.story, pos.k)] = res
        if self.cfg.save_texts:
            self.texts[(pos.story, pos.k)] = {"id": story.id, "k": pos.k, "endings": rec.texts, "verdicts": answers}
        self.committer.lines.append(_line_encoder.encode(res) + b"\n")
        self.progress.position_done()

    async def stream_positions(self, stories: list[int] | None = None):
        """Positions in corpus order (of `stories`, default all), each story's in
        ascending k (their prompts share the story's prefix, which the server's
        prefix cache serves)."""
        for si in range(len(self.corpus.stories)) if stories is None else stories:
            story = self.corpus.stories[si]
            try:
                ps = await self.positions(si, story)
            except StatusError as e:
                self.failed[si] = Failure(id=story.id, stage="tokenize", error=str(e))
                continue
            self.progress.add_positions(len(ps))
            for p in ps:
                yield p

    async def run(self) -> None:
        self.setup_tokenizer()
        await self.resolve_models()
        cfg = self.cfg
        gen, judge = self.gen_router, self.judge_router
        routers = [r for r in (gen, judge) if not r.single]
        # One lane per replica ("generation", "judge", "tokenize" with one server).
        lanes = {**gen.lanes(), **judge.lanes(), **gen.tokenize_lanes()}
        # Positions open at once: enough to keep every lane full, few enough that
        # each generation lane works on one story's prefix at a time.
        n_gen, n_judge = len(gen.urls), len(judge.urls)
        max_open = cfg.gen_concurrency + max(2, 2 * math.ceil(n_judge * cfg.judge_concurrency / (n_gen * cfg.endings)))
        # With several generation replicas each is fed its own stories (those it
        # comes first for), in corpus order: a feed in plain corpus order would
        # keep only one or two stories, hence replicas, busy at a time.
        queues = self.story_queues()
        for r in routers:
            await r.scrape_metrics("start")
        if routers:
            self.progress.extra = lambda: " ".join(r.postfix() for r in (gen, judge))
        sched = Scheduler(lanes)
        self.sched = sched
        async with sched:
            sched.service(self.committer.run())
            for r in routers:
                sched.service(r.health_loop())
            if gen.single:
                await sched.feed(self.stream_positions(), self.position, max_open)
            else:
                await sched.map(lambda url: sched.feed(self.stream_positions(self.take_stories(url, queues)),
                                                       self.position, max_open), list(queues))
        for r in routers:
            await r.scrape_metrics("end")

    def story_queues(self) -> dict[str, collections.deque[int]]:
        """Generation replica URL -> the stories it comes first for, in corpus order."""
        queues: dict[str, collections.deque[int]] = {url: collections.deque() for url in self.gen_router.urls}
        for si, story in enumerate(self.corpus.stories):
            queues[self.gen_router.preference(story.id)[0]].append(si)
        return queues

    def take_stories(self, url: str, queues: dict[str, collections.deque[int]]):
        """The stories `url`'s feed opens: its own queue, then, while it is up,
        the last unstarted story of the longest other queue, which moves to it
        whole (pinned): with story affinity the replica with the most stories
        would otherwise finish alone while the others idle."""
        own = queues[url]
        while True:
            if own:
                yield own.popleft()
                continue
            victim = max(queues.values(), key=len)
            if not victim or not self.gen_router.is_up(url):
                return
            si = victim.pop()
            self.gen_router.pin(self.corpus.stories[si].id, url)
            yield si

    def replica_figures(self) -> dict[str, list[dict[str, Any]]]:
        """Per-replica figures of each role (requests, tokens/s, failures, prefix-cache hit rate)."""
        return {"generation": self.gen_router.figures(), "judge": self.judge_router.figures()}

    # -- outputs ----------------------------------------------------------------

    def ordered_results(self) -> list[PositionResult]:
        return [self.results[key] for key in sorted(self.results) if key[0] not in self.failed]

    def curves(self) -> list[Curve]:
        by_story: dict[int, list[PositionResult]] = {}
        for (si, _k), r in sorted(self.results.items()):
            by_story.setdefault(si, []).append(r)
        out = []
        for si, story in enumerate(self.corpus.stories):
            if si in self.failed:
                continue
            rs = by_story.get(si, [])
            out.append(Curve(id=story.id, group=story.group, x=[r.pct for r in rs], y=[r.no_rate for r in rs]))
        return out

    def write_outputs(self) -> None:
        out = self.out
        atomic_write(out / "positions.jsonl", b"".join(_line_encoder.encode(r) + b"\n" for r in self.ordered_results()))
        settings = self.cfg.curve_settings()
        curves = self.curves()
        stats, groups = compute(curves, settings)
        atomic_write(out / "stories.csv", stories_csv(curves, stats, settings))
        atomic_write(out / "groups.csv", groups_csv(groups))
        self.groups = groups
        atomic_write(out / "meta.jsonl", b"".join(
            _line_encoder.encode({"id": st.id, "group": st.group, "words": st.words, "meta": st.meta}) + b"\n"
            for si, st in enumerate(self.corpus.stories) if si not in self.failed))
        if self.cfg.save_texts:
            atomic_write(out / "texts.jsonl", b"".join(
                _line_encoder.encode(self.texts[key]) + b"\n" for key in sorted(self.texts) if key[0] not in self.failed))


def generation_request(run: _Run, messages) -> ChatRequest:
    c = run.cfg
    return ChatRequest(model=run.gen_model, messages=messages, n=c.endings, temperature=c.temperature,
                       top_p=c.top_p, max_tokens=c.max_tokens, seed=c.seed,
                       chat_template_kwargs=run.template_kwargs)


def judge_request(run: _Run, messages) -> ChatRequest:
    c = run.cfg
    return ChatRequest(model=run.judge_model, messages=messages, n=1, temperature=c.judge_temperature,
                       max_tokens=c.judge_max_tokens, chat_template_kwargs=run.template_kwargs,
                       structured_outputs={"choice": ["Y", "N"]} if c.judge_constraint == "choice" else None,
                       logprobs=True if c.judge_constraint == "logprobs" else None,
                       top_logprobs=20 if c.judge_constraint == "logprobs" else None)


def _first_error(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = inner[0] if inner else exc.exceptions[0]
    return exc


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("tension-run", "numpy", "numba", "msgspec", "aiohttp", "lmdb", "uvloop"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return out


async def score_async(cfg: ScoreConfig, corpus_path: str | Path, out_dir: str | Path) -> RunSummary:
    """Score a corpus; see the module docstring. Raises TensionError for problems
    that stop the run before it starts; problems during the run end it with
    status "failed" (or "interrupted" on cancellation), everything completed kept."""
    make_tokenizer(cfg)  # a bad --tokenizer is a usage error, found before any work
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    with _out_lock(out):
        return await _score_locked(cfg, corpus_path, out)


def _out_lock(out: Path):
    """One run per output folder: a second run writing the same partial file and
    outputs would interleave them."""
    return out_lock(out, out / ".tension-run.lock", "score", "folder")


@contextlib.contextmanager
def out_lock(out: Path, lock_file: Path, verb: str, what: str):
    """Hold `lock_file` for the output `out` of a `verb` run, or fail at once if
    another run holds it. The lock dies with its process (even SIGKILL)."""
    f = lock_file.open("a+")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            raise TensionError(f"--out {out} is in use by another tension-run {verb} (pid {holder}); wait for it "
                               f"to finish or choose another {what} (several runs may share one --cache)") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        yield
    finally:
        f.close()


async def _score_locked(cfg: ScoreConfig, corpus_path: str | Path, out: Path) -> RunSummary:
    corpus = read_corpus(corpus_path, cfg.min_words, cfg.max_words)
    if (shard := cfg.shard_spec()) is not None:  # --shard I/N: this process's share of the stories
        corpus.stories = [st for st in corpus.stories if in_shard(st.id, *shard)]
    store = Store(cfg.cache or default_path(),
                  max_bytes=int(cfg.cache_max_gb * 1e9) if cfg.cache_max_gb else None)
    partial = out / "positions.partial.jsonl"
    partial.write_bytes(b"")
    progress = Progress(enabled=cfg.progress, stories=len(corpus.stories))
    t0 = time.time()
    status, error = "complete", None
    run: _Run | None = None
    try:
        async with Client(api_key=cfg.resolved_api_key(), timeouts=Timeouts(request=cfg.timeout),
                          retry=RetryPolicy(attempts=cfg.retries, total_seconds=cfg.retry_seconds)) as client:
            run = _Run(cfg, corpus, store, client, out, progress)
            run.committer = _Committer(store, partial)
            try:
                status, error = await run_committed(run.run(), run.committer)
            except ConfigError as e:  # found at start (e.g. replicas serving other models): a usage error
                status, error = "failed", _describe(e)
                raise
        if status == "complete":
            run.write_outputs()
            if cfg.report:
                _write_run_json(run, cfg, corpus, store, out, status, error, t0, corpus_path)
                from tension.core.reports.report import report
                report(out, gpu_hour_usd=cfg.gpu_hour_usd)
    except asyncio.CancelledError:
        # Also a stop that lands after the last position (e.g. during the final
        # commit, or while the outputs are written): the outputs are not complete.
        status = "interrupted"
        raise
    finally:
        progress.close()
        try:
            store.save_run_counts()
        finally:
            summary = _summary(run, corpus, store, out, status, error)
            _write_run_json(run, cfg, corpus, store, out, status, error, t0, corpus_path)
            store.close()
    return summary


async def run_committed(work, committer: _Committer) -> tuple[str, str | None]:
    """Await a run's work, then commit whatever completed, however the work ended.
    Returns ("complete", None) or ("failed", the first error); a cancellation
    (Ctrl-C, SIGTERM) is re-raised after the commit."""
    status, error = "complete", None
    try:
        await work
    except ConfigError:  # a usage error found at start: the caller reports it as such
        raise
    except BaseExceptionGroup as eg:
        first = _first_error(eg)
        if not isinstance(first, Exception):
            raise
        status, error = "failed", _describe(first)
    except TensionError as e:
        status, error = "failed", _describe(e)
    finally:
        try:
            committer.close()
        except TensionError as e:  # the last commit failed (e.g. the cache is full)
            if status == "complete":
                status, error = "failed", _describe(e)
    return status, error


def _describe(e: BaseException) -> str:
    return str(e) if isinstance(e, TensionError) else f"{type(e).__name__}: {e}"


def _summary(run, corpus, store, out, status, error) -> RunSummary:
    return RunSummary(
        status=status, out=str(out), stories=len(corpus.stories),
        positions=len(run.results) if run else 0,
        failures=list(run.failed.values()) if run else [],
        input_errors=[str(e) for e in corpus.errors], skipped=len(corpus.skipped), skipped_stories=list(corpus.skipped),
        too_long=dict(run.too_long) if run else {}, no_positions=dict(run.no_positions) if run else {},
        requests=dict(run.requests) if run else {}, cache_hits=dict(store.counts.hits), error=error,
        replicas=run.replica_figures() if run else {}, replica_events=list(run.replica_events) if run else [])


def _write_run_json(run, cfg, corpus, store, out, status, error, t0, corpus_path) -> None:
    client = run.client if run else None
    doc = {
        "status": status,
        "error": error,
        "corpus": str(corpus_path),
        "argv": sys.argv,
        "started": t0,
        "wall_seconds": round(time.time() - t0, 3),
        "config": cfg.public(),
        "models": {"generation": run.gen_model if run else cfg.model,
                   "judge": run.judge_model if run else cfg.judge_model},
        "versions": _versions(),
        "stories": {"kept": len(corpus.stories), "skipped": [msgspec.to_builtins(s) for s in corpus.skipped],
                    "input_errors": [str(e) for e in corpus.errors],
                    "failed": [msgspec.to_builtins(f) for f in run.failed.values()] if run else []},
        "positions": len(run.results) if run else 0,
        "positions_skipped_too_long": dict(run.too_long) if run else {},
        "stories_without_positions": dict(run.no_positions) if run else {},
        "context_len": run.context_len if run else None,
        "requests": dict(run.requests) if run else {},
        "http": {"attempts": client.sent, "retries": client.retries, "followups": client.followups} if client else {},
        "usage_this_run": msgspec.to_builtins(client.usage) if client else {},
        "usage_all_answers": msgspec.to_builtins(run.usage_all) if run else {},
        "cache": {"path": str(store.path), "hits": dict(store.counts.hits), "misses": dict(store.counts.misses),
                  "writes": dict(store.counts.writes)},
        "lanes": {k: msgspec.to_builtins(v) for k, v in run.sched.lane_stats.items()} if run and run.sched else {},
        "replicas": run.replica_figures() if run else {},
        "replica_events": list(run.replica_events) if run else [],
    }
    atomic_write(out / "run.json", msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n")


def score(cfg: ScoreConfig, corpus_path: str | Path, out_dir: str | Path) -> RunSummary:
    """Blocking form of ``score_async`` on uvloop (asyncio when uvloop is missing).
    SIGTERM stops the run like Ctrl-C: completed work is committed first."""
    return run_blocking(lambda: score_async(cfg, corpus_path, out_dir))


def run_blocking(make_coro: Callable[[], Any]) -> Any:
    """Run the coroutine ``make_coro()`` to its end on uvloop (asyncio when uvloop is
    missing), SIGTERM cancelling it like Ctrl-C. Shared by the blocking commands."""
    try:
        import uvloop
        factory = uvloop.new_event_loop
    except ImportError:
        factory = None

    async def main():
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        try:
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
            return await make_coro()
        try:
            return await make_coro()
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())
