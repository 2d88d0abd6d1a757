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


from tension.core.prompts import generate as gp
from tension.core.config.generate import MODES, GenerateConfig
from tension.core.inputs.corpus import _json_type
from tension.core.errors import ConfigError, InputError, StatusError
from tension.core.inputs.jsonl import atomic_write, decode_line, iter_lines
from tension.core.run.progress import Progress
from tension.core.llm.protocol import ChatRequest
from tension.core.llm.replicas import Router, parse_replicas
from tension.core.run.lifecycle import Run, client_for, open_store, out_lock, run_blocking
from tension.core.run.record import Failure

__all__ = [
    "MODES", "GenerateConfig", "Idea", "Reference", "StorySettings", "GeneratedStory", "Generator",
    "Whodunit", "Failure", "GenerateSummary", "read_ideas", "reference_pool", "generate", "generate_async",
]

# --- records --------------------------------------------------------------------

class Idea(msgspec.Struct, kw_only=True):
    id: str
    idea: str
    group: str | None = None
    suspects: list[str] = []
    culprit: str = ""
    distractor: str = ""


class Reference(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The Step 0 reference of a story: a title of the pool, or a story file."""

    kind: str  # "title" or "text"
    name: str  # the title as sent, or the file's stem
    sha256: str | None = None  # of the file's text (text mode), so the exact reference is known


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


class Generator(msgspec.Struct, kw_only=True):
    """How a whodunit was generated, so a reader can continue it from any paragraph:
    system + render_whodunit(paragraph_prompt, …) for i < L, final_prompt for i = L."""

    model: str
    system: str
    paragraph_prompt: str
    final_prompt: str
    temperature: float
    max_tokens: int
    L: int


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
    status: str  # "complete", "failed", "interrupted"
    out: str
    mode: str
    model: str | None
    ideas: int
    stories: int
    failures: list[Failure]
    input_errors: list[str]
    requests: int  # chat requests sent (cache misses)
    cache_hits: int
    error: str | None = None


class _GaveUp(Exception):
    """Every attempt of one story (or paragraph) came back too short."""


# --- inputs ---------------------------------------------------------------------

def read_ideas(path: str | os.PathLike, whodunit: bool = False) -> tuple[list[tuple[int, Idea]], list[InputError]]:
    """(line, idea) pairs in file order and an error per bad record. A folder holds
    one idea per .txt file (id = file stem; line 0)."""
    p = Path(path)
    if p.is_dir():
        return _read_idea_folder(p, whodunit)
    ideas: list[tuple[int, Idea]] = []
    errors: list[InputError] = []
    seen: dict[str, int] = {}
    for lineno, raw in iter_lines(p):
        try:
            obj = decode_line(str(p), lineno, raw, dict)
            idea = _idea(str(p), lineno, obj, whodunit)
            if idea.id in seen:
                raise InputError(str(p), lineno, "id", f"duplicate id {idea.id!r} (first on line {seen[idea.id]})")
        except InputError as e:
            errors.append(e)
            continue
        seen[idea.id] = lineno
        ideas.append((lineno, idea))
    if not ideas and not errors:
        errors.append(InputError(str(p), 0, None, "no ideas (the file is empty)"))
    return ideas, errors


def _idea(path: str, lineno: int, obj: dict[str, Any], whodunit: bool) -> Idea:
    def text(name: str, required: bool = True) -> str | None:
        if name not in obj:
            if required:
                raise InputError(path, lineno, name, "missing required field")
            return None
        v = obj[name]
        if not isinstance(v, str):
            raise InputError(path, lineno, name, f"expected a string, got {_json_type(v)}")
        if not v.strip():
            raise InputError(path, lineno, name, "expected a non-empty string")
        return v

    idea = Idea(id=text("id"), idea=text("idea"), group=text("group", required=False))
    if not whodunit:
        return idea
    suspects = obj.get("suspects")
    if not isinstance(suspects, list) or len(suspects) < 2:
        got = "nothing" if suspects is None else _json_type(suspects) if not isinstance(suspects, list) \
            else f"{len(suspects)} name(s)"
        raise InputError(path, lineno, "suspects", f"expected a list of at least 2 names, got {got}")
    for j, s in enumerate(suspects):
        if not isinstance(s, str) or not s.strip():
            got = "an empty string" if isinstance(s, str) else _json_type(s)
            raise InputError(path, lineno, f"suspects[{j}]", f"expected a non-empty string, got {got}")
    if len(set(suspects)) != len(suspects):
        raise InputError(path, lineno, "suspects", "names must be distinct")
    idea.suspects = list(suspects)
    idea.culprit = text("culprit")
    idea.distractor = text("distractor")
    for name, value in (("culprit", idea.culprit), ("distractor", idea.distractor)):
        if value not in suspects:
            raise InputError(path, lineno, name, f"{value!r} is not one of the suspects")
    if idea.distractor == idea.culprit:
        raise InputError(path, lineno, "distractor", "must differ from the culprit")
    return idea


def _read_idea_folder(p: Path, whodunit: bool) -> tuple[list[tuple[int, Idea]], list[InputError]]:
    files = sorted(f for f in p.iterdir() if f.suffix == ".txt" and f.is_file())
    if not files:
        return [], [InputError(str(p), 0, None, "no .txt files in this folder")]
    if whodunit:
        return [], [InputError(str(p), 0, "suspects", "whodunit ideas need suspects, culprit and distractor: "
                                                      "give them as JSON Lines")]
    ideas, errors = [], []
    for f in files:
        try:
            text = f.read_bytes().decode("utf-8")
        except (UnicodeDecodeError, OSError) as e:
            errors.append(InputError(str(f), 0, None, f"cannot read as UTF-8 text: {e}"))
            continue
        if not text.strip():
            errors.append(InputError(str(f), 0, "idea", "empty file"))
            continue
        ideas.append((0, Idea(id=f.stem, idea=text.strip())))
    return ideas, errors


class _Ref(msgspec.Struct, frozen=True):
    reference: Reference
    prompt: str  # the Step 0 prompt


def reference_pool(cfg: GenerateConfig) -> list[_Ref]:
    """Step 0's references: the given story files (full-text mode), else titles."""
    if cfg.reference_stories:
        pool = []
        for path in cfg.reference_stories:
            try:
                text = Path(path).read_bytes().decode("utf-8").strip()
            except (OSError, UnicodeDecodeError) as e:
                raise ConfigError(f"--reference-story {path}: cannot read as UTF-8 text: {e}") from e
            if not text:
                raise ConfigError(f"--reference-story {path}: the file is empty")
            ref = Reference(kind="text", name=Path(path).stem, sha256=hashlib.sha256(text.encode()).hexdigest())
            pool.append(_Ref(ref, gp.WARMUP_TEXT.format(story=text)))
        return pool
    if cfg.titles == "paper":
        titles = list(gp.PAPER_TITLES)
    elif cfg.titles == "recommended":
        titles = list(gp.RECOMMENDED_TITLES)
    else:
        try:
            lines = Path(cfg.titles).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"--titles {cfg.titles}: expected 'paper', 'recommended' or a readable file "
                              f"with one title per line ({e})") from e
        titles = [t.strip() for t in lines if t.strip() and not t.lstrip().startswith("#")]
        if not titles:
            raise ConfigError(f"--titles {cfg.titles}: no titles in the file")
    return [_Ref(Reference(kind="title", name=t), gp.WARMUP_TITLE.format(ref_name=t)) for t in titles]


def story_seed(seed: int, idea_id: str) -> int:
    """The seed of one story's requests: a function of the run seed and the idea
    id, so stories differ from each other and a rerun asks the same requests."""
    h = hashlib.blake2b(f"{seed}\x00{idea_id}".encode(), digest_size=4).digest()
    return int.from_bytes(h, "big") >> 2  # < 2**30: room for + attempt in a signed int32


def choose_reference(pool: list[_Ref], seed: int, idea_id: str) -> _Ref:
    """The paper draws one reference at random per story; ours is drawn from a
    Random seeded by (run seed, idea id): reproducible, independent of order."""
    return random.Random(f"{seed}:{idea_id}").choice(pool)


# --- the run --------------------------------------------------------------------

class StoryWriter:
    """The stories of one generate run: each idea's steps, their requests through
    the run's cached call, and the output lines in idea order."""

    def __init__(self, cfg: GenerateConfig, ideas: list[tuple[int, Idea]], pool: list[_Ref], run: Run):
        self.cfg = cfg
        self.ideas = ideas
        self.pool = pool
        self.run = run
        self.router = Router("generation", parse_replicas(cfg.base_url, "base_url"), run.client,
                             limit=cfg.concurrency, total_seconds=cfg.retry_seconds)
        self.model = cfg.model or ""
        self.temperature, self.max_tokens, self.min_p = cfg.sampling()
        self.template_kwargs = {"enable_thinking": False} if cfg.reasoning_off else None
        self.done: dict[int, bytes] = {}  # idea index -> output line
        self.failed: list[Failure] = []

    async def chat(self, messages: list[dict[str, str]], seed: int) -> str:
        """One answer: from the cache, else from the server (then committed)."""
        req = ChatRequest(model=self.model, messages=messages, n=1, temperature=self.temperature,
                          max_tokens=self.max_tokens, min_p=self.min_p, seed=seed,
                          chat_template_kwargs=self.template_kwargs)
        rec = await self.run.chat.one("endings", req, self._send, role="generation")
        return rec.texts[0]

    def _send(self, req: ChatRequest):
        return self.router.chat(self.run.sched, "", req)

    async def one(self, job: tuple[int, Idea]) -> None:
        index, idea = job
        try:
            rec = await (self.whodunit(idea) if self.cfg.whodunit else self.story(idea))
        except (StatusError, _GaveUp) as e:
            # This idea's request was refused, or its story stayed too short: it
            # fails, the others go on.
            stage = "story" if isinstance(e, _GaveUp) else "request"
            self.failed.append(Failure(id=idea.id, stage=stage, error=str(e)))
            if not self.cfg.whodunit:
                self.run.progress.position_done()
            return
        line = msgspec.json.encode(rec) + b"\n"
        self.done[index] = line
        self.run.committer.lines.append(line)
        if not self.cfg.whodunit:
            self.run.progress.position_done()

    async def story(self, idea: Idea) -> GeneratedStory:
        cfg = self.cfg
        seed = story_seed(cfg.seed, idea.id)
        ref = warmup = beats = None
        if cfg.mode == "full":  # Step 0
            chosen = choose_reference(self.pool, cfg.seed, idea.id)
            ref = chosen.reference
            warmup = await self.chat([_user(chosen.prompt)], seed)
        if cfg.mode in ("beats", "full"):  # Step 1
            constraint = gp.BEATS_CONSTRAINT.format(n=cfg.beats) if cfg.beats else ""
            if warmup is None:
                prompt = gp.ADAPT_FROM_SCRATCH.format(idea=idea.idea, beats_constraint=constraint)
            else:
                prompt = gp.ADAPT_WITH_WARMUP.format(warmup=warmup, idea=idea.idea, beats_constraint=constraint)
            beats = await self.chat([_user(prompt)], seed)
            write = gp.WRITE_WITH_BEATS.format(beats=beats)
        else:
            write = gp.WRITE_VANILLA.format(idea=idea.idea)
        messages = ([{"role": "system", "content": cfg.system}] if cfg.system else []) + [_user(write)]
        text, short = await self.until_long_enough(messages, seed, cfg.min_chars, "story")  # Step 2
        settings = StorySettings(temperature=self.temperature, max_tokens=self.max_tokens, min_p=self.min_p,
                                 seed=seed, beats=cfg.beats, system=cfg.system, reasoning_off=cfg.reasoning_off,
                                 min_chars=cfg.min_chars, max_attempts=cfg.attempts)
        return GeneratedStory(id=f"{idea.id}-{cfg.mode}", text=text, group=cfg.group or cfg.mode,
                              idea_id=idea.id, idea=idea.idea, mode=cfg.mode, model=self.model, reference=ref,
                              warmup=warmup, beats=beats, attempts=len(short) + 1, short_attempts=short,
                              settings=settings, idea_group=idea.group)

    async def until_long_enough(self, messages, seed: int, min_chars: int, what: str) -> tuple[str, list[int]]:
        """The first answer of at least `min_chars` characters (stripped), asking
        with seed, seed + 1, … up to `attempts` times; and the discarded lengths."""
        short: list[int] = []
        for attempt in range(self.cfg.attempts):
            text = (await self.chat(messages, seed + attempt)).strip()
            if len(text) >= max(min_chars, 1):
                return text, short
            short.append(len(text))
        raise _GaveUp(f"{self.cfg.attempts} attempt(s), every {what} shorter than {max(min_chars, 1)} "
                      f"characters (lengths {short}); raise --attempts or check the model")

    async def whodunit(self, idea: Idea) -> Whodunit:
        L = self.cfg.paragraphs
        seed = story_seed(self.cfg.seed, idea.id)
        self.run.progress.add_positions(L)
        segments: list[str] = []
        for i in range(1, L + 1):
            template = gp.WHODUNIT_FINAL if i == L else gp.WHODUNIT_PARAGRAPH
            prompt = gp.render_whodunit(template, i=i, L=L, suspects=idea.suspects, culprit=idea.culprit,
                                        distractor=idea.distractor, story=gp.story_so_far(segments))
            messages = [{"role": "system", "content": gp.WHODUNIT_SYSTEM}, _user(prompt)]
            text, _ = await self.until_long_enough(messages, seed, 1, f"paragraph {i}")
            segments.append(text)
            self.run.progress.position_done()
        gen = Generator(model=self.model, system=gp.WHODUNIT_SYSTEM, paragraph_prompt=gp.WHODUNIT_PARAGRAPH,
                        final_prompt=gp.WHODUNIT_FINAL, temperature=self.temperature, max_tokens=self.max_tokens,
                        L=L)
        return Whodunit(id=idea.id, group=self.cfg.group or idea.group or self.model, segments=segments,
                        suspects=idea.suspects, culprit=idea.culprit, distractor=idea.distractor, revelation=L,
                        generator=gen)

    async def write(self) -> None:
        self.model = await self.router.resolve_model(self.cfg.model, "--model")
        # A pipeline story waits on one request at a time, a whodunit too: one open
        # story per lane slot keeps the lane full.
        async with self.run.scheduler(self.router.lanes()) as sched:
            await sched.feed(list(enumerate(idea for _, idea in self.ideas)), self.one, self.cfg.concurrency)

    def output(self) -> bytes:
        return b"".join(self.done[i] for i in sorted(self.done))


def _user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


# --- entry points ---------------------------------------------------------------

async def generate_async(cfg: GenerateConfig, ideas_path: str | os.PathLike, out_path: str | os.PathLike
                         ) -> GenerateSummary:
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
                progress.add_positions(1)
        run = Run(store=open_store(cfg.cache, cfg.cache_max_gb),
                  client=client_for(cfg, os.environ.get(cfg.api_key_env) or None), progress=progress,
                  partial=out.with_name(out.name + ".partial"), record_path=run_record_path(out),
                  record=lambda run: _record(writer, run, errors, ideas_path, out), roles=("generation",))
        writer = StoryWriter(cfg, ideas, pool, run)
        async with run:
            await run.work(writer.write())
            if run.status == "complete":
                atomic_write(out, writer.output())
    return _summary(writer, run, errors, out)


def _summary(writer: StoryWriter, run: Run, errors: list[InputError], out: Path) -> GenerateSummary:
    cfg = writer.cfg
    return GenerateSummary(
        status=run.status, out=str(out), mode=cfg.mode, model=writer.model or cfg.model, ideas=len(writer.ideas),
        stories=len(writer.done), failures=writer.failed, input_errors=[str(e) for e in errors],
        requests=run.requests["generation"], cache_hits=run.progress.hits, error=run.error)


def run_record_path(out: Path) -> Path:
    """STORIES.jsonl → STORIES.run.json, beside it."""
    stem = out.name[: -len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(stem + ".run.json")


def _record(writer: StoryWriter, run: Run, errors: list[InputError], ideas_path, out: Path) -> dict[str, Any]:
    cfg = writer.cfg
    return {
        **msgspec.to_builtins(_summary(writer, run, errors, out)),
        "ideas_file": str(ideas_path),
        **run.timing(),
        "config": cfg.public(),
        "sampling": dict(zip(("temperature", "max_tokens", "min_p"), cfg.sampling())),
        "versions": run.versions(),
        "http": run.http(),
        "usage_this_run": run.usage_this_run(),
        "usage_all_answers": run.usage_all_answers(),
        "lanes": run.lanes(),
    }


def generate(cfg: GenerateConfig, ideas_path: str | os.PathLike, out_path: str | os.PathLike) -> GenerateSummary:
    """Blocking form of ``generate_async``; SIGTERM stops it like Ctrl-C."""
    return run_blocking(lambda: generate_async(cfg, ideas_path, out_path))
