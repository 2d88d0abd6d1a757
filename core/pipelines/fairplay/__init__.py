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
from pathlib import Path
from typing import Any

import msgspec

from tension.core.config.fairplay import READERS, FairPlayConfig, experienced_readers, load_fairplay_config
from tension.core.errors import InputError, StatusError
from tension.core.formats import Generator
from tension.core.inputs.jsonl import atomic_write
from tension.core.inputs.readers import reader_schedule
from tension.core.inputs.whodunits import WhodunitStory, read_stories, segment_text
from tension.core.llm.router import ITEM_KEY, routing
from tension.core.pipelines.fairplay.readers import Job, Readers, Value
from tension.core.reports.answer_warnings import AnswerWarning
from tension.core.run.lifecycle import LOCK_NAME, Run, client_for, open_store, out_lock, prepare_out_dir, run_blocking
from tension.core.run.progress import Progress

__all__ = ["READERS", "FairPlayConfig", "Generator", "WhodunitStory", "ReaderFailure", "FairPlayRun",
           "load_fairplay_config", "read_stories", "segment_text", "reader_schedule", "run_readers", "fairplay",
           "fairplay_async"]


class ReaderFailure(msgspec.Struct, kw_only=True):
    reader: str
    paragraph: int | None
    error: str


class FairPlayRun(msgspec.Struct, kw_only=True):
    """What a `fairplay` run did; the CLI prints it and picks the exit status."""

    status: str  # "complete", "failed", "interrupted"
    out: str
    stories: int
    input_errors: list[str]
    reader_failures: int  # values recorded as failures (null in readers.jsonl)
    failed_stories: list[str]  # ids with at least one failure
    requests: dict[str, int]
    cache_hits: dict[str, int]
    metrics: Any = None  # the FairPlaySummary of the metrics, when they ran
    error: str | None = None
    warnings: list[AnswerWarning] = []  # degenerate answers (core/pipelines/answer_checks.py)


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
    values and failures as they complete, and readers.jsonl."""

    def __init__(self, cfg: FairPlayConfig, stories: list[WhodunitStory], run: Run, path: str = ""):
        self.cfg = cfg
        self.stories = stories
        self.run = run
        self.readers = Readers(cfg, stories, run, path)
        self.values: list[dict[str, list[list[float] | None]]] = [{} for _ in stories]
        self.failures: list[list[ReaderFailure]] = [[] for _ in stories]
        self.metrics = None  # the metrics' summary, once they ran

    # -- bookkeeping ----------------------------------------------------------

    def record(self, job: Job, probs: list[float]) -> None:
        self.values[job.story][job.reader][job.paragraph - 1] = probs
        self.run.committer.lines.append(_enc.encode({"id": self.stories[job.story].id, "reader": job.reader,
                                                 "paragraph": job.paragraph, "probabilities": probs}) + b"\n")

    def fail(self, job: Job, error: str) -> None:
        self.failures[job.story].append(ReaderFailure(reader=job.reader, paragraph=job.paragraph, error=error))

    async def run_job(self, job: Job) -> None:
        ITEM_KEY.set(self.stories[job.story].id)  # a story's prompts share its text: one server
        try:
            ask = self.readers.know_it_all if job.reader == "know_it_all" else self.readers.prompted_reader
            value = await ask(job)
        except StatusError as e:
            # This request was refused (e.g. a prompt over the context): this value
            # fails, the rest go on.
            value = Value(None, str(e))
        if value.error is None:
            self.record(job, value.probs)
        else:
            self.fail(job, value.error)
        self.run.progress.unit_done()

    async def jobs(self, extract: list[int]):
        """Every (story, reader, paragraph) in input order; a story's suspects are
        extracted before its first job."""
        todo = set(extract)
        for si, st in enumerate(self.stories):
            if si in todo:
                try:
                    await self.readers.extract_suspects(si)
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
            self.run.progress.item_started(len(jobs))
            for job in jobs:
                yield job

    async def read(self, extract: list[int]) -> None:
        await self.readers.resolve_models()
        cfg = self.cfg
        lanes = {lane: n for router in self.readers.routers.values() for lane, n in router.lanes().items()}
        async with routing(*self.readers.routers.values()), self.run.scheduler(lanes) as sched:
            await sched.feed(self.jobs(extract), self.run_job, cfg.reader_concurrency + cfg.gen_concurrency)

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


async def fairplay_async(cfg: FairPlayConfig, stories_path: str | os.PathLike, out_dir: str | os.PathLike,
                         metrics_options: dict[str, Any] | None = None) -> FairPlayRun:
    """Run the readers over a stories file and write DIR/readers.jsonl, then the
    metrics (reports/fairplay_metrics.py). Problems before the start raise
    TensionError; during the run they end it with status "failed", all completed
    answers kept in the cache."""
    out = prepare_out_dir(out_dir)
    with out_lock(out, out / LOCK_NAME, "fairplay", "folder"):
        stories, extract, errors = read_stories(stories_path, cfg)
        run = Run(store=open_store(cfg.cache, cfg.cache_max_gb), client=client_for(cfg, cfg.resolved_api_key()),
                  progress=Progress(enabled=cfg.progress, stories=len(stories)),
                  partial=out / "readers.partial.jsonl", record_path=out / "fairplay_run.json",
                  record=lambda run: _record(reading, run, errors, out, stories_path),
                  roles=("reader", "generation", "judge", "models"))
        reading = ReaderRun(cfg, stories, run, str(stories_path))
        async with run:
            if stories:
                await run.work(reading.read(extract))
            run.progress.close()  # before the metrics' own progress bar
            if run.status == "complete" and stories:
                atomic_write(out / "readers.jsonl", reading.readers_jsonl())
                reading.metrics = _metrics(out, cfg, metrics_options)
    return _summary(reading, run, errors, out)


def _metrics(out: Path, cfg: FairPlayConfig, options: dict[str, Any] | None):
    """The metrics (reports/fairplay_metrics.py) over the readers just written;
    `options` are its keyword settings (settings, max_plots, n_resamples, seed)."""
    from tension.core.reports.fairplay_metrics import fairplay_metrics

    return fairplay_metrics(out / "readers.jsonl", out, actual_csv=cfg.actual, **(options or {}))


def _summary(reading: ReaderRun, run: Run, errors, out: Path) -> FairPlayRun:
    failures = reading.failures
    return FairPlayRun(
        status=run.status, out=str(out), stories=len(reading.stories), input_errors=[str(e) for e in errors],
        reader_failures=sum(len(f) for f in failures),
        failed_stories=[st.id for st, f in zip(reading.stories, failures) if f],
        requests=dict(run.requests), cache_hits=dict(run.store.counts.hits),
        metrics=reading.metrics, error=run.error, warnings=reading.readers.checks.warnings())


def _record(reading: ReaderRun, run: Run, errors, out: Path, stories_path) -> dict[str, Any]:
    summary = _summary(reading, run, errors, out)
    return {
        "command": "fairplay", "stories_file": str(stories_path), **run.timing(), "config": reading.cfg.public(),
        "models": {"reader": reading.readers.reader_model or reading.cfg.reader_model,
                   "judge": reading.readers.judge_model or reading.cfg.judge_model},
        "versions": run.versions(),
        "summary": msgspec.to_builtins(msgspec.structs.replace(summary, metrics=None)),
        "metrics": {"stories": summary.metrics.stories, "errors": list(summary.metrics.errors)}
        if summary.metrics is not None else None,
        "failures": {st.id: [msgspec.to_builtins(f) for f in fs]
                     for st, fs in zip(reading.stories, reading.failures) if fs},
        "http": run.http(),
        "usage_this_run": run.usage_this_run(),
        "lanes": run.lanes(),
    }


def fairplay(cfg: FairPlayConfig, stories_path: str | os.PathLike, out_dir: str | os.PathLike,
             metrics_options: dict[str, Any] | None = None) -> FairPlayRun:
    """Blocking form of `fairplay_async` (uvloop when installed); SIGTERM stops it
    like Ctrl-C, completed answers committed first."""
    return run_blocking(lambda: fairplay_async(cfg, stories_path, out_dir, metrics_options))

