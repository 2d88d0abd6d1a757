"""`tension-run bench`: how fast the configured servers run the 100-Endings workload.

A fixed, seeded workload from a corpus (default: the shipped demo story): a few
positions of its first story, their generation requests (n endings each) and the
judge requests of those endings — built by the score pipeline's own code, sent
streamed (``stream=False``: plain, as score sends them) and without the cache (it
measures the servers). Each run has two timed
phases, generation then judge:

    generation output tok/s = Σ completion tokens / generation wall time
    judge req/s             = judge requests / judge wall time
    prefix-cache hit rate   = Δ vllm:prefix_cache_hits / Δ vllm:prefix_cache_queries  (/metrics, per server)
                            = Σ usage.prompt_tokens_details.cached_tokens / Σ prompt_tokens  (answers; over
                              those that report it, "–" and null where none does)
    computed prompt tokens  = Δ vllm:prefix_cache_queries − Δ vllm:prefix_cache_hits over the phase (/metrics read
                              between the phases), per generated position and per judged ending, against the
                              ideal's (pipelines/ideal.py over the positions benched); null with the reason on a
                              server without those counters (llama.cpp, proxies)
    seconds per story       = (generation + judge wall time) / positions benched × positions of the story
    cost per story          = seconds per story / 3600 × gpu_hour_usd

Runs: the baseline (positions in story order, judge warm-up on), then warm-up
off, then positions shuffled, to show what the ordering buys. Each run tags its
system messages with a random bench id and its run number, so no run finds
another's prompts (of this bench or an earlier one) in the server's prefix cache.
The figures (bench_figures.py) are saved for `tension-run estimate --bench`.

A failed request is counted, not raised; but a bench with one gives no figure
(`estimate --bench` refuses it). So the first failure of the baseline stops the
bench: what is in flight is let finish (and counted), nothing more is sent (no
judge phase after a failed generation phase, no other run), and `stopped` says
why. On a server that drops n when streaming the default bench spent 3 runs × 4
full generations (≈ 3.5 min) before saying it had no figure (L2 of
../shared/reviews/external-servers-2026-12-07.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
from tqdm.auto import tqdm  # a widget in a notebook, text in a terminal

from tension.cache.store import Store
from tension.core.config import ScoreConfig
from tension.core.errors import ConfigError, InputError, StatusError, TensionError
from tension.core.inputs.corpus import read_corpus
from tension.core.llm.client import Client, StreamResult
from tension.core.llm.prometheus import prefix_cache_delta, prefix_cache_hit_rate
from tension.core.llm.protocol import ChatRequest
from tension.core.pipelines.bench_figures import (
    BenchFigures,
    Percentiles,
    RoleTokens,
    RunFigures,
    ServerFigures,
    format_bench,
    load_figures,
    percentiles,
    save_figures,
)
from tension.core.pipelines.ideal import Tally, constants, template_pieces
from tension.core.pipelines.over_ideal import NO_COUNTERS, NO_IDEAL, NO_METRICS, over_ideal, per
from tension.core.pipelines.score.positions import Position, PositionFinder, local_counter
from tension.core.pipelines.score.requests import ScoreRequests, resolve_models, score_routers
from tension.core.redact import redact
from tension.core.run.commit import first_error
from tension.core.run.lifecycle import open_run, open_store
from tension.core.run.progress import Progress
from tension.core.run.scheduler import Scheduler

__all__ = ["BenchOptions", "Percentiles", "ServerFigures", "RunFigures", "BenchFigures", "run_bench",
           "format_bench", "save_figures", "load_figures"]

MAX_ERRORS = 10  # error messages kept per run (vLLM's bench prints the first 10)


class BenchOptions(msgspec.Struct, frozen=True, kw_only=True):
    positions: int = 4
    seed: int = 0
    gpu_hour_usd: float | None = None
    variants: bool = True  # also warm-up off and shuffled positions
    stream: bool = True  # False: plain requests, as score sends them (no time to first token)


def _tagged(req: ChatRequest, tag: str) -> ChatRequest:
    """The request with its system message marked by the bench and run: a prefix
    no other run (of this or an earlier bench) shares, so each run starts from a
    cold prefix cache."""
    msgs = [dict(m) for m in req.messages]
    msgs[0]["content"] = f"[{tag}] " + msgs[0]["content"]
    return msgspec.structs.replace(req, messages=msgs)


class _Bench:
    """The timed runs of one bench: the chosen positions' requests, sent without the cache."""

    def __init__(self, cfg: ScoreConfig, client: Client, reqs: ScoreRequests, finder: PositionFinder,
                 judge_urls: list[str], opts: BenchOptions, chosen: list[Position], nonce: str,
                 const: dict[str, int] | None, story_words: int):
        self.bar: tqdm | None = None  # positions done of the current run
        self.nonce = nonce  # this bench's prompts share no prefix with an earlier one's
        self.const = const  # the tagged prompts' fixed texts, counted (None: unknown; no ideal)
        self.story_words = story_words
        self.cfg = cfg
        self.client = client
        self.reqs = reqs
        self.sentences = finder.sentences
        self.opts = opts
        self.chosen = chosen
        # With several replicas per role the positions are dealt out in turn, so each
        # replica gets its share and its own figures (a position's requests stay on one).
        self.gen_urls, self.judge_urls = finder.router.urls, judge_urls
        self.urls: dict[str, list[str]] = {}
        for role, urls in (("generation", self.gen_urls), ("judge", self.judge_urls)):
            for url in urls:
                self.urls.setdefault(url, []).append(role)
        self.not_sent: list[str] = []  # what the baseline's first failure left unsent (module docstring)
        self.stopped: str | None = None  # why the bench stopped after its first run

    async def runs(self) -> list[RunFigures]:
        """The baseline run, then (with variants) warm-up off and shuffled positions."""
        plan = [("baseline: story order, warm-up on", "story", True)]
        if self.opts.variants:
            plan += [("story order, warm-up off", "story", False), ("shuffled, warm-up on", "shuffled", True)]
        runs = []
        for i, (name, order, warm) in enumerate(plan):
            with tqdm(total=len(self.chosen), unit="pos", desc=f"bench run {i + 1}/{len(plan)}",
                      disable=not self.cfg.progress, dynamic_ncols=True) as self.bar:
                runs.append(await self.one_run(i, name, order, warm))
            if i == 0 and runs[0].failed:
                self.stopped = self._why_stopped(runs[0], len(plan) - 1)
                break
        return runs

    def _why_stopped(self, first: RunFigures, later: int) -> str:
        """What the baseline's failure stopped, and why (module docstring)."""
        skipped = list(self.not_sent)
        if later:
            skipped.append(f"the {later} other run{'s' if later != 1 else ''}")
        return (f"{first.failed} of the first run's requests failed, so this bench can give no figure "
                "(`estimate --bench` refuses one with failed requests; the errors above say why)"
                + (f"; not sent: {', '.join(skipped)}" if skipped else ""))

    async def _metrics(self) -> dict[str, dict[str, float] | None]:
        read = await asyncio.gather(*(self.client.metrics(u) for u in self.urls))
        return dict(zip(self.urls, read))

    async def one_run(self, run_no: int, name: str, order: str, warm: bool) -> RunFigures:
        cfg = self.cfg
        fig = RunFigures(name=name, order=order, warm_judge=warm)
        ps = list(self.chosen)
        if order == "shuffled":
            random.Random(self.opts.seed + run_no).shuffle(ps)
        results: dict[str, list[StreamResult]] = {"generation": [], "judge": []}
        by_url: dict[str, list[StreamResult]] = {u: [] for u in self.urls}
        slot = {p: i for i, p in enumerate(self.chosen)}
        gen_url = {p: self.gen_urls[slot[p] % len(self.gen_urls)] for p in ps}
        judge_url = {p: self.judge_urls[slot[p] % len(self.judge_urls)] for p in ps}

        unsent = {"generation": 0, "judge": 0}

        async def send(lane: str, url: str, req: ChatRequest) -> StreamResult | None:
            try:
                async with sched.slot(lane):
                    if run_no == 0 and fig.failed:  # the baseline failed: this bench gives no figure
                        unsent[lane] += 1
                        return None
                    res = await self._call(url, _tagged(req, f"bench {self.nonce} run {run_no}"))
            except TensionError as e:
                if lane == "judge" and self.reqs.constraint.refused(e):  # score's judge would go unconstrained
                    return await send(lane, url, msgspec.structs.replace(req, structured_outputs=None))
                fig.failed += 1
                if len(fig.errors) < MAX_ERRORS:
                    fig.errors.append(f"{lane}: {e}")
                return None
            results[lane].append(res)
            by_url[url].append(res)
            fig.plain += res.plain
            return res

        async def judge_position(item: tuple[Position, StreamResult]) -> None:
            p, res = item
            head, tail = self.reqs.judge_parts(self.sentences[p.story], p.k)
            self.reqs.constraint.known(self.client.server(u) for u in self.judge_urls)  # one an earlier run taught
            reqs = [r for _, r in self.reqs.verdicts(head, tail, res.texts)]
            if reqs and warm:
                await send("judge", judge_url[p], reqs[0])
                reqs = reqs[1:]
            await sched.map(lambda r: send("judge", judge_url[p], r), reqs)
            if self.bar is not None:
                self.bar.update(1)

        before = await self._metrics()
        lanes = {"generation": cfg.gen_concurrency * len(self.gen_urls),
                 "judge": cfg.judge_concurrency * len(self.judge_urls)}
        async with Scheduler(lanes) as sched:
            t0 = time.perf_counter()
            gens = await sched.map(lambda p: send("generation", gen_url[p],
                                                  self.reqs.endings(self.sentences[p.story], p.k)), ps)
            t1 = time.perf_counter()
            between = await self._metrics()  # the generation phase's counters apart from the judge's
            t1b = time.perf_counter()
            judged = [(p, r) for p, r in zip(ps, gens) if r is not None]
            if run_no == 0 and fig.failed and judged:
                self.not_sent.append(f"the judge phase ({sum(len(r.texts) for _, r in judged)} requests)")
                judged = []
            await sched.map(judge_position, judged)
            t2 = time.perf_counter()
        self.not_sent[:0] = [f"{k} {lane} request{'s' if k != 1 else ''}" for lane, k in unsent.items() if k]
        after = await self._metrics()
        _phase_figures(fig, results, t1 - t0, t2 - t1b, cfg.endings)
        fig.prompt_tokens = self.role_tokens(fig, (before, between, after))
        for url, roles in self.urls.items():
            fig.servers[redact(url)] = _server_figures(roles, by_url[url], before[url], after[url])
        return fig

    def role_tokens(self, fig: RunFigures, readings: tuple[dict[str, dict[str, float] | None], ...]
                    ) -> dict[str, RoleTokens]:
        """Per role, the servers' computed prompt tokens over its phase against the ideal's."""
        ideal: dict[str, float] | None = None
        if self.const is not None and fig.mean_ending_tokens is not None:
            tally = Tally(self.cfg, self.const, fig.mean_ending_tokens)
            tally.story(self.sentences[self.chosen[0].story], self.story_words, self.chosen)
            ideal = {role: t.computed for role, t in tally.totals().items()}
        out = {}
        for role, urls, units, (start, end) in (
                ("generation", self.gen_urls, fig.generation_requests, readings[:2]),
                ("judge", self.judge_urls, fig.judge_requests, readings[1:])):
            t = RoleTokens(unit="position" if role == "generation" else "judged ending", units=units)
            deltas = [prefix_cache_delta(start[u], end[u]) if start[u] is not None else None for u in urls]
            if all(d is not None for d in deltas):
                t.computed = per(sum(d[1] - d[0] for d in deltas if d is not None), units)
            else:
                t.why_none = NO_METRICS if any(end[u] is None for u in urls) else NO_COUNTERS
            i = ideal[role] if ideal is not None else None
            t.ideal = per(i, units)
            if t.computed is not None and t.ideal is not None:
                t.over_ideal = over_ideal(t.computed, t.ideal)
            elif ideal is None and t.why_none is None:
                t.why_none = NO_IDEAL
            out[role] = t
        return out

    async def _call(self, url: str, req: ChatRequest) -> StreamResult:
        """One request, streamed (timed to the first token) or plain, as score sends it."""
        server = self.client.server(url)
        # a logprobs judge's answers are read for their log-probabilities, which a stream's events are not:
        # sent plain, as score sends them, so a server that drops them is refused here too (issue 61 M3)
        if self.opts.stream and not req.logprobs:
            return await self.client.chat_stream(server, req)
        r = await self.client.chat(server, req)
        usage = r.usage
        if server.traits.usage == "one choice" and usage.requests:
            # llama.cpp's usage counts one choice of each request (L1 of
            # ../shared/reviews/external-servers-2026-12-02.md: 4× low in chunks of
            # 4): each request's count stands for each of its choices
            usage = msgspec.structs.replace(
                usage, completion_tokens=round(usage.completion_tokens * len(r.texts) / usage.requests))
        return StreamResult(texts=r.texts, model=r.model, usage=usage, ttft=None, seconds=r.seconds, events=0)


def _phase_figures(fig: RunFigures, results: dict[str, list[StreamResult]], gen_seconds: float,
                   judge_seconds: float, endings: int) -> None:
    """Throughput, time to first token, latency and cached-token share of each phase."""
    gen, judge = results["generation"], results["judge"]
    fig.generation_requests = len(gen)
    fig.judge_requests = len(judge)
    fig.generation_seconds = gen_seconds
    fig.judge_seconds = judge_seconds
    fig.generation_output_tokens = sum(r.usage.completion_tokens or r.events for r in gen)
    if gen and fig.generation_seconds > 0:
        fig.gen_tok_s = fig.generation_output_tokens / fig.generation_seconds
        fig.mean_ending_tokens = fig.generation_output_tokens / (len(gen) * endings)
    if judge and fig.judge_seconds > 0:
        fig.judge_req_s = len(judge) / fig.judge_seconds
    for lane, rs in results.items():
        fig.ttft[lane] = percentiles([r.ttft for r in rs if r.ttft is not None])
        fig.latency[lane] = percentiles([r.seconds for r in rs])
        # over the answers that reported their cached prompt tokens: where none did (transformers serve,
        # FastChat, llama.cpp), no share ("–", null), never 0% (issue 61)
        said = [r.usage for r in rs if r.usage.cached_unreported < r.usage.requests]
        prompt = sum(u.prompt_tokens for u in said)
        fig.cached_token_rate[lane] = sum(u.cached_tokens for u in said) / prompt if prompt else None


def _server_figures(roles: list[str], answers: list[StreamResult], before: dict[str, float] | None,
                    after: dict[str, float] | None) -> ServerFigures:
    """One server's answers in a run, and its prefix cache over the run (its /metrics
    read before and after; no figure without a reading at both ends)."""
    sf = ServerFigures(roles=roles, requests=len(answers),
                       output_tokens=sum(r.usage.completion_tokens or r.events for r in answers))
    delta = prefix_cache_delta(before, after) if before is not None else None
    if delta is not None:
        sf.metrics_available = True
        sf.prefix_cache_hits, sf.prefix_cache_queries = delta
        sf.prefix_cache_hit_rate = prefix_cache_hit_rate(before, after)
    return sf


async def run_bench(cfg: ScoreConfig, corpus_path: str | Path, opts: BenchOptions = BenchOptions()) -> BenchFigures:
    """Run the workload against the servers of `cfg`; see the module docstring."""
    if opts.positions < 1:
        raise ConfigError(f"--positions: expected an integer >= 1, got {opts.positions}")
    count = local_counter(cfg)  # a bad --tokenizer is a usage error
    # The bench story is any story: the word filter of a corpus run does not apply.
    corpus = read_corpus(corpus_path, 0, 10**9)
    if not corpus.stories:
        raise corpus.errors[0] if corpus.errors else InputError(str(corpus_path), 0, None, "no stories")
    story = corpus.stories[0]
    with contextlib.ExitStack() as stack:
        if cfg.cache:  # token counts only
            store = open_store(cfg.cache, cfg.cache_max_gb)
        else:  # a throw-away one
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="tension-bench-"))
            store = Store(Path(tmp) / "tokens.lmdb")
        # The cache gives token counts only, and a bench is not the cache's "last run".
        run = open_run(cfg, "bench", store=store, progress=Progress(enabled=False, stories=1),
                       roles=("tokenize", "models"), last_run=False)
        async with run:
            gen, judge = score_routers(cfg, run.client)
            reqs = await resolve_models(cfg, gen, judge, run.llm.counts.requests)
            run.pipeline = _Benching(reqs)
            await run.client.check_gate()  # every server and model, before the workload starts
            finder = PositionFinder(cfg, run.llm, gen, count)
            nonce = os.urandom(4).hex()
            try:
                async with run.serving(gen, lanes=gen.tokenize_lanes() or {"tokenize": cfg.tokenize_concurrency},
                                       route=False):
                    all_ps = await finder.positions(0, story)
                    const = await _tagged_counts(finder, f"bench {nonce} run 0")
            except BaseExceptionGroup as eg:  # a /tokenize that fails: its own one-line error, not the group's
                raise first_error(eg) from None
            if not all_ps:
                raise InputError(str(corpus_path), 0, None,
                                 f"story {story.id!r} has no position to bench ({finder.no_positions.get(story.id)})")
            rng = random.Random(opts.seed)
            chosen = sorted(rng.sample(all_ps, min(opts.positions, len(all_ps))), key=lambda p: p.k)
            b = _Bench(cfg, run.client, reqs, finder, judge.urls, opts, chosen, nonce, const, story.words)
            runs = await b.runs()
        header = run.header()
    fig = _bench_figures(b, str(corpus_path), story.id, len(all_ps), runs)
    fig.run = header
    return fig


async def _tagged_counts(finder: PositionFinder, tag: str) -> dict[str, int] | None:
    """The token counts of the prompts' fixed texts with the run's tag on both system
    prompts (`_tagged`), for the ideal; None when the server cannot count them."""
    pieces = template_pieces()
    pieces[0], pieces[2] = f"[{tag}] " + pieces[0], f"[{tag}] " + pieces[2]
    try:
        return constants(await finder.token_counts(pieces, ""))
    except StatusError:
        return None


class _Benching:
    """The run's `Pipeline`: the models benched, for the record header."""

    def __init__(self, reqs: ScoreRequests):
        self.reqs = reqs

    def models(self) -> dict[str, str | None]:
        return {"generation": self.reqs.gen_model, "judge": self.reqs.judge_model}

    def outcome(self) -> tuple[int, int]:
        return 1, 0

    def body(self) -> dict[str, Any]:
        return {}


def _bench_figures(b: _Bench, corpus: str, story: str, story_positions: int, runs: list[RunFigures]
                   ) -> BenchFigures:
    cfg, opts, base = b.cfg, b.opts, runs[0]
    per_story = None
    if base.generation_requests and base.judge_requests:
        per_story = (base.generation_seconds + base.judge_seconds) / len(b.chosen) * story_positions
    fig = BenchFigures(
        created=time.time(), corpus=corpus, story=story, story_positions=story_positions,
        positions_benched=[p.k for p in b.chosen], base_url=redact(",".join(b.gen_urls)),  # printed and saved
        judge_base_url=redact(",".join(b.judge_urls)), model=b.reqs.gen_model, judge_model=b.reqs.judge_model,
        endings=cfg.endings, max_tokens=cfg.max_tokens, gen_concurrency=cfg.gen_concurrency,
        judge_concurrency=cfg.judge_concurrency, seed=opts.seed, gen_tok_s=base.gen_tok_s,
        judge_req_s=base.judge_req_s, mean_ending_tokens=base.mean_ending_tokens, seconds_per_story=per_story,
        gpu_hour_usd=opts.gpu_hour_usd, failed=sum(r.failed for r in runs), runs=runs, stopped=b.stopped)
    if per_story is not None and opts.gpu_hour_usd is not None:
        fig.usd_per_story = per_story / 3600 * opts.gpu_hour_usd
        fig.usd_per_100_stories = 100 * fig.usd_per_story
    return fig
