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

import os
import shlex
import time
from pathlib import Path
from typing import Any

import msgspec

from tension.core.config import ScoreConfig
from tension.core.errors import ContextLengthError, RunStatus, StatusError, TensionError
from tension.core.inputs.corpus import Corpus, Skipped, read_corpus
from tension.core.inputs.jsonl import FileError
from tension.core.llm.replicas import in_shard
from tension.core.pipelines.ideal import constants, template_pieces
from tension.core.pipelines.score.feed import PositionFeed, max_open
from tension.core.pipelines.score.folder import earlier_run
from tension.core.pipelines.score.judge import Judge, position_tickets
from tension.core.pipelines.score.outputs import (
    PositionResult,
    TextsSpool,
    position_line,
    position_result,
    write_outputs,
)
from tension.core.pipelines.score.positions import Counter, Position, PositionFinder, local_counter
from tension.core.pipelines.score.prompt_tokens import PromptTokens, ServerReadings
from tension.core.pipelines.score.requests import ScoreRequests, resolve_models, score_routers
from tension.core.pipelines.score.rounds import AdaptiveTally, draw
from tension.core.pipelines.score.watch import AnswerWatch
from tension.core.redact import redact_argv
from tension.core.reports.answer_warnings import AnswerWarning
from tension.core.reports.metrics import MetricsResult
from tension.core.run.lifecycle import INVOCATION, Run, open_run, warn
from tension.core.run.out_folder import LOCK_NAME, out_lock, prepare_out_dir
from tension.core.run.progress import Pace, Progress, duration
from tension.core.run.reads import chat_key
from tension.core.run.record import Failure, Invocations, RunRecord
from tension.core.signals import command_line

__all__ = ["NO_POSITIONS", "NO_STORIES", "Position", "PositionResult", "Failure", "RunSummary", "Scoring",
           "run_score"]

NO_POSITIONS = "no position to score"  # opens the error of a corpus that yields none (no result at all)
NO_STORIES = "no story to score"  # opens the error of a run left no story (the word filter, --shard)
ROLES = ("generation", "judge", "tokenize", "models")  # the run record's request counts, in this order


class RunSummary(msgspec.Struct, kw_only=True):
    status: RunStatus
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
    bad_records: int = 0  # input errors of single records (not of the whole file: empty, a JSON array)
    computed: MetricsResult | None = None  # the statistics written (a complete run's): curves, stories, groups
    record: RunRecord | None = None  # run.json as the run wrote it: the typed header, then the body


class Scoring:
    """The positions of one score run: found, their endings and verdicts asked
    through the run's engine, tallied, and written out. It is the run's
    `Pipeline`: its models, outcome and record body."""

    def __init__(self, cfg: ScoreConfig, corpus: Corpus, run: Run, count: Counter | None, corpus_path: str | Path):
        self.cfg = cfg
        self.corpus = corpus
        self.corpus_path = corpus_path
        self.shard = cfg.shard_spec()  # (I, N) of --shard, and the stories before it took its share
        self.before_shard = len(corpus.stories)
        self.run = run
        self.llm = run.llm
        self.replica_events: list[str] = []
        self.gen_router, self.judge_router = score_routers(cfg, run.client, self.replica_events.append)
        self.reqs = ScoreRequests(cfg, cfg.model or "", cfg.judge_model or "")  # model ids resolved in `score`
        self.finder = PositionFinder(cfg, run.llm, self.gen_router, count)
        self.judge = Judge(cfg, run.llm)
        self.watch = AnswerWatch(cfg, out_folder(run))
        self.watch.judge_holds_constraint = lambda: self.judge_router.server.holds_constraint
        self.watch.judge_constraint = lambda: self.reqs.constraint.used  # after a fallback: none
        self.results: dict[tuple[int, int], PositionResult] = {}  # (story index, k) ->
        self.texts = TextsSpool(out_folder(run))  # with --save-texts: (story index, k) -> endings and verdicts
        self.failed: dict[int, Failure] = {}  # story index ->
        self.prompt_tokens = PromptTokens(cfg)  # what the positions' prompts cost the servers (run.json)
        # one server per role: no router reads its /metrics, so the run does (prompt_tokens.server)
        self.metrics = ServerReadings([r for r in (self.gen_router, self.judge_router) if r.single])
        self.const: dict[str, int] | None = None
        self.earlier = Invocations()  # the invocations before this one into the same --out (resumes)
        self.outputs_seconds: float | None = None
        self.adaptive = AdaptiveTally(cfg)  # with --target-half-width: the endings each position used
        self.computed: MetricsResult | None = None  # the statistics the outputs hold, once written

    async def _template_counts(self) -> dict[str, int] | None:
        """The token counts of the prompts' fixed texts, for the ideal (cached, as every count)."""
        try:
            return constants(await self.finder.token_counts(template_pieces(), ""))
        except StatusError:
            return None

    def positions_written(self) -> int:
        """Positions of the stories that did not fail: the lines of positions.jsonl."""
        return sum(1 for si, _k in self.results if si not in self.failed)

    async def score(self) -> None:
        cfg, run = self.cfg, self.run
        if not self.corpus.stories:
            # nothing to score is a failed run, its record and result saying why, not "complete" with exit 1;
            # so when every record is bad too (an empty or UTF-16 file, a header without `id`): "complete"
            # wrote empty outputs over an earlier run's in --out
            why = f"{len(self.corpus.skipped)} skipped by the word filter"
            if self.corpus.errors:
                why = f"{len(self.corpus.errors)} unreadable, see above; {why}"
            if self.shard is not None:
                why += (f"; shard {self.shard[0]}/{self.shard[1]} holds none of the {self.before_shard} stories it "
                        "kept")
            raise TensionError(f"{NO_STORIES} ({why})")
        gen, judge = self.gen_router, self.judge_router
        self.reqs = await resolve_models(cfg, gen, judge, run.llm.counts.requests, after_check=self.metrics.start)
        feed = PositionFeed(self.finder, self.corpus.stories, run.progress, self.failed, spread=len(gen.urls))
        # One lane per role ("generation", "judge", "tokenize"), `limit` per server.
        async with run.serving(gen, judge) as sched:
            self.const = await self._template_counts()
            await feed.run(sched, self.position, max_open(cfg, len(gen.urls), len(judge.urls)))
        if self.metrics.started:  # the block joined the positions
            await self.metrics.read("end")
        self.watch.check_endings()  # every ending empty: no result (the records are committed)
        if self.corpus.stories and not self.results and not self.failed:
            raise TensionError(self.no_positions_message())

    def no_positions_message(self) -> str:
        """Why a run found no position to score: the anchors, the pct window, or the
        context (L3 of ../shared/reviews/external-servers-2026-12-02.md: every
        position skipped for the context was blamed on the anchors, "()" and all)."""
        cfg, finder = self.cfg, self.finder
        why = [f"story {sid!r}: {w}" for sid, w in list(finder.no_positions.items())[:5]]
        hints = []
        if finder.no_positions:
            hints.append("a position needs a sentence end (. ! ? or its script's own, README \"Languages\") after a "
                         f"sentence of at least --min-anchor-words ({cfg.min_anchor_words}) words, within "
                         "--pct-min..--pct-max of the story")
        if finder.too_long:
            skipped = sum(finder.too_long.values())
            context = f" of {finder.context_len} tokens" if finder.context_len else ""
            why.append(f"{skipped} position{'s' if skipped != 1 else ''} in {len(finder.too_long)} "
                       f"stor{'ies' if len(finder.too_long) != 1 else 'y'} skipped because the prompt and "
                       f"--max-tokens ({cfg.max_tokens}) would not fit the generation model's context{context}")
            hints.append("serve the model with a longer context (vLLM's --max-model-len, llama-server's -c per "
                         "slot, llama-cpp-python's --n_ctx), or score earlier positions, whose prompts are "
                         "shorter (a lower --pct-min)")
        return (f"{NO_POSITIONS} in any of the {len(self.corpus.stories)} stories ({'; '.join(why)}): "
                + "; or ".join(hints) + "; nothing was produced")

    async def position(self, pos: Position, place: int) -> None:
        if pos.story in self.failed:
            return
        run = self.run
        story = self.corpus.stories[pos.story]
        sents = self.finder.sentences[pos.story]
        keys: tuple[str, str] | None = None
        tickets = position_tickets(story.id, pos.k, place)
        try:
            if self.cfg.adaptive:
                # rounds until the stopping rule holds; several records: no one key names them
                drawn = await draw(self.llm, self.judge, self.reqs, tickets, sents, pos.k)
                rec, answers, judge_usage = drawn.endings, drawn.answers, drawn.judge_usage
                self.watch.first_endings(rec)  # a greedy server: stop at its first position
                self.adaptive.add((pos.story, pos.k), len(rec.texts))
            else:
                request = self.reqs.endings(sents, pos.k)
                rec = await self.llm.endings("generation", request, ticket=tickets[0])
                self.watch.first_endings(rec)  # a greedy server: stop before its copies are judged
                # A position's judge prompts share a prefix: one server for all of them.
                endings_key = chat_key(request)
                ask, answers, judge_usage = await self.judge.verdicts(self.reqs, tickets[1], sents, pos.k, rec.texts,
                                                                      endings_key)
                keys = endings_key.hex(), ask.group.hex()
        except ContextLengthError:
            # A prompt the server's context cannot hold (a judge prompt, or a count
            # by words that under-counted): this position is skipped, as those known
            # to be too long before sending are, and the story goes on.
            self.finder.too_long[story.id] = self.finder.too_long.get(story.id, 0) + 1
            run.progress.unit_done()
            return
        except StatusError as e:
            # The request itself was refused otherwise: this story fails, the others go on.
            self.failed.setdefault(pos.story, Failure(id=story.id, stage=f"position {pos.k}", error=str(e)))
            run.progress.unit_done()
            return
        self.watch.position(story.id, rec, answers, self.reqs.judge_model)  # may stop the run early
        self.prompt_tokens.position(pos, rec.usage, judge_usage, len(rec.texts), sum(a is not None for a in answers))
        res = position_result(story, pos, rec.texts, answers)
        if keys is not None:
            res.endings_key, res.judged_key = keys
        self.results[(pos.story, pos.k)] = res
        if self.cfg.save_texts:
            self.texts.add((pos.story, pos.k), {"id": story.id, "k": pos.k, "endings": rec.texts, "verdicts": answers})
        self.llm.output(position_line(res))
        run.progress.unit_done()

    def write_outputs(self, out: Path) -> None:
        t0 = time.perf_counter()
        try:
            self.computed = write_outputs(out, self.cfg, self.corpus.stories, self.results, self.texts, self.failed)
        finally:
            self.texts.close()
        # writing the outputs is timed on its own (it must stay flat per position as a corpus grows)
        self.outputs_seconds = round(time.perf_counter() - t0, 3)

    def replica_figures(self) -> dict[str, list[dict[str, Any]]]:
        """Per-replica figures of each role (requests, tokens/s, failures, prefix-cache hit rate)."""
        return {"generation": self.gen_router.figures(), "judge": self.judge_router.figures()}

    # -- the run's Pipeline ----------------------------------------------------------

    def models(self) -> dict[str, str | None]:
        return {"generation": self.reqs.gen_model, "judge": self.reqs.judge_model}

    def outcome(self) -> tuple[int, int]:
        """Stories scored; bad records and failed stories."""
        return len(self.corpus.stories) - len(self.failed), len(self.corpus.errors) + len(self.failed)

    def body(self) -> dict[str, Any]:
        """run.json after the header: its keys in this order (tests/test_snapshots.py holds them)."""
        cfg, corpus, finder = self.cfg, self.corpus, self.finder
        wall = self.run.wall()
        body: dict[str, Any] = {
            # absolute, so a view or report started in another folder finds it; as typed, for display
            "corpus": os.path.abspath(self.corpus_path),
            "corpus_given": str(self.corpus_path),
            "invocations": {"count": self.earlier.count + 1,
                            "wall_seconds": round(self.earlier.wall_seconds + wall, 3)},
            "stories": {"kept": len(corpus.stories), "skipped": [msgspec.to_builtins(s) for s in corpus.skipped],
                        "input_errors": [str(e) for e in corpus.errors],
                        "languages": dict(sorted(finder.languages.items())),
                        "failed": [msgspec.to_builtins(f) for f in self.failed.values()]},
            "positions": self.positions_written(),
            "positions_skipped_too_long": dict(finder.too_long),
            "stories_without_positions": dict(finder.no_positions),
            "context_len": finder.context_len,
            "outputs_seconds": self.outputs_seconds,
            "judge_batch": self.judge_router.batcher.figures(),
            "replicas": self.replica_figures(),
            "replica_events": list(self.replica_events),
            "warnings": msgspec.to_builtins(self.watch.warnings()),
            "prompt_tokens": self.prompt_tokens.body(self.const, finder.sentences,
                                                     [s.words for s in corpus.stories], self.gen_router,
                                                     self.judge_router, self.metrics),
        }
        if cfg.judge_constraint != "none":  # the asked one, or none where refused (core/pipelines/unconstrained.py)
            body["judge_constraint_used"] = self.reqs.constraint.used
        if cfg.adaptive:  # only then: the default run's record keeps its keys (tests/test_snapshots.py)
            body["adaptive"] = self.adaptive.body({key for key in self.results if key[0] not in self.failed})
        return body


def out_folder(run: Run) -> Path:
    assert run.partial is not None
    return run.partial.parent


# -- entry points ---------------------------------------------------------------------

async def run_score(cfg: ScoreConfig, corpus_path: str | Path, out_dir: str | Path) -> RunSummary:
    """Score a corpus; see the module docstring. Raises TensionError for problems
    that stop the run before it starts; problems during the run end it with
    status "failed" (or "interrupted" on cancellation), everything completed kept.
    Its one caller is the API (``tension.score``, ``run_score``), and the CLI
    through it; a test's in-process server is reached by its base URL
    (core/llm/transport.py `served_in_process`)."""
    count = local_counter(cfg)  # a bad --tokenizer is a usage error, found before any work
    out = prepare_out_dir(out_dir)
    with out_lock(out, out / LOCK_NAME, "score", "folder"):
        corpus = read_corpus(corpus_path, cfg.min_words, cfg.max_words)
        kept = len(corpus.stories)
        if (shard := cfg.shard_spec()) is not None:  # --shard I/N: this process's share of the stories
            corpus.stories = [st for st in corpus.stories if in_shard(st.id, *shard)]
        progress = Progress(enabled=cfg.progress, stories=len(corpus.stories), say=lambda m: warn(m, "note"))
        if not cfg.adaptive:  # a position's answers: its endings and their verdicts
            progress.pace = Pace(per_unit=2 * cfg.endings, long_run=cfg.long_run_seconds,
                                 advice=lambda rate, units: fewer_endings(cfg, rate, units))
        run = open_run(cfg, "score", progress=progress,
                       partial=out / "positions.partial.jsonl", record_path=out / "run.json", roles=ROLES,
                       refresh=cfg.refresh_roles())
        scoring = Scoring(cfg, corpus, run, count, corpus_path)
        scoring.before_shard = kept
        scoring.earlier, other = earlier_run(out / "run.json", cfg, corpus_path)
        if other is not None:
            # replaced whole (its outputs are rewritten); its cost is not this run's
            warn(f"--out {out} held a run of {other}; this run replaces it (its cost is not counted)", "note")
        run.pipeline = scoring
        async with run:
            if await run.work(scoring.score()):
                with run.outputs():  # a stop signal while they are written is obeyed at once
                    scoring.write_outputs(out)
                    run.freeze_wall()  # report.md and run.json state the same wall time
                    if not cfg.report and other is not None:
                        _drop_report(out)  # the earlier run's report describes the outputs just replaced
                    if cfg.report:
                        run.write_record()
                        from tension.core.reports.report import report
                        run.claims.append(out / "report.md")  # says "complete": removed if it cannot be put back
                        report(out, gpu_hour_usd=cfg.gpu_hour_usd,
                               usd_per_mtok=(cfg.input_usd_per_mtok, cfg.output_usd_per_mtok),
                               record=run.written)  # the record just written, not read back
    return _summary(scoring, run, out)


def _drop_report(out: Path) -> None:
    """An earlier run's report in `out` (report.md, its tables and figures), removed in the
    outputs block (so a stop puts it back with the earlier outputs) and said: it described
    a run of other settings, whose outputs this run replaced (issue 58's item 5)."""
    import shutil

    from tension.core.reports.report import REPORT_OUTPUTS

    gone = []
    for name in REPORT_OUTPUTS:
        p = out / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
        else:
            continue
        gone.append(name)
    if gone:
        warn(f"removed the earlier run's {', '.join(gone)} from {out}: they described the outputs this run "
             f"replaced; `tension-run report {shlex.quote(str(out))}` writes this run's", "note")


FEWER_ENDINGS = 20  # what a long run is told to try first (the review's figure; a wider interval per position)


def fewer_endings(cfg: ScoreConfig, rate: float, units: float) -> str:
    """What a run expected to take long could lower, as a command, with the time it
    would take at `rate` answers per second for `units` positions ("" when it asks
    FEWER_ENDINGS already)."""
    if cfg.endings <= FEWER_ENDINGS:
        return ""
    seconds = duration(units * 2 * FEWER_ENDINGS / max(rate, 1e-9))
    called = INVOCATION.get()
    if called is not None:  # the Python API: its call, not a command line
        return f"with endings={FEWER_ENDINGS} it would take {seconds} (a wider interval per position)"
    typed = command_line()  # as the tool was called: its console script, or python -m (core/signals.py)
    argv, skip, shown = [], False, redact_argv(typed)
    for word in shown:
        if skip or word == "--endings":
            skip = not skip
            continue
        if not word.startswith("--endings="):
            argv.append(word)
    argv += ["--endings", str(FEWER_ENDINGS)]
    return (f"with --endings {FEWER_ENDINGS} it would take {seconds} (a wider interval per position): "
            + " ".join(shlex.quote(a) for a in argv)
            + (" (its secrets are shown as ***: give them again)" if shown != typed else ""))


def _summary(scoring: Scoring, run: Run, out: Path) -> RunSummary:
    corpus, finder = scoring.corpus, scoring.finder
    return RunSummary(
        status=run.status, out=str(out), stories=len(corpus.stories), positions=scoring.positions_written(),
        failures=list(scoring.failed.values()), input_errors=[str(e) for e in corpus.errors],
        skipped=len(corpus.skipped), skipped_stories=list(corpus.skipped), too_long=dict(finder.too_long),
        no_positions=dict(finder.no_positions), requests=dict(run.llm.counts.requests),
        cache_hits=dict(run.store.counts.hits), error=run.error, exit_status=run.exit_status,
        replicas=scoring.replica_figures(), replica_events=list(scoring.replica_events),
        warnings=scoring.watch.warnings(),
        bad_records=sum(not isinstance(e, FileError) for e in corpus.errors),
        computed=scoring.computed if run.status == "complete" else None, record=run.written)
