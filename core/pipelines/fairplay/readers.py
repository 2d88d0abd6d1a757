"""How the readers of paper 003 are asked (docs/fairplay.md): the gullible and
experienced readers by prompt, the know-it-all by K continuations of the story by
its own generator, each named a culprit by a judge; and the suspect extraction.

Raw answers are cached and parsed when used (prompts/answers.py), so a rerun sends
nothing and a better parser needs no new requests. An answer that cannot be parsed
is asked again with the next seed (a new cache key), at most `parse_retries` times;
no number is ever filled in.

--reader-constraint json on a server that refuses vLLM's structured_outputs
(transformers serve's 422) falls back to the free answers the paper's readers gave,
read by the same parser, said once (core/pipelines/unconstrained.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

import msgspec

from tension.core.config.fairplay import FairPlayConfig, experienced_readers
from tension.core.errors import InputError, RefusedError
from tension.core.inputs.whodunits import WhodunitStory
from tension.core.llm.preflight import Need, check_servers
from tension.core.llm.protocol import ChatRequest
from tension.core.llm.replicas import parse_replicas
from tension.core.llm.router import Router
from tension.core.llm.ticket import NO_TICKET, Ticket
from tension.core.pipelines.answer_checks import ReaderChecks
from tension.core.pipelines.unconstrained import READER_PARSE, Unconstrained
from tension.core.prompts import readers as rp
from tension.core.prompts.answers import Culprit, match_suspect, parse_culprit, parse_distribution, parse_suspect_list
from tension.core.run.lifecycle import Run, warn
from tension.core.run.reads import Asks

__all__ = ["Job", "Value", "Readers", "distribution_schema", "culprit_schema"]


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


class Job(msgspec.Struct, frozen=True):
    """One reader value to find: a story's reader at a paragraph (for the
    know-it-all: the checkpoint its continuations start after)."""

    story: int
    reader: str
    paragraph: int


class _Parse(Protocol):
    error: str | None


P = TypeVar("P", bound=_Parse)


class Value(NamedTuple):
    """A reader's distribution over the suspects, or why there is none."""

    probs: list[float] | None
    error: str | None


class _Names(msgspec.Struct):
    names: list[str] | None
    error: str | None


class Readers:
    """How each reader of paper 003 is asked, through `llm` (the run's engine, or a
    replay of the cache that never sends): the prompted readers, the
    know-it-all's continuations and culprit judge, and the suspect extraction.
    Each asking method returns a `Value`; the caller records it. Without a `run`
    (a replay) there are no servers."""

    def __init__(self, cfg: FairPlayConfig, stories: list[WhodunitStory], llm: Asks, run: Run | None = None,
                 path: str = ""):
        self.cfg = cfg
        self.path = path  # of the stories file, for error messages
        self.stories = stories
        self.llm = llm
        self.run = run
        limit = {"reader": cfg.reader_concurrency, "judge": cfg.judge_concurrency, "generation": cfg.gen_concurrency}
        url = {"reader": cfg.base_url, "judge": cfg.judge_base_url or cfg.base_url,
               "generation": cfg.generator_base_url or cfg.base_url}
        self.routers = {role: Router(role, parse_replicas(url[role], "base_url"), run.client, limit=limit[role],
                                     timeout=cfg.timeout) for role in limit} if run is not None else {}
        self.reader_model = cfg.reader_model or ""
        self.judge_model = cfg.judge_model or ""
        self.template_kwargs = {"enable_thinking": False} if cfg.reasoning_off else None
        self.checks = ReaderChecks()  # degenerate answers, warned about at the end
        # the answers' constraint as the requests carry it: json, or none where a server refuses it
        self.constraint = Unconstrained("--reader-constraint", cfg.reader_constraint, READER_PARSE,
                                        "fairplay_run.json `reader_constraint_used`", lambda m: warn(m, "note"))

    async def resolve_models(self, run: Run) -> None:
        """Model ids for the cache keys; given ids are used as they are, so a fully
        cached rerun sends nothing."""
        requests = run.llm.counts.requests
        self.reader_model = await self.routers["reader"].resolve_model(self.cfg.reader_model, "--reader-model",
                                                                       requests)
        self.judge_model = self.judge_model or self.reader_model
        client = run.client  # the first chat request waits until these servers and models are checked
        client.set_gate(lambda: check_servers(client, self.server_needs(), requests))

    def server_needs(self) -> list[Need]:
        """The servers and models of the readers, the judge and (for the know-it-all) the generators."""
        cfg, urls = self.cfg, {role: tuple(r.urls) for role, r in self.routers.items()}
        needs = [Need(role="reader", urls=urls["reader"], flag="--base-url", models=(self.reader_model,),
                      model_flag="--model"),
                 Need(role="judge", urls=urls["judge"], flag="--judge-base-url" if cfg.judge_base_url else "--base-url",
                      models=(self.judge_model,), model_flag="--judge-model")]
        if "know_it_all" in cfg.readers:
            models = ((cfg.generator_model,) if cfg.generator_model else
                      tuple(sorted({st.generator.model for st in self.stories if st.generator is not None})))
            flag = "--generator-base-url" if cfg.generator_base_url else "--base-url"
            model_flag = "--generator-model" if cfg.generator_model else "the stories' generator.model"
            needs.append(Need(role="generation", urls=urls["generation"], flag=flag, models=models,
                              model_flag=model_flag))
        return needs

    # -- one cached chat request ----------------------------------------------

    async def chat(self, role: str, server: str, req: ChatRequest, db: str, ticket: Ticket = NO_TICKET
                   ) -> list[str]:
        """The answer texts of `req`, sent to the `server` role's router (routed by the
        story: its `ticket`): from the cache, or asked and committed. Requests are
        counted under `role`."""
        if db == "endings":
            return (await self.llm.endings(server, req, ticket=ticket, role=role)).texts
        return [(await self.llm.answer(server, req, ticket=ticket, role=role)).text]

    async def ask_parsed(self, role: str, server: str, model: str, messages: list[dict[str, str]],
                         temperature: float, max_tokens: int, parse: Callable[[str], P],
                         schema: dict[str, Any] | None = None, ticket: Ticket = NO_TICKET) -> P:
        """Ask until `parse(answer)` has no error: the first try at `temperature`,
        each re-ask at least `retry_temperature` with the next seed. Returns the
        last parse result (with its error when every try failed)."""
        cfg = self.cfg
        result: P | None = None
        for attempt in range(cfg.parse_retries + 1):
            if attempt > 0:
                # Each re-ask must be a new request (a new cache key): the next seed,
                # or without seeds a temperature 0.01 higher than the previous re-ask.
                temperature = max(temperature, cfg.retry_temperature) + (0.0 if cfg.seeds or attempt == 1 else 0.01)
            while True:
                if server in self.routers:  # a server known to refuse the constraint is not sent it
                    self.constraint.known(self.routers[server].every_server())
                req = ChatRequest(model=model, messages=messages, n=1, temperature=round(temperature, 6),
                                  max_tokens=max_tokens, seed=cfg.seed + attempt if cfg.seeds else None,
                                  chat_template_kwargs=self.template_kwargs,
                                  structured_outputs={"json": schema} if schema and self.constraint.constrained
                                  else None)
                try:
                    (text,) = await self.chat(role, server, req, "verdicts", ticket)
                    break
                except RefusedError as e:
                    if not self.constraint.refused(e):  # else asked again unconstrained: the paper's readers
                        raise
            result = parse(text)
            self.checks.answer(role, result.error is None)
            if result.error is None:
                return result
        assert result is not None  # parse_retries >= 0: asked at least once
        return result

    # -- suspects -------------------------------------------------------------

    async def extract_suspects(self, si: int, ticket: Ticket = NO_TICKET) -> None:
        st = self.stories[si]
        cfg = self.cfg
        words = rp.story_join(st.segments).split()
        text = " ".join(words[: cfg.extract_words])

        def parse(answer: str) -> _Names:
            return _Names(*parse_suspect_list(answer))

        schema = {"type": "object", "required": ["suspects"], "additionalProperties": False,
                  "properties": {"suspects": {"type": "array", "items": {"type": "string"}, "minItems": 2,
                                              "maxItems": cfg.max_suspects}}}
        res = await self.ask_parsed("reader", "judge", self.judge_model,
                                    rp.extract_messages(text, cfg.max_suspects), cfg.judge_temperature,
                                    cfg.reader_max_tokens, parse, schema, ticket)
        if res.error is not None:
            raise InputError(self.path, st.line, "suspects", f"missing, and the extraction failed: {res.error}")
        names: list[str] = []
        for n in res.names or []:  # the labels' spelling wins: "Baron Gruner" → "Adelbert Gruner"
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

    async def prompted_reader(self, job: Job, ticket: Ticket = NO_TICKET) -> Value:
        st = self.stories[job.story]
        cfg = self.cfg
        prefix = st.segments[: job.paragraph]
        if job.reader == "gullible":
            messages = rp.gullible_messages(prefix, st.suspects)
        else:
            n = experienced_readers(cfg)[job.reader]
            messages = rp.experienced_messages(prefix, st.suspects, st.L, self.previous_stories(job.story, n))
        res = await self.ask_parsed("reader", "reader", self.reader_model, messages,
                                    cfg.reader_temperature, cfg.reader_max_tokens,
                                    lambda text: parse_distribution(text, st.suspects),
                                    distribution_schema(st.suspects), ticket)
        if res.error is not None or res.probs is None:
            return Value(None, f"unusable answer after {cfg.parse_retries + 1} tries: {res.error}")
        self.checks.value(job.reader, messages, res.probs)
        return Value(res.probs, None)

    def previous_stories(self, si: int, n: int) -> list[str]:
        """The `n` stories before this one in the input that share its generator
        model (or, without a generator, its group), oldest first."""
        if n == 0:
            return []
        st = self.stories[si]
        def same(other: WhodunitStory) -> bool:
            if st.generator is not None:
                return other.generator is not None and other.generator.model == st.generator.model
            return other.generator is None and other.group == st.group
        earlier = [o for o in self.stories[:si] if same(o)]
        return [rp.story_join(o.segments) for o in earlier[-n:]]

    async def know_it_all(self, job: Job, ticket: Ticket = NO_TICKET) -> Value:
        """K continuations from after paragraph `job.paragraph` to L, each named a
        culprit by the judge; the relative frequencies over the suspects."""
        st = self.stories[job.story]
        cfg = self.cfg
        c = job.paragraph
        if c >= st.L:
            # Nothing is left to write: the judge names the culprit of the story itself.
            return self.frequencies(st, [await self.continuation_culprit(st, list(st.segments), 0, ticket)], 1)
        first = await self.continue_paragraph(st, list(st.segments[:c]), None, cfg.k, ticket)
        assert self.run is not None  # a replay asks no know-it-all
        verdicts = await self.run.sched.map(
            lambda k: self.continuation_culprit(st, list(st.segments[:c]) + [first[k]], k, ticket), range(cfg.k))
        return self.frequencies(st, verdicts, cfg.k)

    @staticmethod
    def frequencies(st: WhodunitStory, verdicts: Sequence[Culprit], k: int) -> Value:
        """The suspects' relative frequencies among the verdicts naming one."""
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
            return Value(None, f"none of {k} continuations names a suspect as culprit "
                               f"({nobody} name nobody, {unusable} unusable judge answers)")
        return Value([x / named for x in counts], None)

    async def continuation_culprit(self, st: WhodunitStory, paragraphs: list[str], k: int,
                                   ticket: Ticket = NO_TICKET) -> Culprit:
        """Write continuation k to the end, then ask the judge whom it reveals."""
        cfg = self.cfg
        while len(paragraphs) < st.L:
            (text,) = await self.continue_paragraph(st, paragraphs, k, 1, ticket)
            paragraphs.append(text)
        return await self.ask_parsed("judge", "judge", self.judge_model,
                                     rp.culprit_messages(paragraphs, st.suspects), cfg.judge_temperature,
                                     cfg.judge_max_tokens, lambda text: parse_culprit(text, st.suspects),
                                     culprit_schema(st.suspects), ticket)

    async def continue_paragraph(self, st: WhodunitStory, paragraphs: list[str], k: int | None, n: int,
                                 ticket: Ticket = NO_TICKET) -> list[str]:
        """Paragraph len(paragraphs)+1 by the story's generator. Continuation k
        samples with seed + k throughout; the first paragraph of all K is one
        request with n = K and seed (vLLM samples its choice k with seed + k)."""
        g = st.generator
        assert g is not None  # only stories with a generator have a know-it-all
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
        return [t.strip() for t in await self.chat("generation", "generation", req, "endings", ticket)]
