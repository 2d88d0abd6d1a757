"""`tension-run score`: the 100-Endings pipeline (docs/metrics.md 1.1–1.4).

    corpus ─► stories ─► sentences ─► positions (k, pct, anchor)        positions.py
       ─► generation request (n endings)   ◄─► LMDB endings              requests.py
       ─► judge requests (one per ending)  ◄─► LMDB verdicts, positions  judge.py
       ─► no-rate(k) ─► curve ─► kernels ─► story and group statistics   outputs.py

in the order feed.py opens positions, inside the run lifecycle of core/run/.
Every LLM answer is looked up in the cache before it is requested and committed
to it as soon as it is complete, so a rerun costs nothing, a changed judge only
costs verdicts, and an interrupted run continues where it stopped. Position
results stream to ``positions.partial.jsonl`` as their records are committed; the
final ``positions.jsonl`` is written in corpus order when the run completes, so
it is the same bytes however the run was interrupted and resumed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec

from tension.core.config import ScoreConfig
from tension.core.errors import StatusError, exit_status
from tension.core.inputs.corpus import Corpus, Skipped, read_corpus
from tension.core.llm.replicas import in_shard
from tension.core.llm.router import routing
from tension.core.pipelines.score.feed import PositionFeed, max_open
from tension.core.pipelines.score.judge import Judge
from tension.core.pipelines.score.outputs import (PositionResult, TextsSpool, position_line, position_result,
                                                  write_outputs)
from tension.core.pipelines.score.positions import Counter, Position, PositionFinder, local_counter
from tension.core.pipelines.score.requests import ScoreRequests, resolve_models, score_routers
from tension.core.pipelines.score.watch import AnswerWatch
from tension.core.reports.answer_warnings import AnswerWarning
from tension.core.run.lifecycle import LOCK_NAME, Run, client_for, open_store, out_lock, prepare_out_dir, run_blocking
from tension.core.run.progress import Progress
from tension.core.run.record import Failure, Invocations, earlier_invocations

__all__ = ["Position", "PositionResult", "Failure", "RunSummary", "Scoring", "score", "score_async"]

ROLES = ("generation", "judge", "tokenize", "models")  # the run record's request counts, in this order


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
    exit_status: int = 0  # core/run/record.exit_status: did the run produce what was asked
    # role -> per-replica figures (core/llm/router.py ReplicaStats), and what happened
    # to replicas during the run ("… taken out: why", "… re-admitted")
    replicas: dict[str, list[dict[str, Any]]] = {}
    replica_events: list[str] = []
    warnings: list[AnswerWarning] = []  # degenerate answers (core/pipelines/score/watch.py)


class Scoring:
    """The positions of one score run: found, their endings and verdicts asked
    through the run's cached call, tallied, and written out."""

    def __init__(self, cfg: ScoreConfig, corpus: Corpus, run: Run, count: Counter | None):
        self.cfg = cfg
        self.corpus = corpus
        self.run = run
        self.replica_events: list[str] = []
        self.gen_router, self.judge_router = score_routers(cfg, run.client, self.replica_events.append)
        self.reqs = ScoreRequests(cfg, cfg.model or "", cfg.judge_model or "")  # model ids resolved in `score`
        self.finder = PositionFinder(cfg, run, self.gen_router, count)
        self.judge = Judge(cfg, run, self.judge_router)
        self.watch = AnswerWatch(cfg)
        self.results: dict[tuple[int, int], PositionResult] = {}  # (story index, k) ->
        self.texts = TextsSpool(run.partial.parent)  # with --save-texts: (story index, k) -> endings and verdicts
        self.failed: dict[int, Failure] = {}  # story index ->
        self.earlier = Invocations()  # the invocations before this one into the same --out (resumes)
        self.timing: dict[str, Any] | None = None  # fixed once the outputs are written: one wall time

    def positions_written(self) -> int:
        """Positions of the stories that did not fail: the lines of positions.jsonl."""
        return sum(1 for si, _k in self.results if si not in self.failed)

    def exit_status(self) -> int:
        """core/run/record.exit_status of this run: stories scored, bad records and failures."""
        produced = len(self.corpus.stories) - len(self.failed)
        return exit_status(self.run.status, produced, len(self.corpus.errors) + len(self.failed))

    async def score(self) -> None:
        cfg, run = self.cfg, self.run
        gen, judge = self.gen_router, self.judge_router
        self.reqs = await resolve_models(cfg, gen, judge, run.requests)
        routers = [r for r in (gen, judge) if not r.single]
        # One lane per role ("generation", "judge", "tokenize"), `limit` per server.
        lanes = {**gen.lanes(), **judge.lanes(), **gen.tokenize_lanes()}
        feed = PositionFeed(self.finder, self.corpus.stories, run.progress, self.failed, spread=len(gen.urls))
        async with routing(gen, judge):
            for r in routers:
                await r.scrape_metrics("start")
            if routers:
                run.progress.extra = lambda: " ".join(r.postfix() for r in (gen, judge))
            async with run.scheduler(lanes) as sched:
                for r in routers:
                    sched.service(r.watch())
                await feed.run(sched, self.position, max_open(cfg, len(gen.urls), len(judge.urls)))
            for r in routers:
                await r.scrape_metrics("end")

    async def position(self, pos: Position) -> None:
        if pos.story in self.failed:
            return
        run = self.run
        story = self.corpus.stories[pos.story]
        sents = self.finder.sentences[pos.story]
        try:
            rec = await run.chat.one("endings", self.reqs.endings(sents, pos.k),
                                     lambda r: self.gen_router.chat(run.sched, story.id, r), role="generation")
            head, tail = self.reqs.judge_parts(sents, pos.k)
            # A position's judge prompts share a prefix: one replica for all of them.
            answers = await self.judge.verdicts(self.reqs, f"{story.id}\x00{pos.k}", head, tail, rec.texts)
        except StatusError as e:
            # The request itself was refused (e.g. a prompt longer than the
            # model's context): this story fails, the others go on.
            self.failed.setdefault(pos.story, Failure(id=story.id, stage=f"position {pos.k}", error=str(e)))
            run.progress.unit_done()
            return
        self.watch.position(story.id, rec, answers, self.reqs.judge_model)  # may stop the run early
        res = position_result(story, pos, rec.texts, answers)
        self.results[(pos.story, pos.k)] = res
        if self.cfg.save_texts:
            self.texts.add((pos.story, pos.k), {"id": story.id, "k": pos.k, "endings": rec.texts, "verdicts": answers})
        run.committer.lines.append(position_line(res))
        run.progress.unit_done()

    def write_outputs(self, out: Path) -> None:
        try:
            write_outputs(out, self.cfg, self.corpus.stories, self.results, self.texts, self.failed)
        finally:
            self.texts.close()

    def replica_figures(self) -> dict[str, list[dict[str, Any]]]:
        """Per-replica figures of each role (requests, tokens/s, failures, prefix-cache hit rate)."""
        return {"generation": self.gen_router.figures(), "judge": self.judge_router.figures()}


# -- entry points ---------------------------------------------------------------------

async def score_async(cfg: ScoreConfig, corpus_path: str | Path, out_dir: str | Path) -> RunSummary:
    """Score a corpus; see the module docstring. Raises TensionError for problems
    that stop the run before it starts; problems during the run end it with
    status "failed" (or "interrupted" on cancellation), everything completed kept."""
    count = local_counter(cfg)  # a bad --tokenizer is a usage error, found before any work
    out = prepare_out_dir(out_dir)
    with out_lock(out, out / LOCK_NAME, "score", "folder"):
        corpus = read_corpus(corpus_path, cfg.min_words, cfg.max_words)
        if (shard := cfg.shard_spec()) is not None:  # --shard I/N: this process's share of the stories
            corpus.stories = [st for st in corpus.stories if in_shard(st.id, *shard)]
        run = Run(store=open_store(cfg.cache, cfg.cache_max_gb), client=client_for(cfg, cfg.resolved_api_key()),
                  progress=Progress(enabled=cfg.progress, stories=len(corpus.stories)),
                  partial=out / "positions.partial.jsonl", record_path=out / "run.json",
                  record=lambda run: _record(scoring, run, corpus_path), roles=ROLES)
        scoring = Scoring(cfg, corpus, run, count)
        scoring.earlier = earlier_invocations(out / "run.json")
        async with run:
            await run.work(scoring.score())
            if run.status == "complete":
                t0 = time.perf_counter()
                scoring.write_outputs(out)
                # report.md and run.json state the same wall time; writing the outputs is
                # timed on its own (it must stay flat per position as a corpus grows)
                scoring.timing = {**run.timing(), "outputs_seconds": round(time.perf_counter() - t0, 3)}
                if cfg.report:
                    run.write_record()  # the report reads it
                    from tension.core.reports.report import report
                    report(out, gpu_hour_usd=cfg.gpu_hour_usd)
    return _summary(scoring, run, out)


def _summary(scoring: Scoring, run: Run, out: Path) -> RunSummary:
    corpus, finder = scoring.corpus, scoring.finder
    return RunSummary(
        status=run.status, out=str(out), stories=len(corpus.stories), positions=scoring.positions_written(),
        failures=list(scoring.failed.values()), input_errors=[str(e) for e in corpus.errors],
        skipped=len(corpus.skipped), skipped_stories=list(corpus.skipped), too_long=dict(finder.too_long),
        no_positions=dict(finder.no_positions), requests=dict(run.requests),
        cache_hits=dict(run.store.counts.hits), error=run.error, exit_status=scoring.exit_status(),
        replicas=scoring.replica_figures(), replica_events=list(scoring.replica_events),
        warnings=scoring.watch.warnings())


def _record(scoring: Scoring, run: Run, corpus_path: str | Path) -> dict[str, Any]:
    """run.json: its keys in this order (tests/test_snapshots.py holds them)."""
    corpus, finder = scoring.corpus, scoring.finder
    timing = scoring.timing or run.timing()
    return {
        "status": run.status,
        "error": run.error,
        "exit_status": scoring.exit_status(),
        "corpus": str(corpus_path),
        **timing,
        "invocations": {"count": scoring.earlier.count + 1,
                        "wall_seconds": round(scoring.earlier.wall_seconds + timing["wall_seconds"], 3)},
        "config": scoring.cfg.public(),
        "models": {"generation": scoring.reqs.gen_model, "judge": scoring.reqs.judge_model},
        "versions": run.versions(),
        "stories": {"kept": len(corpus.stories), "skipped": [msgspec.to_builtins(s) for s in corpus.skipped],
                    "input_errors": [str(e) for e in corpus.errors],
                    "failed": [msgspec.to_builtins(f) for f in scoring.failed.values()]},
        "positions": scoring.positions_written(),
        "positions_skipped_too_long": dict(finder.too_long),
        "stories_without_positions": dict(finder.no_positions),
        "context_len": finder.context_len,
        "requests": dict(run.requests),
        "http": run.http(followups=True),
        "judge_batch": scoring.judge_router.batcher.figures(),
        "usage_this_run": run.usage_this_run(),
        "usage_all_answers": run.usage_all_answers(),
        "cache": run.cache(),
        "lanes": run.lanes(),
        "replicas": scoring.replica_figures(),
        "replica_events": list(scoring.replica_events),
        "warnings": msgspec.to_builtins(scoring.watch.warnings()),
    }


def score(cfg: ScoreConfig, corpus_path: str | Path, out_dir: str | Path) -> RunSummary:
    """Blocking form of ``score_async`` on uvloop (asyncio when uvloop is missing).
    SIGTERM stops the run like Ctrl-C: completed work is committed first."""
    return run_blocking(lambda: score_async(cfg, corpus_path, out_dir))
