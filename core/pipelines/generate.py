"""`tension-run generate`: stories from ideas (paper 000, §4 and App. D) and
whodunits paragraph by paragraph (paper 003, SI).

Modes (the paper's ablations; a step that is left out is not sent at all):

    vanilla    Step 2 from the idea alone (single-shot baseline)
    beats      Step 1 from scratch (warmup ablated) → Step 2
    full       Step 0 warmup → Step 1 beat adaptation → Step 2
    whodunit   L paragraphs, each from the author prompt and the story so far;
               the last one reveals the culprit

Every request goes through the client, the scheduler's "generation" lane and the
LMDB cache (the "endings" database holds any generation answer, keyed by the exact
request), so a rerun sends nothing and an interrupted run resumes. A story whose
text is shorter than ``min_chars`` is asked again with the next seed (a new cache
key), at most ``attempts`` times. Finished records stream to ``OUT.partial`` once
their answers are committed; ``OUT`` itself is written atomically, in idea order,
when the run completes.
"""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path
from typing import Any

import msgspec

from tension.core.config.generate import MODES, GenerateConfig
from tension.core.config.settings import refresh_roles
from tension.core.errors import ConfigError, ContextLengthError, InputError, RunStatus, StatusError
from tension.core.formats import Generator
from tension.core.inputs.ideas import Idea, Reference, ReferencePrompt, read_ideas, reference_pool
from tension.core.inputs.jsonl import atomic_write
from tension.core.llm.preflight import Need, check_servers
from tension.core.llm.protocol import ChatRequest
from tension.core.llm.replicas import parse_replicas
from tension.core.llm.router import Router
from tension.core.llm.ticket import Ticket
from tension.core.pipelines.answer_checks import StoryChecks
from tension.core.prompts import generate as gp
from tension.core.prompts.fill import story_join
from tension.core.reports.answer_warnings import AnswerWarning
from tension.core.run.lifecycle import Run, open_run
from tension.core.run.out_folder import out_lock
from tension.core.run.progress import Progress
from tension.core.run.record import Failure, RunRecord

__all__ = [
    "MODES", "GenerateConfig", "Idea", "Reference", "StorySettings", "GeneratedStory", "Generator",
    "Whodunit", "Failure", "GenerateSummary", "read_ideas", "reference_pool", "run_generate",
]

# --- records --------------------------------------------------------------------

class StorySettings(msgspec.Struct, kw_only=True):
    temperature: float
    max_tokens: int
    min_p: float | None
    seed: int  # of Steps 0 and 1; Step 2 attempt a used seed + a
    beats: int | None
    system: str | None
    reasoning_off: bool
    min_chars: int
    max_attempts: int


class GeneratedStory(msgspec.Struct, kw_only=True):
    """One output line of the pipeline modes: a `score` corpus record (id, text,
    group) whose other fields become the story's metadata."""

    id: str
    text: str
    group: str
    idea_id: str
    idea: str
    mode: str
    model: str
    reference: Reference | None  # Step 0's reference (full mode)
    warmup: str | None  # Step 0's beat sheet (full mode)
    beats: str | None  # Step 1's to-do list (beats and full modes)
    attempts: int  # Step 2 requests this story took
    short_attempts: list[int]  # lengths (characters) of the stories discarded as too short
    settings: StorySettings
    idea_group: str | None = None


class Whodunit(msgspec.Struct, kw_only=True):
    """One output line of `--mode whodunit`: the `fairplay` input format."""

    id: str
    group: str
    segments: list[str]
    suspects: list[str]
    culprit: str
    distractor: str
    revelation: int  # 1-based paragraph that reveals the culprit: the last one
    generator: Generator


class GenerateSummary(msgspec.Struct, kw_only=True):
    status: RunStatus
    out: str
    mode: str
    model: str | None
    ideas: int
    stories: int
    failures: list[Failure]
    input_errors: list[str]
    requests: dict[str, int]  # chat requests sent (cache misses), per role
    cache_hits: dict[str, int]  # per cache database
    error: str | None = None
    exit_status: int = 0  # core/errors.exit_status: did the run produce what was asked
    warnings: list[AnswerWarning] = []  # degenerate answers (core/pipelines/answer_checks.py)
    record: RunRecord | None = None  # STORIES.run.json as the run wrote it: the typed header, then the body


class _GaveUp(Exception):
    """Every attempt of one story (or paragraph) came back too short."""


def story_seed(seed: int, idea_id: str) -> int:
    """The seed of one story's requests: a function of the run seed and the idea
    id, so stories differ from each other and a rerun asks the same requests."""
    h = hashlib.blake2b(f"{seed}\x00{idea_id}".encode(), digest_size=4).digest()
    return int.from_bytes(h, "big") >> 2  # < 2**30: room for + attempt in a signed int32


def choose_reference(pool: list[ReferencePrompt], seed: int, idea_id: str) -> ReferencePrompt:
    """The paper draws one reference at random per story; ours is drawn from a
    Random seeded by (run seed, idea id): reproducible, independent of order."""
    return random.Random(f"{seed}:{idea_id}").choice(pool)


# --- the run --------------------------------------------------------------------

class StoryWriter:
    """The stories of one generate run: each idea's steps, their requests through
    the run's engine, and the output lines in idea order. It is the run's
    `Pipeline`: its models, outcome and record body."""

    def __init__(self, cfg: GenerateConfig, ideas: list[tuple[int, Idea]], pool: list[ReferencePrompt], run: Run, *,
                 errors: list[InputError], ideas_path: str | os.PathLike[str], out: Path):
        self.cfg = cfg
        self.ideas = ideas
        self.errors = errors  # bad lines of the ideas file
        self.ideas_path = ideas_path
        self.out = out
        self.pool = pool
        self.run = run
        self.router = Router("generation", parse_replicas(cfg.base_url, "base_url"), run.client,
                             limit=cfg.concurrency, timeout=cfg.timeout)
        self.model = cfg.model or ""
        self.temperature, self.max_tokens, self.min_p = cfg.sampling()
        self.template_kwargs = {"enable_thinking": False} if cfg.reasoning_off else None
        self.done: dict[int, bytes] = {}  # idea index -> output line
        self.failed: list[Failure] = []
        self.checks = StoryChecks()

    async def chat(self, messages: list[dict[str, str]], seed: int, ticket: Ticket) -> str:
        """One answer: from the cache, else from the server (then committed)."""
        req = ChatRequest(model=self.model, messages=messages, n=1, temperature=self.temperature,
                          max_tokens=self.max_tokens, min_p=self.min_p, seed=seed,
                          chat_template_kwargs=self.template_kwargs)
        try:
            rec = await self.run.llm.endings("generation", req, ticket=ticket)  # routed by the idea
        except ContextLengthError as e:
            if (fit := self.fitting_max_tokens()) is not None:
                raise ConfigError(self.too_long(fit)) from e
            raise
        self.checks.answer(messages, rec.texts[0])
        return rec.texts[0]

    def fitting_max_tokens(self) -> int | None:
        """A --max-tokens that leaves the prompt room in the server's context, when the
        one asked for does not (None: it does, or the context is unknown; the
        prompt itself is too long, and the idea fails)."""
        context = self.router.max_model_len()
        fit = context // 2 if context else None
        return fit if fit is not None and self.max_tokens > fit else None

    def too_long(self, fit: int) -> str:
        """M3 of ../shared/reviews/external-servers-2026-12-02.md: the default 4,000
        tokens exceed the context of docs/servers.md's own llama-server (4,096 per
        slot), and every idea failed with "no idea could be generated"."""
        srv = self.router.server
        given = "" if self.cfg.max_tokens is not None else " (the default)"
        return (f"--max-tokens {self.max_tokens}{given} and the prompt do not fit {srv.name}'s context of "
                f"{srv.context_len} tokens per sequence: pass --max-tokens {fit} (half of it) or less, or serve the "
                "model with a larger context (llama-server: -c is shared by its -np slots) (docs/servers.md)")

    async def one(self, job: tuple[int, Idea], place: int) -> None:
        index, idea = job
        ticket = Ticket(key=idea.id, place=place)  # the story's requests share a prefix: one server
        try:
            rec = await (self.whodunit(idea, ticket) if self.cfg.whodunit else self.story(idea, ticket))
        except (StatusError, _GaveUp) as e:
            # This idea's request was refused, or its story stayed too short: it
            # fails, the others go on.
            stage = "story" if isinstance(e, _GaveUp) else "request"
            self.failed.append(Failure(id=idea.id, stage=stage, error=str(e)))
            if not self.cfg.whodunit:
                self.run.progress.unit_done()
            return
        line = msgspec.json.encode(rec) + b"\n"
        self.done[index] = line
        self.run.llm.output(line)
        if not self.cfg.whodunit:
            self.run.progress.unit_done()

    async def story(self, idea: Idea, ticket: Ticket) -> GeneratedStory:
        cfg = self.cfg
        seed = story_seed(cfg.seed, idea.id)
        ref = warmup = beats = None
        if cfg.mode == "full":  # Step 0
            chosen = choose_reference(self.pool, cfg.seed, idea.id)
            ref = chosen.reference
            warmup = await self.chat([_user(chosen.prompt)], seed, ticket)
        if cfg.mode in ("beats", "full"):  # Step 1
            constraint = gp.BEATS_CONSTRAINT.format(n=cfg.beats) if cfg.beats else ""
            if warmup is None:
                prompt = gp.ADAPT_FROM_SCRATCH.format(idea=idea.idea, beats_constraint=constraint)
            else:
                prompt = gp.ADAPT_WITH_WARMUP.format(warmup=warmup, idea=idea.idea, beats_constraint=constraint)
            beats = await self.chat([_user(prompt)], seed, ticket)
            write = gp.WRITE_WITH_BEATS.format(beats=beats)
        else:
            write = gp.WRITE_VANILLA.format(idea=idea.idea)
        messages = ([{"role": "system", "content": cfg.system}] if cfg.system else []) + [_user(write)]
        text, short = await self.until_long_enough(messages, seed, cfg.min_chars, "story", ticket)  # Step 2
        settings = StorySettings(temperature=self.temperature, max_tokens=self.max_tokens, min_p=self.min_p,
                                 seed=seed, beats=cfg.beats, system=cfg.system, reasoning_off=cfg.reasoning_off,
                                 min_chars=cfg.min_chars, max_attempts=cfg.attempts)
        return GeneratedStory(id=f"{idea.id}-{cfg.mode}", text=text, group=cfg.group or cfg.mode,
                              idea_id=idea.id, idea=idea.idea, mode=cfg.mode, model=self.model, reference=ref,
                              warmup=warmup, beats=beats, attempts=len(short) + 1, short_attempts=short,
                              settings=settings, idea_group=idea.group)

    async def until_long_enough(self, messages: list[dict[str, str]], seed: int, min_chars: int, what: str,
                                ticket: Ticket) -> tuple[str, list[int]]:
        """The first answer of at least `min_chars` characters (stripped), asking
        with seed, seed + 1, … up to `attempts` times; and the discarded lengths."""
        short: list[int] = []
        for attempt in range(self.cfg.attempts):
            text = (await self.chat(messages, seed + attempt, ticket)).strip()
            if len(text) >= max(min_chars, 1):
                return text, short
            short.append(len(text))
        raise _GaveUp(f"{self.cfg.attempts} attempt(s), every {what} shorter than {max(min_chars, 1)} "
                      f"characters (lengths {short}); raise --attempts or check the model")

    async def whodunit(self, idea: Idea, ticket: Ticket) -> Whodunit:
        L = self.cfg.paragraphs
        seed = story_seed(self.cfg.seed, idea.id)
        self.run.progress.item_started(L)
        segments: list[str] = []
        for i in range(1, L + 1):
            template = gp.WHODUNIT_FINAL if i == L else gp.WHODUNIT_PARAGRAPH
            prompt = gp.render_whodunit(template, i=i, L=L, suspects=idea.suspects, culprit=idea.culprit,
                                        distractor=idea.distractor, story=story_join(segments))
            messages = [{"role": "system", "content": gp.WHODUNIT_SYSTEM}, _user(prompt)]
            text, _ = await self.until_long_enough(messages, seed, 1, f"paragraph {i}", ticket)
            segments.append(text)
            self.run.progress.unit_done()
        gen = Generator(model=self.model, system=gp.WHODUNIT_SYSTEM, paragraph_prompt=gp.WHODUNIT_PARAGRAPH,
                        final_prompt=gp.WHODUNIT_FINAL, temperature=self.temperature, max_tokens=self.max_tokens,
                        L=L)
        return Whodunit(id=idea.id, group=self.cfg.group or idea.group or self.model, segments=segments,
                        suspects=idea.suspects, culprit=idea.culprit, distractor=idea.distractor, revelation=L,
                        generator=gen)

    async def write(self) -> None:
        self.model = await self.router.resolve_model(self.cfg.model, "--model")
        # The first chat request waits until the server is known to serve the model.
        need = Need(role="generation", urls=tuple(self.router.urls), flag="--base-url", models=(self.model,),
                    model_flag="--model")
        self.run.client.set_gate(lambda: check_servers(self.run.client, [need]))
        # A pipeline story waits on one request at a time, a whodunit too: one open
        # story per lane slot keeps the lane full.
        async with self.run.serving(self.router) as sched:
            await sched.feed(list(enumerate(idea for _, idea in self.ideas)), self.one, self.cfg.concurrency)

    def output(self) -> bytes:
        return b"".join(self.done[i] for i in sorted(self.done))

    # -- the run's Pipeline ----------------------------------------------------------

    def models(self) -> dict[str, str | None]:
        return {"generation": self.model or self.cfg.model}

    def outcome(self) -> tuple[int, int]:
        return len(self.done), len(self.failed) + len(self.errors)

    def body(self) -> dict[str, Any]:
        """STORIES.run.json after the header."""
        cfg = self.cfg
        return {"ideas_file": str(self.ideas_path), "out": str(self.out), "mode": cfg.mode,
                "ideas": len(self.ideas), "stories": len(self.done),
                "failures": msgspec.to_builtins(self.failed), "input_errors": [str(e) for e in self.errors],
                "sampling": dict(zip(("temperature", "max_tokens", "min_p"), cfg.sampling())),
                "warnings": msgspec.to_builtins(self.checks.warnings())}


def _user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


# --- entry points ---------------------------------------------------------------

async def run_generate(cfg: GenerateConfig, ideas_path: str | os.PathLike[str],
                         out_path: str | os.PathLike[str]) -> GenerateSummary:
    """Generate a story per idea; see the module docstring. Problems that stop the
    run before it starts raise TensionError; a failure during the run ends it with
    status "failed" (or "interrupted"), everything completed kept in the cache."""
    out = Path(out_path)
    if out.is_dir():
        raise ConfigError(f"--out {out}: is a folder; expected a .jsonl file path")
    pool = reference_pool(cfg) if cfg.mode == "full" else []
    ideas, errors = read_ideas(ideas_path, cfg.whodunit)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out_lock(out, out.with_name(f".{out.name}.lock"), "generate", "file"):
        progress = Progress(enabled=cfg.progress, stories=len(ideas), unit="paragraph" if cfg.whodunit else "story")
        if not cfg.whodunit:
            for _ in ideas:
                progress.item_started(1)
        run = open_run(cfg, "generate", progress=progress, partial=out.with_name(out.name + ".partial"),
                       record_path=run_record_path(out), roles=("generation",),
                       refresh=refresh_roles(cfg.refresh, ("generation",)))
        writer = StoryWriter(cfg, ideas, pool, run, errors=errors, ideas_path=ideas_path, out=out)
        run.pipeline = writer
        async with run:
            # no story at all: no file, rather than an empty corpus that looks like a result
            if await run.work(writer.write()) and writer.done:
                with run.outputs():  # a stop signal while it is written is obeyed at once
                    atomic_write(out, writer.output())
    return _summary(writer, run, out)


def _summary(writer: StoryWriter, run: Run, out: Path) -> GenerateSummary:
    cfg = writer.cfg
    return GenerateSummary(
        status=run.status, out=str(out), mode=cfg.mode, model=writer.model or cfg.model, ideas=len(writer.ideas),
        stories=len(writer.done), failures=writer.failed, input_errors=[str(e) for e in writer.errors],
        requests=dict(run.llm.counts.requests), cache_hits=dict(run.store.counts.hits), error=run.error,
        exit_status=run.exit_status, warnings=writer.checks.warnings(), record=run.written)


def run_record_path(out: Path) -> Path:
    """STORIES.jsonl → STORIES.run.json, beside it."""
    stem = out.name[: -len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(stem + ".run.json")
