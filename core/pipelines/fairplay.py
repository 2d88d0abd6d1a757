"""`tension-run fairplay`: the LLM readers of a whodunit, paragraph by paragraph
(METRICS.md 2.1; paper 003), then the fair-play metrics.

    stories.jsonl ─► stories (segments, suspects, culprit, generator?)
       ─► [suspect extraction]                        ◄─► LMDB verdicts
       ─► gullible / experienced reader per prefix    ◄─► LMDB verdicts (raw answers)
       ─► know-it-all per checkpoint: K continuations ◄─► LMDB endings (one per paragraph)
              ─► culprit of each finished continuation ◄─► LMDB verdicts
       ─► readers.jsonl (the `fairplay-metrics` input) ─► fairplay_metrics()

Raw answers are cached and parsed when used (core/reader_parse.py), so a rerun
sends nothing and a better parser needs no new requests. An answer that cannot be
parsed is asked again with the next seed (a new cache key), at most
`parse_retries` times, then recorded in the story's `failures`; no number is ever
filled in. Requests run through the Scheduler's lanes ("reader", "generation",
"judge") and the client; completed answers are group-committed as in `score`.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from tension.cache import records
from tension.cache.keys import request_key
from tension.cache.store import Store, default_path

from tension.core.prompts import readers as rp
from tension.core.llm.client import Client, RetryPolicy, Timeouts, normalize_base_url
from tension.core.config.fairplay import READERS, FairPlayConfig, load_fairplay_config
from tension.core.errors import ConfigError, InputError, ServerError, StatusError
from tension.core.formats import Generator
from tension.core.inputs.jsonl import atomic_write
from tension.core.inputs.whodunits import WhodunitStory, read_stories, segment_text
from tension.core.run.progress import Progress
from tension.core.llm.protocol import ChatRequest
from tension.core.prompts.answers import match_suspect, parse_culprit, parse_distribution, parse_suspect_list
from tension.core.run.scheduler import Scheduler
from tension.core.pipelines.score import _Committer, _out_lock, _versions, run_committed

__all__ = ["READERS", "FairPlayConfig", "Generator", "WhodunitStory", "ReaderFailure", "FairPlayRun",
           "load_fairplay_config", "read_stories", "segment_text", "checkpoint_paragraphs", "fairplay",
           "fairplay_async"]

# --------------------------------------------------------------------------- checkpoints and schemas


def checkpoint_paragraphs(spec: int | list[int], L: int) -> list[int]:
    """Know-it-all checkpoints: after which paragraphs continuations are sampled.
    A count C spreads C checkpoints evenly over paragraphs 3 … L−4 (rounded,
    repeats dropped): for L = 25 and C = 19 that is every paragraph 3 … 21, the
    paper's 19 checkpoints whose continuations regenerate up to 22 paragraphs. A
    list is used as given (paragraphs ≥ L are dropped: nothing is left to write)."""
    if isinstance(spec, list):
        return sorted({c for c in spec if 1 <= c < L})
    lo, hi = min(3, L - 1), max(min(3, L - 1), L - 4)
    if spec == 1:
        return [round((lo + hi) / 2)]
    return sorted({round(lo + (hi - lo) * j / (spec - 1)) for j in range(spec)})


def distribution_schema(suspects: list[str]) -> dict[str, Any]:
    """The reader answer's JSON shape, for --reader-constraint json: the suspects
    in the asked order and one probability each (a sum of 1 is not expressible;
    the parser renormalises)."""
    n = len(suspects)
    return {"type": "object", "required": ["suspects", "probabilities"], "additionalProperties": False,
            "properties": {
                "suspects": {"type": "array", "prefixItems": [{"const": s} for s in suspects],
                             "minItems": n, "maxItems": n},
                "probabilities": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1},
                                  "minItems": n, "maxItems": n}}}


def culprit_schema(suspects: list[str]) -> dict[str, Any]:
    """The culprit judge's JSON shape: one of the suspects, or null."""
    return {"type": "object", "required": ["culprit"], "additionalProperties": False,
            "properties": {"culprit": {"anyOf": [{"enum": list(suspects)}, {"type": "null"}]}}}


# --------------------------------------------------------------------------- the run


class ReaderFailure(msgspec.Struct, kw_only=True):
    reader: str
    paragraph: int | None
    error: str


class _Names(msgspec.Struct):
    names: list[str] | None
    error: str | None


class _Job(msgspec.Struct, frozen=True):
    story: int
    reader: str
    paragraph: int  # for know_it_all: the checkpoint


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


_enc = msgspec.json.Encoder()


class _Run:
    """State of one fairplay run; methods are its stages."""

    def __init__(self, cfg: FairPlayConfig, stories: list[WhodunitStory], store: Store, client: Client,
                 progress: Progress, path: str = ""):
        self.cfg = cfg
        self.path = path  # of the stories file, for error messages
        self.stories = stories
        self.store = store
        self.client = client
        self.progress = progress
        self.reader_url = normalize_base_url(cfg.base_url)
        self.judge_url = normalize_base_url(cfg.judge_base_url or cfg.base_url)
        self.gen_url = normalize_base_url(cfg.generator_base_url or cfg.base_url)
        self.reader_model = cfg.reader_model or ""
        self.judge_model = cfg.judge_model or ""
        self.template_kwargs = {"enable_thinking": False} if cfg.reasoning_off else None
        self.values: list[dict[str, list[list[float] | None]]] = [{} for _ in stories]
        self.failures: list[list[ReaderFailure]] = [[] for _ in stories]
        self.requests = {"reader": 0, "generation": 0, "judge": 0, "models": 0}
        self.sched: Scheduler | None = None
        self.committer: _Committer | None = None

    async def resolve_models(self) -> None:
        """Model ids for the cache keys; given ids are used as they are, so a fully
        cached rerun sends nothing."""
        if not self.reader_model:
            self.requests["models"] += 1
            ids = await self.client.models(self.reader_url)
            if not ids:
                raise ServerError(f"{self.reader_url}/v1/models lists no model; pass --reader-model")
            self.reader_model = ids[0]
        self.judge_model = self.judge_model or self.reader_model

    # -- one cached chat request ----------------------------------------------

    async def chat(self, lane: str, url: str, req: ChatRequest, db: str) -> list[str]:
        """The answer texts of `req`: from the cache, or asked and committed."""
        key = request_key("chat", req.key_fields())
        rec = self.store.get(db, key)
        if rec is not None:
            self.progress.hit()
            return rec.texts if db == "endings" else [rec.text]
        self.requests[lane] += 1
        res = await self.sched.request(lane, self.client.chat, url, req)
        if db == "endings":
            rec = records.Endings(texts=res.texts, finish_reasons=res.finish_reasons, model=res.model,
                                  usage=res.usage, created=time.time(), seconds=res.seconds)
        else:
            rec = records.Verdict(text=res.texts[0], finish_reason=res.finish_reasons[0], model=res.model,
                                  usage=res.usage, created=time.time(), seconds=res.seconds)
        self.committer.add(db, key, rec)
        self.progress.fresh(res.usage)
        return res.texts

    async def ask_parsed(self, lane: str, url: str, model: str, messages, temperature: float, max_tokens: int,
                         parse, schema: dict[str, Any] | None = None):
        """Ask until `parse(answer)` has no error: the first try at `temperature`,
        each re-ask at least `retry_temperature` with the next seed. Returns the
        last parse result (with its error when every try failed)."""
        cfg = self.cfg
        result = None
        for attempt in range(cfg.parse_retries + 1):
            if attempt > 0:
                # Each re-ask must be a new request (a new cache key): the next seed,
                # or without seeds a temperature 0.01 higher than the previous re-ask.
                temperature = max(temperature, cfg.retry_temperature) + (0.0 if cfg.seeds or attempt == 1 else 0.01)
            req = ChatRequest(model=model, messages=messages, n=1, temperature=round(temperature, 6),
                              max_tokens=max_tokens, seed=cfg.seed + attempt if cfg.seeds else None,
                              chat_template_kwargs=self.template_kwargs,
                              structured_outputs={"json": schema} if schema and cfg.reader_constraint == "json"
                              else None)
            (text,) = await self.chat(lane, url, req, "verdicts")
            result = parse(text)
            if result.error is None:
                return result
        return result

    # -- suspects -------------------------------------------------------------

    async def extract_suspects(self, si: int) -> None:
        st = self.stories[si]
        cfg = self.cfg
        words = rp.story_join(st.segments).split()
        text = " ".join(words[: cfg.extract_words])

        def parse(answer: str) -> _Names:
            return _Names(*parse_suspect_list(answer))

        schema = {"type": "object", "required": ["suspects"], "additionalProperties": False,
                  "properties": {"suspects": {"type": "array", "items": {"type": "string"}, "minItems": 2,
                                              "maxItems": cfg.max_suspects}}}
        res = await self.ask_parsed("reader", self.judge_url, self.judge_model,
                                    rp.extract_messages(text, cfg.max_suspects), cfg.judge_temperature,
                                    cfg.reader_max_tokens, parse, schema)
        if res.error is not None:
            raise InputError(self.path, st.line, "suspects", f"missing, and the extraction failed: {res.error}")
        names: list[str] = []
        for n in res.names:  # the labels' spelling wins: "Baron Gruner" → "Adelbert Gruner"
            for label in (st.culprit, st.distractor):
                if label and match_suspect(n, [label])[0] == 0:
                    n = label
            if n not in names:
                names.append(n)
        keep = [x for x in (st.culprit, st.distractor) if x]
        others = [n for n in names if n not in keep][: max(0, cfg.max_suspects - len(keep))]
        # The extracted order is kept; a label the extraction missed goes last.
        st.suspects = [n for n in names if n in keep or n in others] + [x for x in keep if x not in names]
        st.extracted_suspects = True

    # -- readers --------------------------------------------------------------

    async def prompted_reader(self, job: _Job) -> None:
        st = self.stories[job.story]
        cfg = self.cfg
        prefix = st.segments[: job.paragraph]
        if job.reader == "gullible":
            messages = rp.gullible_messages(prefix, st.suspects)
        else:
            messages = rp.experienced_messages(prefix, st.suspects, st.L, self.previous_stories(job.story))
        res = await self.ask_parsed("reader", self.reader_url, self.reader_model, messages,
                                    cfg.reader_temperature, cfg.reader_max_tokens,
                                    lambda text: parse_distribution(text, st.suspects),
                                    distribution_schema(st.suspects))
        if res.error is not None:
            self.fail(job, f"unusable answer after {cfg.parse_retries + 1} tries: {res.error}")
        else:
            self.record(job, res.probs)

    def previous_stories(self, si: int) -> list[str]:
        """The `previous_stories` stories before this one in the input that share its
        generator model (or, without a generator, its group), oldest first."""
        n = self.cfg.previous_stories
        if n == 0:
            return []
        st = self.stories[si]
        def same(other: WhodunitStory) -> bool:
            if st.generator is not None:
                return other.generator is not None and other.generator.model == st.generator.model
            return other.generator is None and other.group == st.group
        earlier = [o for o in self.stories[:si] if same(o)]
        return [rp.story_join(o.segments) for o in earlier[-n:]]

    async def know_it_all(self, job: _Job) -> None:
        """K continuations from after paragraph `job.paragraph` to L, each named a
        culprit by the judge; the relative frequencies over the suspects."""
        st = self.stories[job.story]
        cfg = self.cfg
        c = job.paragraph
        first = await self.continue_paragraph(st, list(st.segments[:c]), None, cfg.k)
        verdicts = await self.sched.map(
            lambda k: self.continuation_culprit(st, list(st.segments[:c]) + [first[k]], k), range(cfg.k))
        counts = [0] * len(st.suspects)
        nobody = unusable = 0
        for res in verdicts:
            if res.error is not None:
                unusable += 1
            elif res.index is None:
                nobody += 1
            else:
                counts[res.index] += 1
        named = sum(counts)
        if named == 0:
            self.fail(job, f"none of {cfg.k} continuations names a suspect as culprit "
                           f"({nobody} name nobody, {unusable} unusable judge answers)")
            return
        self.record(job, [x / named for x in counts])

    async def continuation_culprit(self, st: WhodunitStory, paragraphs: list[str], k: int):
        """Write continuation k to the end, then ask the judge whom it reveals."""
        cfg = self.cfg
        while len(paragraphs) < st.L:
            (text,) = await self.continue_paragraph(st, paragraphs, k, 1)
            paragraphs.append(text)
        return await self.ask_parsed("judge", self.judge_url, self.judge_model,
                                     rp.culprit_messages(paragraphs, st.suspects), cfg.judge_temperature,
                                     cfg.judge_max_tokens, lambda text: parse_culprit(text, st.suspects),
                                     culprit_schema(st.suspects))

    async def continue_paragraph(self, st: WhodunitStory, paragraphs: list[str], k: int | None, n: int
                                 ) -> list[str]:
        """Paragraph len(paragraphs)+1 by the story's generator. Continuation k
        samples with seed + k throughout; the first paragraph of all K is one
        request with n = K and seed (vLLM samples its choice k with seed + k)."""
        g = st.generator
        i = len(paragraphs) + 1
        blind = self.cfg.know_it_all_culprit == "blind"
        prompt = rp.render_generator(g.final_prompt if i == st.L else g.paragraph_prompt, i=i, L=st.L,
                                     suspects=st.suspects,
                                     culprit=rp.BLIND_CULPRIT if blind else st.culprit,
                                     distractor=rp.BLIND_DISTRACTOR if blind else st.distractor,
                                     story=paragraphs)
        req = ChatRequest(model=self.cfg.generator_model or g.model,
                          messages=[{"role": "system", "content": g.system}, {"role": "user", "content": prompt}],
                          n=n, temperature=g.temperature,
                          max_tokens=self.cfg.generator_max_tokens or g.max_tokens,
                          seed=self.cfg.seed + (k or 0) if self.cfg.seeds else None,
                          chat_template_kwargs=self.template_kwargs)
        return [t.strip() for t in await self.chat("generation", self.gen_url, req, "endings")]

    # -- bookkeeping ----------------------------------------------------------

    def record(self, job: _Job, probs: list[float]) -> None:
        self.values[job.story][job.reader][job.paragraph - 1] = probs
        self.committer.lines.append(_enc.encode({"id": self.stories[job.story].id, "reader": job.reader,
                                                 "paragraph": job.paragraph, "probabilities": probs}) + b"\n")

    def fail(self, job: _Job, error: str) -> None:
        self.failures[job.story].append(ReaderFailure(reader=job.reader, paragraph=job.paragraph, error=error))

    async def run_job(self, job: _Job) -> None:
        try:
            if job.reader == "know_it_all":
                await self.know_it_all(job)
            else:
                await self.prompted_reader(job)
        except StatusError as e:
            # This request was refused (e.g. a prompt over the context): this value
            # fails, the rest go on.
            self.fail(job, str(e))
        self.progress.position_done()

    async def jobs(self, extract: list[int]):
        """Every (story, reader, paragraph) in input order; a story's suspects are
        extracted before its first job."""
        todo = set(extract)
        for si, st in enumerate(self.stories):
            if si in todo:
                try:
                    await self.extract_suspects(si)
                except (InputError, StatusError) as e:
                    self.failures[si].append(ReaderFailure(reader="suspects", paragraph=None, error=str(e)))
                    continue
            jobs = []
            for reader in self.cfg.readers:
                if reader == "know_it_all":
                    if st.generator is None:
                        continue
                    paragraphs = checkpoint_paragraphs(self.cfg.checkpoints, st.L)
                else:
                    paragraphs = range(1, st.L + 1)
                self.values[si][reader] = [None] * st.L
                jobs += [_Job(si, reader, p) for p in paragraphs]
            self.progress.add_positions(len(jobs))
            for job in jobs:
                yield job

    async def run(self, extract: list[int]) -> None:
        await self.resolve_models()
        cfg = self.cfg
        sched = Scheduler({"reader": cfg.reader_concurrency, "generation": cfg.gen_concurrency,
                           "judge": cfg.judge_concurrency})
        self.sched = sched
        async with sched:
            sched.service(self.committer.run())
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
    metrics (core/fairplay_metrics.py). Problems before the start raise
    TensionError; during the run they end it with status "failed", all completed
    answers kept in the cache."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    with _out_lock(out):
        return await _fairplay_locked(cfg, stories_path, out, metrics_options)


async def _fairplay_locked(cfg: FairPlayConfig, stories_path, out: Path, metrics_options) -> FairPlayRun:
    stories, extract, errors = read_stories(stories_path, cfg)
    store = Store(cfg.cache or default_path(), max_bytes=int(cfg.cache_max_gb * 1e9) if cfg.cache_max_gb else None)
    progress = Progress(enabled=cfg.progress, stories=len(stories))
    t0 = time.time()
    status, error = "complete", None
    run: _Run | None = None
    metrics = None
    try:
        async with Client(api_key=cfg.resolved_api_key(), timeouts=Timeouts(request=cfg.timeout),
                          retry=RetryPolicy(attempts=cfg.retries, total_seconds=cfg.retry_seconds)) as client:
            run = _Run(cfg, stories, store, client, progress, str(stories_path))
            partial = out / "readers.partial.jsonl"
            partial.write_bytes(b"")  # this run's values as they are committed (earlier ones are cached)
            run.committer = _Committer(store, partial)
            if stories:
                status, error = await run_committed(run.run(extract), run.committer)
            else:
                run.committer.close()
        progress.close()
        if status == "complete" and stories:
            atomic_write(out / "readers.jsonl", run.readers_jsonl())
            metrics = _metrics(out, cfg, metrics_options)
    except asyncio.CancelledError:
        status = "interrupted"
        raise
    finally:
        progress.close()
        try:
            store.save_run_counts()
        finally:
            summary = _summary(run, stories, errors, store, out, status, error, metrics)
            _write_run_json(summary, cfg, run, stories_path, t0)
            store.close()
    return summary


def _metrics(out: Path, cfg: FairPlayConfig, options: dict[str, Any] | None):
    """The metrics (core/fairplay_metrics.py) over the readers just written;
    `options` are its keyword settings (settings, max_plots, n_resamples, seed)."""
    from tension.core.reports.fairplay_metrics import fairplay_metrics

    return fairplay_metrics(out / "readers.jsonl", out, actual_csv=cfg.actual, **(options or {}))


def _summary(run, stories, errors, store, out, status, error, metrics) -> FairPlayRun:
    failures = run.failures if run else [[] for _ in stories]
    return FairPlayRun(
        status=status, out=str(out), stories=len(stories), input_errors=[str(e) for e in errors],
        reader_failures=sum(len(f) for f in failures),
        failed_stories=[st.id for st, f in zip(stories, failures) if f],
        requests=dict(run.requests) if run else {}, cache_hits=dict(store.counts.hits),
        metrics=metrics, error=error)


def _write_run_json(summary: FairPlayRun, cfg: FairPlayConfig, run: _Run | None, stories_path, t0: float) -> None:
    doc = {
        "command": "fairplay", "stories_file": str(stories_path), "argv": sys.argv, "started": t0,
        "wall_seconds": round(time.time() - t0, 3), "config": cfg.public(),
        "models": {"reader": run.reader_model if run else cfg.reader_model,
                   "judge": run.judge_model if run else cfg.judge_model},
        "versions": _versions(),
        "summary": msgspec.to_builtins(msgspec.structs.replace(summary, metrics=None)),
        "metrics": {"stories": summary.metrics.stories, "errors": list(summary.metrics.errors)}
        if summary.metrics is not None else None,
        "failures": {st.id: [msgspec.to_builtins(f) for f in fs]
                     for st, fs in zip(run.stories, run.failures) if fs} if run else {},
        "http": {"attempts": run.client.sent, "retries": run.client.retries} if run else {},
        "usage_this_run": msgspec.to_builtins(run.client.usage) if run else {},
        "lanes": {k: msgspec.to_builtins(v) for k, v in run.sched.lane_stats.items()} if run and run.sched else {},
    }
    atomic_write(Path(summary.out) / "fairplay_run.json", msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n")


def fairplay(cfg: FairPlayConfig, stories_path: str | os.PathLike, out_dir: str | os.PathLike,
             metrics_options: dict[str, Any] | None = None) -> FairPlayRun:
    """Blocking form of `fairplay_async` (uvloop when installed); SIGTERM stops it
    like Ctrl-C, completed answers committed first."""
    from tension.core.pipelines.score import run_blocking

    return run_blocking(lambda: fairplay_async(cfg, stories_path, out_dir, metrics_options))
