"""`tension-run fairplay`: the LLM readers of a whodunit, paragraph by paragraph
(docs/fairplay.md; paper 003), then the fair-play metrics.

    stories.jsonl ─► stories (segments, suspects, culprit, generator?)
       ─► [suspect extraction]                        ◄─► LMDB verdicts
       ─► gullible / experienced reader per prefix    ◄─► LMDB verdicts (raw answers)
       ─► know-it-all per checkpoint: K continuations ◄─► LMDB endings (one per paragraph)
              ─► culprit of each finished continuation ◄─► LMDB verdicts
       ─► readers.jsonl (the `fairplay-metrics` input) ─► fairplay_metrics()

Raw answers are cached and parsed when used (prompts/answers.py), so a rerun
sends nothing and a better parser needs no new requests. An answer that cannot be
parsed is asked again with the next seed (a new cache key), at most
`parse_retries` times, then recorded in the story's `failures`; no number is ever
filled in. Requests run through the Scheduler's lanes ("reader", "generation",
"judge") and the client; completed answers are group-committed as in `score`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from tension.core.config.fairplay import READERS, FairPlayConfig, experienced_readers, load_fairplay_config
from tension.core.config.settings import refresh_roles
from tension.core.errors import InputError, RunStatus, StatusError, TensionError
from tension.core.formats import Generator
from tension.core.inputs.jsonl import atomic_write
from tension.core.inputs.readers import reader_schedule
from tension.core.inputs.whodunits import WhodunitStory, read_stories, segment_text
from tension.core.llm.ticket import Ticket
from tension.core.pipelines.fairplay.readers import Job, Readers, Value
from tension.core.reports.answer_warnings import AnswerWarning
from tension.core.run.lifecycle import Run, open_run, warn
from tension.core.run.out_folder import LOCK_NAME, out_lock, prepare_out_dir
from tension.core.run.progress import Pace, Progress
from tension.core.run.record import RunRecord

if TYPE_CHECKING:  # the metrics are imported when they run
    from tension.core.reports.fairplay_metrics import FairPlaySummary

__all__ = ["READERS", "FairPlayConfig", "Generator", "WhodunitStory", "ReaderFailure", "FairPlayRun",
           "load_fairplay_config", "read_stories", "segment_text", "reader_schedule", "run_readers",
           "run_fairplay", "NO_STORIES"]

NO_STORIES = "no story to read"  # opens the error of a run whose stories file held none readable


class ReaderFailure(msgspec.Struct, kw_only=True):
    reader: str
    paragraph: int | None
    error: str


class FairPlayRun(msgspec.Struct, kw_only=True):
    """What a `fairplay` run did; the CLI prints it and picks the exit status."""

    status: RunStatus
    out: str
    stories: int
    input_errors: list[str]
    reader_failures: int  # values recorded as failures (null in readers.jsonl)
    failed_stories: list[str]  # ids with at least one failure
    requests: dict[str, int]
    cache_hits: dict[str, int]
    metrics: FairPlaySummary | None = None  # the metrics' summary, when they ran
    error: str | None = None
    warnings: list[AnswerWarning] = []  # degenerate answers (core/pipelines/answer_checks.py)
    record: RunRecord | None = None  # fairplay_run.json as the run wrote it: the typed header, then the body


_enc = msgspec.json.Encoder()


def run_readers(cfg: FairPlayConfig) -> list[str]:
    """The readers a run asks, as readers.jsonl names them: the experienced
    reader once per --previous-stories count (experienced_N for a list)."""
    out = []
    for reader in cfg.readers:
        out += list(experienced_readers(cfg)) if reader == "experienced" else [reader]
    return out


class ReaderRun:
    """The readers of one fairplay run: its jobs (story, reader, paragraph), the
    values and failures as they complete, and readers.jsonl. It is the run's
    `Pipeline`: its models, outcome and record body."""

    def __init__(self, cfg: FairPlayConfig, stories: list[WhodunitStory], run: Run, path: str = "", *,
                 errors: Sequence[InputError] = (), out: Path | None = None):
        self.cfg = cfg
        self.stories = stories
        self.run = run
        self.path = path
        self.errors = list(errors)  # bad lines of the stories file
        self.out = out
        self.readers = Readers(cfg, stories, run.llm, run, path)
        self.values: list[dict[str, list[list[float] | None]]] = [{} for _ in stories]
        self.failures: list[list[ReaderFailure]] = [[] for _ in stories]
        self.metrics: FairPlaySummary | None = None  # the metrics' summary, once they ran

    # -- bookkeeping ----------------------------------------------------------

    def record(self, job: Job, probs: list[float]) -> None:
        self.values[job.story][job.reader][job.paragraph - 1] = probs
        self.run.llm.output(_enc.encode({"id": self.stories[job.story].id, "reader": job.reader,
                                                 "paragraph": job.paragraph, "probabilities": probs}) + b"\n")

    def fail(self, job: Job, error: str) -> None:
        self.failures[job.story].append(ReaderFailure(reader=job.reader, paragraph=job.paragraph, error=error))

    async def run_job(self, job: Job, place: int) -> None:
        ticket = Ticket(key=self.stories[job.story].id, place=place)  # a story's prompts share its text: one server
        try:
            ask = self.readers.know_it_all if job.reader == "know_it_all" else self.readers.prompted_reader
            value = await ask(job, ticket)
        except StatusError as e:
            # This request was refused (e.g. a prompt over the context): this value
            # fails, the rest go on.
            value = Value(None, str(e))
        if value.probs is not None:
            self.record(job, value.probs)
        else:
            self.fail(job, value.error or "no distribution")
        self.run.progress.unit_done(self.planned_answers(job))

    def planned_answers(self, job: Job) -> int:
        """The answers `job` takes when each is usable at once (the bar's time left,
        core/run/progress.py): a reader's one; the know-it-all's K continuations, each
        written from the paragraph after its checkpoint to the last (the first as one
        request of K), and their K verdicts; at the last paragraph, one verdict."""
        if job.reader != "know_it_all":
            return 1
        last = self.stories[job.story].L
        return 1 if job.paragraph >= last else self.cfg.k * (last - job.paragraph + 1)

    async def jobs(self, extract: list[int]) -> AsyncIterator[Job]:
        """Every (story, reader, paragraph) in input order; a story's suspects are
        extracted before its first job."""
        todo = set(extract)
        for si, st in enumerate(self.stories):
            if si in todo:
                try:
                    await self.readers.extract_suspects(si, Ticket(key=st.id))
                except (InputError, StatusError) as e:
                    self.failures[si].append(ReaderFailure(reader="suspects", paragraph=None, error=str(e)))
                    continue
            jobs = []
            # One schedule for every reader (the paper's); the know-it-all's
            # checkpoints are its paragraphs too.
            paragraphs = reader_schedule(self.cfg.schedule, st.L)
            for reader in run_readers(self.cfg):
                if reader == "know_it_all" and st.generator is None:
                    continue
                self.values[si][reader] = [None] * st.L
                jobs += [Job(si, reader, p) for p in paragraphs]
            self.run.progress.item_started(len(jobs), sum(map(self.planned_answers, jobs)))
            for job in jobs:
                yield job

    async def read(self, extract: list[int]) -> None:
        await self.readers.resolve_models(self.run)
        cfg = self.cfg
        async with self.run.serving(*self.readers.routers.values()) as sched:
            await sched.feed(self.jobs(extract), self.run_job, cfg.reader_concurrency + cfg.gen_concurrency)

    # -- the run's Pipeline and summary ------------------------------------------

    def models(self) -> dict[str, str | None]:
        return {"reader": self.readers.reader_model or self.cfg.reader_model,
                "judge": self.readers.judge_model or self.cfg.judge_model}

    def outcome(self) -> tuple[int, int]:
        """Stories read; bad records and stories with a failure."""
        failed = sum(1 for f in self.failures if f)
        return len(self.stories) - failed, len(self.errors) + failed

    def body(self) -> dict[str, Any]:
        """fairplay_run.json after the header."""
        metrics = self.metrics
        return {
            "stories_file": self.path, "out": str(self.out), "stories": len(self.stories),
            "input_errors": [str(e) for e in self.errors],
            "reader_failures": sum(len(f) for f in self.failures),
            "failed_stories": [st.id for st, f in zip(self.stories, self.failures) if f],
            "warnings": msgspec.to_builtins(self.readers.checks.warnings()),
            "metrics": {"stories": metrics.stories, "errors": list(metrics.errors)} if metrics is not None else None,
            "failures": {st.id: [msgspec.to_builtins(f) for f in fs]
                         for st, fs in zip(self.stories, self.failures) if fs},
            # only with a constraint asked: the asked one, or none where refused (core/pipelines/unconstrained.py)
            **({"reader_constraint_used": self.readers.constraint.used} if self.cfg.reader_constraint != "none"
               else {}),
        }

    def summary(self) -> FairPlayRun:
        run = self.run
        return FairPlayRun(
            status=run.status, out=str(self.out), stories=len(self.stories), input_errors=[str(e) for e in self.errors],
            reader_failures=sum(len(f) for f in self.failures),
            failed_stories=[st.id for st, f in zip(self.stories, self.failures) if f],
            requests=dict(run.llm.counts.requests), cache_hits=dict(run.store.counts.hits),
            metrics=self.metrics, error=run.error, warnings=self.readers.checks.warnings(), record=run.written)

    # -- outputs --------------------------------------------------------------

    def readers_jsonl(self) -> bytes:
        """The contract of `fairplay-metrics` (docs/fairplay.md), in input order;
        stories whose suspects could not be found are left out."""
        lines = []
        for st, values, fails in zip(self.stories, self.values, self.failures):
            if not st.suspects:
                continue
            lines.append(_enc.encode({
                "id": st.id, "group": st.group, "suspects": st.suspects, "culprit": st.culprit,
                "distractor": st.distractor, "revelation": st.revelation, "L": st.L, "readers": values,
                "extracted_suspects": st.extracted_suspects, "failures": [msgspec.to_builtins(f) for f in fails],
            }) + b"\n")
        return b"".join(lines)


# --------------------------------------------------------------------------- entry points


async def run_fairplay(cfg: FairPlayConfig, stories_path: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                         metrics_options: dict[str, Any] | None = None) -> FairPlayRun:
    """Run the readers over a stories file and write DIR/readers.jsonl, then the
    metrics (reports/fairplay_metrics.py). Problems before the start raise
    TensionError; during the run they end it with status "failed", all completed
    answers kept in the cache."""
    out = prepare_out_dir(out_dir)
    with out_lock(out, out / LOCK_NAME, "fairplay", "folder"):
        stories, extract, errors = read_stories(stories_path, cfg)
        for story in stories:
            if story.note:
                warn(f"story {story.id!r}: {story.note}")
        progress = Progress(enabled=cfg.progress, stories=len(stories), say=lambda m: warn(m, "note"))
        # the time left from the first answer on, as score's (core/run/progress.py)
        progress.pace = Pace(per_unit=1, what="answers (readers', continuations and verdicts)")
        run = open_run(cfg, "fairplay", progress=progress,
                       partial=out / "readers.partial.jsonl", record_path=out / "fairplay_run.json",
                       roles=("reader", "generation", "judge", "models"),
                       refresh=refresh_roles(cfg.refresh, ("reader", "judge", "generation")))
        reading = ReaderRun(cfg, stories, run, str(stories_path), errors=errors, out=out)
        run.pipeline = reading
        async with run:
            # no story read: a failed run (its record says why), not "complete" over an earlier run's readers
            done = await run.work(reading.read(extract) if stories else _no_story(errors))
            run.progress.close()  # before the metrics' own progress bar
            if done and stories:
                with run.outputs():  # a stop signal while they are written is obeyed at once
                    atomic_write(out / "readers.jsonl", reading.readers_jsonl())
                    reading.metrics = _metrics(out, cfg, metrics_options)
    return reading.summary()


async def _no_story(errors: Sequence[InputError]) -> None:
    raise TensionError(f"{NO_STORIES} ({len(errors)} unreadable, see above)")


def _metrics(out: Path, cfg: FairPlayConfig, options: dict[str, Any] | None) -> FairPlaySummary:
    """The metrics (reports/fairplay_metrics.py) over the readers just written;
    `options` are its keyword settings (settings, max_plots, n_resamples, seed)."""
    from tension.core.reports.fairplay_metrics import fairplay_metrics

    return fairplay_metrics(out / "readers.jsonl", out, actual_csv=cfg.actual, **(options or {}))
