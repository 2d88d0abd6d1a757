"""`tension-run estimate`: what scoring a corpus will cost, before any LLM call.

The positions are chosen by the score pipeline's own code (`PositionFinder`: the
same corpus reading, word filter, splitter, token counter, pct filter and context
check), and the requests are built by its own `ScoreRequests`, so the request
counts and the cache look-ups are those `score` would make. Token counts come
from the configured counter (``--tokenizer``: the server's ``/tokenize``, a
tokenizer.json, or whitespace words).

Prompt tokens, per docs/cost.md (T(x) = tokens of text x; O = T(ending system) +
T(ending instruction); P = prefix tokens; a, c = anchor and continuation tokens;
E = tokens per ending; n = endings per position):

    generation, as sent      Σ_pos (O + P)
    generation, computed     O + Σ_story max_pos P          (a story's prompts share O + the growing prefix)
    judge, as sent           Σ_pos n · (H + 2a + c + M + E + U)
    judge, computed          H + Σ_pos [(2a + c + M) + n · (E + U)]
                             (H = judge system + header, shared by every judge prompt;
                              M = text between continuation and predicted ending;
                              U = text after the ending)

The anchor and continuation are counted at the story's own tokens-per-word ratio
(exact for ``--tokenizer words``), so nothing beyond what `score` tokenizes is sent
to ``/tokenize``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from tension.core.config import ScoreConfig
from tension.core.errors import StatusError
from tension.core.inputs.corpus import Corpus, read_corpus
from tension.core.pipelines.choice_limit import ChoiceLimit, choice_limit
from tension.core.pipelines.estimate_adaptive import AdaptiveCost, CachedRounds
from tension.core.pipelines.estimate_precision import PrecisionCost
from tension.core.pipelines.estimate_text import format_estimate
from tension.core.pipelines.ideal import Tally, TokenTotals, constants, template_pieces
from tension.core.pipelines.prefix.predict import CacheModelOptions, PrefixPrediction, predict
from tension.core.pipelines.score.lookup import lookup, lookup_rounds
from tension.core.pipelines.score.positions import Counter, Position, PositionFinder, local_counter
from tension.core.pipelines.score.requests import ScoreRequests, resolve_models, score_routers
from tension.core.pipelines.throughput import Throughput
from tension.core.run.lifecycle import Run, open_run
from tension.core.run.progress import Progress
from tension.core.run.reads import CacheReads
from tension.core.run.record import RunHeader

__all__ = ["Throughput", "TokenTotals", "Estimate", "run_estimate", "format_estimate",
           "COST_FORMULA", "CacheModelOptions", "TokensCost", "ChoiceLimit"]

COST_FORMULA = ("GPU-hours = (generation requests to send × n × E / gen_tok_s + "
                "judge requests to send / judge_req_s) / 3600;  cost = GPU-hours × gpu_hour_usd")


class TokensCost(msgspec.Struct, kw_only=True):
    """What the requests still to send cost where tokens are billed (a hosted API):
    prompt tokens as sent (a prefix cache's discount is the provider's, not counted),
    generated tokens as E per ending and the judge's verdict tokens at their
    max_tokens (an upper bound). A server that takes n in chunks is sent a
    generation prompt once per chunk: counted so where its limit is known
    (`ChoiceLimit`), else one per request, a lower bound there (`chunks_known`
    False; docs/cost.md)."""

    input_tokens: int
    output_tokens: int
    input_usd_per_mtok: float | None
    output_usd_per_mtok: float | None
    usd: float  # the priced part: a price not given counts 0 and is named in the text
    chunks_known: bool = True  # False: the generation servers' n limit is not known (a lower bound)


class Estimate(msgspec.Struct, kw_only=True):
    corpus: str
    tokenizer: str
    model: str | None
    judge_model: str | None
    stories_kept: int
    stories_skipped: int
    input_errors: list[str]
    stories_failed: list[str]  # the server refused to count their tokens (/tokenize)
    stories_without_positions: int
    positions_too_long: int
    positions: int
    endings_per_position: int
    generation_requests: int
    judge_requests: int  # upper bound: one per ending (empty endings are not judged)
    prompt_tokens: dict[str, TokenTotals]  # "generation", "judge"
    ending_tokens: float  # E used for the judge prompts and the generation time
    output_tokens_max: dict[str, int]  # "generation": n × max_tokens per position; "judge": verdicts
    cache_checked: bool  # False when the model ids are unknown (no --model and no server asked)
    generation_cached: int = 0
    judge_checkable: int = 0  # judge requests whose endings are cached (so their keys are known)
    judge_cached: int = 0
    generation_to_send: int = 0
    judge_to_send: int = 0
    choices: ChoiceLimit | None = None  # HTTP requests of the generation requests (None: not worked out)
    throughput: Throughput | None = None
    gpu_hours: dict[str, float] | None = None  # "generation", "judge", ("prefill", "prefill_ideal"), "total"
    usd: float | None = None
    tokens_usd: TokensCost | None = None  # --input/--output-usd-per-mtok: a hosted API's bill
    # the block-level model of the servers' prefix caches (--block-size/--kv-blocks, --gpu-profile)
    prefix_cache: PrefixPrediction | None = None
    formula: str = COST_FORMULA
    seconds: float = 0.0
    run: RunHeader | None = None  # the run record header every verb shares (core/run/record.py)
    adaptive: AdaptiveCost | None = None  # --target-half-width: its cost range (estimate_adaptive.py)
    adaptive_cached: CachedRounds | None = None  # --target-half-width: its rounds the cache holds
    precision: PrecisionCost | None = None  # --pilot: the endings the headline statistics need (issue 37)
    precision_note: str | None = None  # --pilot: why they could not be had


def prefix_counter(cfg: ScoreConfig) -> Counter | None:
    """The local counter of --tokenizer PATH, counting a story's prefixes from one
    encoding of the whole story: the prefix s[0:k] is the first len(prefix)
    characters of the story text, and its token count is the number of the story's
    tokens that end inside it. Equal to encoding each prefix alone whenever no
    token spans a sentence boundary — BPE and SentencePiece pre-tokenizers split at
    the space between sentences — and it turns the O(words²) of counting every
    prefix into one pass per story (250 s → seconds on 205 stories). Texts that are
    not prefixes of the first are encoded each alone; other counters as they are."""
    each = local_counter(cfg)
    if each is None or cfg.tokenizer == "words":
        return each
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(cfg.tokenizer)

    def count(texts: list[str]) -> list[int]:
        if len(texts) < 2 or not all(texts[0].startswith(t) for t in texts[1:]):
            return each(texts)
        ends = np.fromiter((end for _, end in tok.encode(texts[0], add_special_tokens=False).offsets),
                           dtype=np.int64)
        lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
        return np.searchsorted(ends, lengths, side="right").tolist()

    return count


class _Estimating:
    """The run's `Pipeline`: the models it asked about, for the record header."""

    def __init__(self, reqs: ScoreRequests):
        self.reqs = reqs

    def models(self) -> dict[str, str | None]:
        return {"generation": self.reqs.gen_model or None, "judge": self.reqs.judge_model or None}

    def outcome(self) -> tuple[int, int]:
        return 1, 0

    def body(self) -> dict[str, Any]:
        return {}


async def run_estimate(cfg: ScoreConfig, corpus_path: str | Path, throughput: Throughput | None = None,
                         cache_model: CacheModelOptions | None = None) -> Estimate:
    """Counts, tokens, cache coverage and (given a throughput) GPU-hours and money
    of scoring `corpus_path` with `cfg`. Sends no chat request; with
    ``tokenizer = "server"`` it asks the generation server's ``/tokenize`` (the
    counts are cached, so the score run after it does not ask again)."""
    t0 = time.perf_counter()
    count = prefix_counter(cfg)  # a bad --tokenizer is a usage error
    corpus = read_corpus(corpus_path, cfg.min_words, cfg.max_words)
    # Records only (the token counts it asks for are kept), no record file; an
    # estimate is not the cache's "last run".
    run = open_run(cfg, "estimate", progress=Progress(enabled=cfg.progress, stories=len(corpus.stories)),
                   roles=("tokenize", "models"), last_run=False)
    async with run:
        gen, judge = score_routers(cfg, run.client)
        finder = PositionFinder(cfg, run.llm, gen, count)
        # Model ids name the cache keys. A local counter needs no server: without
        # --model the server is not asked, and the cache is not checked.
        cache_checked = bool(cfg.model) or count is None
        reqs = (await resolve_models(cfg, gen, judge, run.llm.counts.requests, judge_needed=False) if cache_checked
                else ScoreRequests(cfg, cfg.model or "", cfg.judge_model or ""))
        run.pipeline = _Estimating(reqs)
        by_story: dict[int, list[Position]] = {}
        failed: list[str] = []
        const: dict[str, int] = {}
        await run.work(_count_positions(run, finder, corpus, by_story, failed, const), stop=True)
        run.progress.close()
        # a judge server an earlier run found refusing --judge-constraint choice: its verdicts are the
        # unconstrained requests' (core/pipelines/unconstrained.py), looked up so
        reqs.constraint.known(judge.every_server())
        thr = throughput or Throughput()
        est = _estimate(cfg, corpus, str(corpus_path), finder, reqs, by_story, const, thr,
                        failed=failed, cache_checked=cache_checked, cache_model=cache_model)
        if cache_checked:
            _coverage(est, run.llm.reads, reqs, finder, by_story)
        else:
            est.generation_to_send = est.generation_requests
            est.judge_to_send = est.judge_requests
        est.choices = choice_limit(gen, cfg.endings, est.generation_requests, est.generation_to_send,
                                   asked=cache_checked)
        _cost(est, thr, cfg, cache_model)
    est.run = run.header()
    est.seconds = time.perf_counter() - t0
    return est


def _estimate(cfg: ScoreConfig, corpus: Corpus, corpus_path: str, finder: PositionFinder, reqs: ScoreRequests,
              by_story: dict[int, list[Position]], const: dict[str, int], thr: Throughput, *,
              failed: list[str], cache_checked: bool, cache_model: CacheModelOptions | None = None) -> Estimate:
    """The counts and token totals of the positions found (and, asked for, the
    prefix-cache model's prediction over them)."""
    E = float(thr.ending_tokens if thr.ending_tokens is not None else cfg.max_tokens)
    if thr.source == "flags" and thr.ending_tokens is not None and not 1 <= E <= cfg.max_tokens:
        thr.warnings.append(f"--ending-tokens {E:g}: an ending is at least 1 token and at most max_tokens "
                            f"({cfg.max_tokens}); the figures below that use E are off by as much")
    modelled = cache_model is not None and cache_model.wanted
    tally = Tally(cfg, const, E, keep=modelled)
    for si in sorted(by_story):
        tally.story(finder.sentences[si], corpus.stories[si].words, by_story[si])
    totals = tally.totals()
    model = None
    if modelled and cache_model is not None and tally.kept is not None:
        model = predict(cfg, cache_model, tally.kept, const, E,
                        {role: t.computed for role, t in totals.items()})
    return Estimate(prefix_cache=model,
        corpus=corpus_path, tokenizer=cfg.tokenizer, model=reqs.gen_model or None,
        judge_model=reqs.judge_model or None, stories_kept=len(corpus.stories),
        stories_skipped=len(corpus.skipped), input_errors=[str(e) for e in corpus.errors],
        stories_failed=failed, stories_without_positions=len(finder.no_positions),
        positions_too_long=sum(finder.too_long.values()),
        positions=tally.positions, endings_per_position=cfg.endings, generation_requests=tally.positions,
        judge_requests=tally.positions * cfg.endings, prompt_tokens=totals, ending_tokens=E,
        output_tokens_max={"generation": tally.positions * cfg.endings * cfg.max_tokens,
                           "judge": tally.positions * cfg.endings * cfg.judge_max_tokens},
        cache_checked=cache_checked)


async def _count_positions(run: Run, finder: PositionFinder, corpus: Corpus, by_story: dict[int, list[Position]],
                           failed: list[str], const: dict[str, int]) -> None:
    """The score pipeline's positions of every story, into `by_story` (token counts
    through the tokenize lane), and into `const` the token counts of the prompts'
    fixed texts."""
    cfg, progress = finder.cfg, run.progress
    lanes = finder.router.tokenize_lanes() or {"tokenize": cfg.tokenize_concurrency}
    async with run.serving(finder.router, lanes=lanes, route=False) as sched:
        const.update(constants(await finder.token_counts(template_pieces(), "")))

        async def one(si: int, _place: int) -> None:
            try:
                by_story[si] = await finder.positions(si, corpus.stories[si])
            except StatusError as e:  # the server refused to count this story: it alone is left out
                failed.append(f"story {corpus.stories[si].id!r}: {e}")
                return
            progress.item_started(len(by_story[si]))
            for _ in by_story[si]:
                progress.unit_done()

        await sched.feed(range(len(corpus.stories)), one, max(1, cfg.tokenize_concurrency // 4))


def _coverage(est: Estimate, reads: CacheReads, reqs: ScoreRequests, finder: PositionFinder,
              by_story: dict[int, list[Position]]) -> None:
    """Exact generation keys looked up in the LMDB; judge keys where the endings
    are there to build them from (score/lookup.py, the walk the judge makes)."""
    n = reqs.cfg.endings
    gen_cached = judge_checkable = judge_cached = judge_unknown = 0
    for si in sorted(by_story):
        for p in by_story[si]:
            cached = lookup(reads, reqs, finder.sentences[si], p.k)
            if cached.answers is None:
                judge_unknown += n
                continue
            gen_cached += 1
            judge_checkable += cached.asked
            judge_cached += cached.answers.found
    est.generation_cached = gen_cached
    est.judge_checkable = judge_checkable
    est.judge_cached = judge_cached
    est.generation_to_send = est.generation_requests - gen_cached
    # Cached endings: exactly their non-empty ones; the others: one per ending.
    est.judge_to_send = (judge_checkable - judge_cached) + judge_unknown
    est.judge_requests = judge_checkable + judge_unknown
    if reqs.cfg.adaptive:
        est.adaptive_cached = _cached_rounds(reads, reqs, finder, by_story)


def _cached_rounds(reads: CacheReads, reqs: ScoreRequests, finder: PositionFinder,
                   by_story: dict[int, list[Position]]) -> CachedRounds:
    """The target's rounds the cache holds, walked as the run drew them (the rows
    above are of --endings, whose requests an adaptive run never sends)."""
    cfg = reqs.cfg
    assert cfg.target_half_width is not None
    out = CachedRounds()
    for si in sorted(by_story):
        for p in by_story[si]:
            out.positions += 1
            cached = lookup_rounds(reads, reqs, finder.sentences[si], p.k)
            if cached.endings is None or cached.answers is None:
                out.to_send_max += cfg.max_endings
                continue
            n = len(cached.endings.texts)
            out.rounds += len(cached.rounds)
            out.endings += n
            if cached.complete:  # every round judged and the rule held at the last (the run's walk)
                out.complete += 1
            else:
                out.to_send_max += cfg.max_endings - n
    return out


def _cost(est: Estimate, thr: Throughput, cfg: ScoreConfig, cache_model: CacheModelOptions | None = None) -> None:
    est.throughput = thr
    est.tokens_usd = _tokens_cost(est, cfg)
    if thr.gen_tok_s is None or thr.judge_req_s is None:
        return
    gen_h = est.generation_to_send * cfg.endings * est.ending_tokens / thr.gen_tok_s / 3600
    judge_h = est.judge_to_send / thr.judge_req_s / 3600
    est.gpu_hours = {"generation": gen_h, "judge": judge_h, "total": gen_h + judge_h}
    pc, rate = est.prefix_cache, cache_model.prefill_tok_s if cache_model is not None else None
    if pc is not None and rate is not None:
        # the prompt tokens the servers compute, at the prefill rate: the model's and the ideal's
        est.gpu_hours["prefill"] = pc.computed / rate / 3600
        est.gpu_hours["prefill_ideal"] = pc.ideal_computed / rate / 3600
        est.gpu_hours["total"] += est.gpu_hours["prefill"]
    if thr.gpu_hour_usd is not None:
        est.usd = est.gpu_hours["total"] * thr.gpu_hour_usd


def _tokens_cost(est: Estimate, cfg: ScoreConfig) -> TokensCost | None:
    """The hosted API's bill for what is still to send, when a token price is given."""
    if cfg.input_usd_per_mtok is None and cfg.output_usd_per_mtok is None:
        return None

    def share(to_send: int, of: int) -> float:  # the part of the role's prompts still to send
        return to_send / of if of else 0.0

    pt = est.prompt_tokens
    # a generation prompt is sent once per chunk of what the server takes (`ChoiceLimit`)
    chunks = est.choices.per_position if est.choices is not None and est.choices.per_position else 1
    inp = round(pt["generation"].sent * chunks * share(est.generation_to_send, est.generation_requests)
                + pt["judge"].sent * share(est.judge_to_send, est.judge_requests))
    verdict = est.output_tokens_max["judge"] / est.judge_requests if est.judge_requests else 0.0
    out = round(est.generation_to_send * est.endings_per_position * est.ending_tokens + est.judge_to_send * verdict)
    usd = (inp * (cfg.input_usd_per_mtok or 0.0) + out * (cfg.output_usd_per_mtok or 0.0)) / 1e6
    return TokensCost(input_tokens=inp, output_tokens=out, input_usd_per_mtok=cfg.input_usd_per_mtok,
                      output_usd_per_mtok=cfg.output_usd_per_mtok, usd=usd,
                      chunks_known=est.choices is not None and est.choices.known)

