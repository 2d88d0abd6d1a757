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
                            = Σ usage.prompt_tokens_details.cached_tokens / Σ prompt_tokens  (answers)
    seconds per story       = (generation + judge wall time) / positions benched × positions of the story
    cost per story          = seconds per story / 3600 × gpu_hour_usd

Runs: the baseline (positions in story order, judge warm-up on), then warm-up
off, then positions shuffled, to show what the ordering buys. Each run tags its
system messages with a random bench id and its run number, so no run finds
another's prompts (of this bench or an earlier one) in the server's prefix cache. The figures are saved for `tension-run estimate --bench`.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

import msgspec
import numpy as np
from tqdm import tqdm

from tension.cache.store import Store

from tension.core.prompts import score as prompts
from tension.core.llm.client import Client, StreamResult, Timeouts
from tension.core.config import ScoreConfig
from tension.core.inputs.corpus import read_corpus
from tension.core.errors import ConfigError, InputError, TensionError
from tension.core.inputs.jsonl import atomic_write
from tension.core.run.progress import Progress
from tension.core.llm.prometheus import PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES, counter, parse_samples
from tension.core.run.scheduler import Scheduler
from tension.core.pipelines.score import Position, _Committer, _Run, generation_request, judge_request
from tension.core.inputs.segment import continuation_text, prefix_text

__all__ = ["BenchOptions", "Percentiles", "ServerFigures", "RunFigures", "BenchFigures", "bench", "bench_async",
           "format_bench", "save_figures", "load_figures"]

FIGURES_VERSION = 1
MAX_ERRORS = 10  # error messages kept per run (vLLM's bench prints the first 10)


class BenchOptions(msgspec.Struct, kw_only=True):
    positions: int = 4
    seed: int = 0
    gpu_hour_usd: float | None = None
    variants: bool = True  # also warm-up off and shuffled positions
    stream: bool = True  # False: plain requests, as score sends them (no time to first token)


class Percentiles(msgspec.Struct, kw_only=True):
    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class ServerFigures(msgspec.Struct, kw_only=True):
    """One server (keyed by its base URL; replicas will each get one)."""

    roles: list[str]
    requests: int = 0  # answers it gave in this run
    output_tokens: int = 0
    metrics_available: bool = False
    prefix_cache_queries: float | None = None  # Δ over the run, tokens
    prefix_cache_hits: float | None = None
    prefix_cache_hit_rate: float | None = None


class RunFigures(msgspec.Struct, kw_only=True):
    name: str
    order: str  # "story" or "shuffled"
    warm_judge: bool
    generation_requests: int = 0
    judge_requests: int = 0
    failed: int = 0
    errors: list[str] = []
    generation_seconds: float = 0.0
    judge_seconds: float = 0.0
    generation_output_tokens: int = 0
    gen_tok_s: float | None = None
    judge_req_s: float | None = None
    mean_ending_tokens: float | None = None
    ttft: dict[str, Percentiles] = {}  # "generation", "judge"; seconds
    latency: dict[str, Percentiles] = {}  # end to end, seconds
    cached_token_rate: dict[str, float | None] = {}  # from usage.prompt_tokens_details.cached_tokens
    servers: dict[str, ServerFigures] = {}


class BenchFigures(msgspec.Struct, kw_only=True):
    """What `--save` writes and `estimate --bench` reads (the baseline's figures on top)."""

    version: int = FIGURES_VERSION
    created: float
    corpus: str
    story: str
    story_positions: int
    positions_benched: list[int]
    base_url: str
    judge_base_url: str
    model: str
    judge_model: str
    endings: int
    max_tokens: int
    gen_concurrency: int
    judge_concurrency: int
    seed: int
    gen_tok_s: float | None
    judge_req_s: float | None
    mean_ending_tokens: float | None
    seconds_per_story: float | None
    gpu_hour_usd: float | None = None
    usd_per_story: float | None = None
    usd_per_100_stories: float | None = None
    failed: int = 0
    runs: list[RunFigures] = []


def _percentiles(xs: list[float]) -> Percentiles:
    if not xs:
        return Percentiles()
    a = np.asarray(xs, dtype=float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return Percentiles(count=len(xs), mean=float(a.mean()), p50=float(p50), p90=float(p90), p99=float(p99))


def _tagged(req, tag: str):
    """The request with its system message marked by the bench and run: a prefix
    no other run (of this or an earlier bench) shares, so each run starts from a
    cold prefix cache."""
    msgs = [dict(m) for m in req.messages]
    msgs[0]["content"] = f"[{tag}] " + msgs[0]["content"]
    return msgspec.structs.replace(req, messages=msgs)


class _Bench:
    def __init__(self, run: _Run, client: Client, opts: BenchOptions, chosen: list[Position]):
        self.bar: tqdm | None = None  # positions done of the current run
        self.nonce = os.urandom(4).hex()  # this bench's prompts share no prefix with an earlier one's
        self.run = run
        self.cfg = run.cfg
        self.client = client
        self.opts = opts
        self.chosen = chosen
        # With several replicas per role the positions are dealt out in turn, so each
        # replica gets its share and its own figures (a position's requests stay on one).
        self.gen_urls, self.judge_urls = run.gen_router.urls, run.judge_router.urls
        self.urls: dict[str, list[str]] = {}
        for role, urls in (("generation", self.gen_urls), ("judge", self.judge_urls)):
            for url in urls:
                self.urls.setdefault(url, []).append(role)

    async def _metrics(self) -> dict[str, dict[str, float] | None]:
        texts = await asyncio.gather(*(self.client.get_text(u, "/metrics") for u in self.urls))
        return {u: parse_samples(t) if t is not None else None for u, t in zip(self.urls, texts)}

    async def one_run(self, run_no: int, name: str, order: str, warm: bool) -> RunFigures:
        cfg, run = self.cfg, self.run
        fig = RunFigures(name=name, order=order, warm_judge=warm)
        ps = list(self.chosen)
        if order == "shuffled":
            random.Random(self.opts.seed + run_no).shuffle(ps)
        results: dict[str, list[StreamResult]] = {"generation": [], "judge": []}
        by_url: dict[str, list[StreamResult]] = {u: [] for u in self.urls}
        slot = {p: i for i, p in enumerate(self.chosen)}
        gen_url = {p: self.gen_urls[slot[p] % len(self.gen_urls)] for p in ps}
        judge_url = {p: self.judge_urls[slot[p] % len(self.judge_urls)] for p in ps}

        async def plain(url: str, req) -> StreamResult:
            r = await self.client.chat(url, req)
            return StreamResult(texts=r.texts, model=r.model, usage=r.usage, ttft=None, seconds=r.seconds, events=0)

        async def send(lane: str, url: str, req) -> StreamResult | None:
            try:
                res = await sched.request(lane, self.client.chat_stream if self.opts.stream else plain, url,
                                          _tagged(req, f"bench {self.nonce} run {run_no}"))
            except TensionError as e:
                fig.failed += 1
                if len(fig.errors) < MAX_ERRORS:
                    fig.errors.append(f"{lane}: {e}")
                return None
            results[lane].append(res)
            by_url[url].append(res)
            return res

        before = await self._metrics()
        lanes = {"generation": cfg.gen_concurrency * len(self.gen_urls),
                 "judge": cfg.judge_concurrency * len(self.judge_urls)}
        async with Scheduler(lanes) as sched:
            t0 = time.perf_counter()
            sents = {p: run.sentences[p.story] for p in ps}
            gens = await sched.map(lambda p: send("generation", gen_url[p], generation_request(
                run, prompts.ending_messages(prefix_text(sents[p], p.k)))), ps)
            t1 = time.perf_counter()

            async def judge_position(item) -> None:
                p, res = item
                anchor = sents[p][p.k - 1]
                cont = continuation_text(sents[p], p.k, cfg.continuation_words)
                reqs = [judge_request(run, prompts.judge_messages(anchor, cont, e)) for e in res.texts if e.strip()]
                if reqs and warm:
                    await send("judge", judge_url[p], reqs[0])
                    reqs = reqs[1:]
                await sched.map(lambda r: send("judge", judge_url[p], r), reqs)
                if self.bar is not None:
                    self.bar.update(1)

            await sched.map(judge_position, [(p, r) for p, r in zip(ps, gens) if r is not None])
            t2 = time.perf_counter()
        after = await self._metrics()

        gen, judge = results["generation"], results["judge"]
        fig.generation_requests = len(gen)
        fig.judge_requests = len(judge)
        fig.generation_seconds = t1 - t0
        fig.judge_seconds = t2 - t1
        fig.generation_output_tokens = sum(r.usage.completion_tokens or r.events for r in gen)
        if gen and fig.generation_seconds > 0:
            fig.gen_tok_s = fig.generation_output_tokens / fig.generation_seconds
            fig.mean_ending_tokens = fig.generation_output_tokens / (len(gen) * cfg.endings)
        if judge and fig.judge_seconds > 0:
            fig.judge_req_s = len(judge) / fig.judge_seconds
        for lane, rs in results.items():
            fig.ttft[lane] = _percentiles([r.ttft for r in rs if r.ttft is not None])
            fig.latency[lane] = _percentiles([r.seconds for r in rs])
            prompt = sum(r.usage.prompt_tokens for r in rs)
            fig.cached_token_rate[lane] = sum(r.usage.cached_tokens for r in rs) / prompt if prompt else None
        for url, roles in self.urls.items():
            sf = ServerFigures(roles=roles, requests=len(by_url[url]),
                               output_tokens=sum(r.usage.completion_tokens or r.events for r in by_url[url]))
            b, a = before[url], after[url]
            if a is not None and b is not None:
                hits = [counter(m, PREFIX_CACHE_HITS) for m in (b, a)]
                queries = [counter(m, PREFIX_CACHE_QUERIES) for m in (b, a)]
                if None not in hits and None not in queries:
                    sf.metrics_available = True
                    sf.prefix_cache_hits = hits[1] - hits[0]
                    sf.prefix_cache_queries = queries[1] - queries[0]
                    if sf.prefix_cache_queries > 0:
                        sf.prefix_cache_hit_rate = sf.prefix_cache_hits / sf.prefix_cache_queries
            fig.servers[url] = sf
        return fig


async def bench_async(cfg: ScoreConfig, corpus_path: str | Path, opts: BenchOptions = BenchOptions()) -> BenchFigures:
    """Run the workload against the servers of `cfg`; see the module docstring."""
    if opts.positions < 1:
        raise ConfigError(f"--positions: expected an integer >= 1, got {opts.positions}")
    # The bench story is any story: the word filter of a corpus run does not apply.
    corpus = read_corpus(corpus_path, 0, 10**9)
    if not corpus.stories:
        raise corpus.errors[0] if corpus.errors else InputError(str(corpus_path), 0, None, "no stories")
    story = corpus.stories[0]
    corpus.stories = [story]
    store = Store(cfg.cache) if cfg.cache else None  # token counts only; None: a throw-away one
    tmp = None
    if store is None:
        import tempfile

        tmp = tempfile.TemporaryDirectory(prefix="tension-bench-")
        store = Store(Path(tmp.name) / "tokens.lmdb")
    try:
        async with Client(api_key=cfg.resolved_api_key(), timeouts=Timeouts(request=cfg.timeout)) as client:
            run = _Run(cfg, corpus, store, client, Path("."), Progress(enabled=False, stories=1))
            run.committer = _Committer(store, None)
            run.setup_tokenizer()
            await run.resolve_models()
            async with Scheduler(run.gen_router.tokenize_lanes() or {"tokenize": cfg.tokenize_concurrency}) as sched:
                run.sched = sched
                all_ps = await run.positions(0, story)
            run.committer.close()
            if not all_ps:
                raise InputError(str(corpus_path), 0, None,
                                 f"story {story.id!r} has no position to bench ({run.no_positions.get(story.id)})")
            rng = random.Random(opts.seed)
            chosen = sorted(rng.sample(all_ps, min(opts.positions, len(all_ps))), key=lambda p: p.k)
            b = _Bench(run, client, opts, chosen)
            plan = [("baseline: story order, warm-up on", "story", True)]
            if opts.variants:
                plan += [("story order, warm-up off", "story", False), ("shuffled, warm-up on", "shuffled", True)]
            runs = []
            for i, (name, order, warm) in enumerate(plan):
                with tqdm(total=len(chosen), unit="pos", desc=f"bench run {i + 1}/{len(plan)}",
                          disable=not cfg.progress, dynamic_ncols=True) as b.bar:
                    runs.append(await b.one_run(i, name, order, warm))
    finally:
        store.close()
        if tmp is not None:
            tmp.cleanup()
    base = runs[0]
    per_story = None
    if base.generation_requests and base.judge_requests:
        per_story = (base.generation_seconds + base.judge_seconds) / len(chosen) * len(all_ps)
    fig = BenchFigures(
        created=time.time(), corpus=str(corpus_path), story=story.id, story_positions=len(all_ps),
        positions_benched=[p.k for p in chosen], base_url=",".join(run.gen_router.urls),
        judge_base_url=",".join(run.judge_router.urls), model=run.gen_model, judge_model=run.judge_model, endings=cfg.endings,
        max_tokens=cfg.max_tokens, gen_concurrency=cfg.gen_concurrency, judge_concurrency=cfg.judge_concurrency,
        seed=opts.seed, gen_tok_s=base.gen_tok_s, judge_req_s=base.judge_req_s,
        mean_ending_tokens=base.mean_ending_tokens, seconds_per_story=per_story, gpu_hour_usd=opts.gpu_hour_usd,
        failed=sum(r.failed for r in runs), runs=runs)
    if per_story is not None and opts.gpu_hour_usd is not None:
        fig.usd_per_story = per_story / 3600 * opts.gpu_hour_usd
        fig.usd_per_100_stories = 100 * fig.usd_per_story
    return fig


def bench(cfg: ScoreConfig, corpus_path: str | Path, opts: BenchOptions = BenchOptions()) -> BenchFigures:
    """Blocking form of `bench_async`."""
    return asyncio.run(bench_async(cfg, corpus_path, opts))


_encoder = msgspec.json.Encoder()


def save_figures(path: str | Path, fig: BenchFigures) -> None:
    atomic_write(path, msgspec.json.format(_encoder.encode(fig), indent=2) + b"\n")


def load_figures(path: str | Path) -> BenchFigures:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"--bench {path}: cannot read it: {e.strerror or e}") from e
    try:
        return msgspec.json.decode(data, type=BenchFigures)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ConfigError(f"--bench {path}: not a file written by `tension-run bench --save`: {e}") from e


def _ms(p: Percentiles) -> str:
    if not p.count:
        return "–"
    return f"{p.p50 * 1e3:,.0f} / {p.p90 * 1e3:,.0f} / {p.p99 * 1e3:,.0f}"


def _rate(x: float | None, fmt: str = "{:.1%}") -> str:
    return "–" if x is None else fmt.format(x)


def format_bench(f: BenchFigures) -> str:
    """The report `tension-run bench` prints: configuration, then one column per run."""
    def row(label: str, values: list[str]) -> str:
        return f"{label:<34}" + "".join(f"{v:>26}" for v in values)

    lines = [
        "=" * 60,
        f"bench: {f.model} at {f.base_url}; judge {f.judge_model} at {f.judge_base_url}",
        f"story {f.story!r} of {f.corpus}: positions k = {f.positions_benched} (the story has {f.story_positions}); "
        f"n = {f.endings}, max_tokens = {f.max_tokens}; concurrency {f.gen_concurrency} / "
        f"{f.judge_concurrency}; seed {f.seed}",
        "=" * 60,
        row("", [r.name.split(":")[0] if ":" in r.name else r.name for r in f.runs]),
        row("order / judge warm-up", [f"{r.order} / {'on' if r.warm_judge else 'off'}" for r in f.runs]),
        row("generation requests / s", [f"{r.generation_requests} / {r.generation_seconds:.2f}" for r in f.runs]),
        row("generation output tok/s", [_rate(r.gen_tok_s, "{:,.1f}") for r in f.runs]),
        row("mean tokens per ending", [_rate(r.mean_ending_tokens, "{:.1f}") for r in f.runs]),
        row("judge requests / s", [f"{r.judge_requests} / {r.judge_seconds:.2f}" for r in f.runs]),
        row("judge req/s", [_rate(r.judge_req_s, "{:,.2f}") for r in f.runs]),
        row("TTFT gen p50/p90/p99 (ms)", [_ms(r.ttft.get("generation", Percentiles())) for r in f.runs]),
        row("TTFT judge p50/p90/p99 (ms)", [_ms(r.ttft.get("judge", Percentiles())) for r in f.runs]),
        row("latency gen p50/p90/p99 (ms)", [_ms(r.latency.get("generation", Percentiles())) for r in f.runs]),
        row("latency judge p50/p90/p99 (ms)", [_ms(r.latency.get("judge", Percentiles())) for r in f.runs]),
        row("cached_tokens share gen / judge", [
            f"{_rate(r.cached_token_rate.get('generation'))} / {_rate(r.cached_token_rate.get('judge'))}"
            for r in f.runs]),
    ]
    urls = list(f.runs[0].servers) if f.runs else []
    for url in urls:
        if len(urls) > 1:
            lines.append(row(f"requests / output tok, {'+'.join(f.runs[0].servers[url].roles)}",
                             [f"{r.servers[url].requests} / {r.servers[url].output_tokens}" for r in f.runs]))
        lines.append(row(f"prefix-cache hits, {'+'.join(f.runs[0].servers[url].roles)}",
                         [_rate(r.servers[url].prefix_cache_hit_rate) if r.servers[url].metrics_available
                          else "no /metrics" for r in f.runs]))
        lines.append(f"    ({url}: Δ vllm:prefix_cache_hits / Δ vllm:prefix_cache_queries)")
    lines.append(row("failed requests", [str(r.failed) for r in f.runs]))
    for r in f.runs:
        for e in r.errors:
            lines.append(f"  error ({r.name}): {e}")
    if f.seconds_per_story is not None:
        lines.append(f"seconds per story ({f.story_positions} positions, baseline): {f.seconds_per_story:,.1f}")
    if f.usd_per_story is not None:
        lines.append(f"cost at ${f.gpu_hour_usd:g}/GPU-hour: ${f.usd_per_story:.4f} per story, "
                     f"${f.usd_per_100_stories:.2f} per 100 stories "
                     "(= seconds per story / 3600 × price; one GPU serving both models)")
    return "\n".join(lines)
