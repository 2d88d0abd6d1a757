"""The requests `score` sends, and the servers it sends them to.

`ScoreRequests` builds a position's generation request (n endings) and its judge
requests (one per ending) from the settings and the resolved model ids; every
byte of them is part of a cache key, so `estimate` (which looks the keys up) and
`bench` (which sends them) build theirs here too, without a run.

Seeds (docs/metrics.md 1.2–1.3): a seeded run's position gets its own seed,
`position_seed(--seed, prefix)` of the story text its prompt continues, so no two
positions of a story share the random stream of their endings (choice i of a
request is sampled with seed + i: core/llm/choices.py); --seed-scheme run seeds
every position with --seed itself, as releases before 2026-12-07 did.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence

from tension.cache.keys import request_key
from tension.core.config import ScoreConfig
from tension.core.config.score import MOST_ENDINGS
from tension.core.config.settings import extra_body
from tension.core.inputs.segment import continuation_text, prefix_text
from tension.core.llm.choices import chunk
from tension.core.llm.client import Client
from tension.core.llm.preflight import Need, check_servers
from tension.core.llm.protocol import ChatRequest
from tension.core.llm.router import Router
from tension.core.pipelines.unconstrained import JUDGE_PARSE, Unconstrained
from tension.core.prompts import score as prompts
from tension.core.run.lifecycle import warn

__all__ = ["ScoreRequests", "score_routers", "resolve_models", "server_needs", "position_seed", "SEED_SPAN"]

# Position seeds lie in [0, SEED_SPAN): seed + i of every choice i < MOST_ENDINGS (the
# largest --endings or --max-endings) is then at most 2**31 − 2, which every server
# takes (llama.cpp a uint32, others an int32 or int64).
SEED_SPAN = 2**31 - MOST_ENDINGS


def position_seed(seed: int, prefix: str) -> int:
    """The seed of the generation request of the position whose prompt continues
    `prefix` (the story's sentences s[0:k], joined as the prompt holds them), in a run
    seeded `seed`: the first 8 bytes of BLAKE2b of "{seed}\x00{prefix}" (UTF-8), big-
    endian, modulo SEED_SPAN. A function of the request's own text, so the same on
    every platform and in every process, the same when a story is renamed, and
    another stream at every position of a story."""
    data = f"{seed}\x00{prefix}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big") % SEED_SPAN


class ScoreRequests:
    """A run's requests, given its settings and model ids."""

    def __init__(self, cfg: ScoreConfig, gen_model: str, judge_model: str):
        self.cfg = cfg
        self.gen_model = gen_model
        self.judge_model = judge_model
        self.template_kwargs = {"enable_thinking": False} if cfg.reasoning_off else None
        # a server's own switches (--extra-body, --judge-extra-body), in the body and the cache keys
        self.gen_extra = extra_body(cfg.extra_body, "extra_body")
        self.judge_extra = extra_body(cfg.judge_extra_body, "judge_extra_body")
        # the judge's constraint as its requests carry it: --judge-constraint choice falls back to the
        # paper's free answers on a server that refuses it (core/pipelines/unconstrained.py)
        self.constraint = Unconstrained("--judge-constraint", cfg.judge_constraint, JUDGE_PARSE,
                                        "run.json `judge_constraint_used`", lambda m: warn(m, "note"))

    def generation(self, prefix: str, n: int | None = None) -> ChatRequest:
        """The generation request of n endings (default --endings) of `prefix`, seeded
        as --seed-scheme says (module docstring)."""
        c = self.cfg
        n = c.endings if n is None else n
        return ChatRequest(model=self.gen_model, messages=prompts.ending_messages(prefix), n=n,
                           temperature=c.temperature, top_p=c.top_p, max_tokens=c.max_tokens,
                           seed=self.seed_of(prefix), chat_template_kwargs=self.template_kwargs,
                           extra_body=self.gen_extra)

    def seed_of(self, prefix: str) -> int | None:
        """The seed of the generation request that continues `prefix`: None unseeded;
        --seed itself with --seed-scheme run; else `position_seed`."""
        c = self.cfg
        if c.seed is None or c.seed_scheme == "run":
            return c.seed
        return position_seed(c.seed, prefix)

    def judge(self, messages: list[dict[str, str]]) -> ChatRequest:
        c, used = self.cfg, self.constraint.used
        logprobs = used == "logprobs"
        return ChatRequest(model=self.judge_model, messages=messages, n=1, temperature=c.judge_temperature,
                           max_tokens=c.judge_max_tokens, chat_template_kwargs=self.template_kwargs,
                           structured_outputs={"choice": ["Y", "N"]} if used == "choice" else None,
                           logprobs=True if logprobs else None, top_logprobs=20 if logprobs else None,
                           extra_body=self.judge_extra)

    def position_key(self, head: str, tail: str, endings: list[str]) -> bytes:
        """Key of a position's judged record: everything its n judge requests are made
        of (the request without the user text, whose head and tail are shared and
        whose middle is the ending), so it changes whenever any of their keys would."""
        return request_key("judged", {"request": self.judge([]), "system": prompts.JUDGE_SYSTEM,
                                      "head": head, "tail": tail, "endings": endings})

    # -- of one position: the story's sentences and k ------------------------------

    def endings(self, sentences: Sequence[str], k: int) -> ChatRequest:
        """The generation request of the position: n endings of the prefix s[0:k]."""
        return self.generation(prefix_text(sentences, k))

    def endings_round(self, sentences: Sequence[str], k: int, r: int) -> ChatRequest:
        """Adaptive endings' round r (0-based) of the position: choices r·R … of the
        position's one seeded request for --max-endings, asked alone (core/llm/choices.py
        `chunk`: seed + r·R), so its endings are those a fixed run of M endings holds
        there, and its cache key its own."""
        c = self.cfg
        whole = self.generation(prefix_text(sentences, k), n=c.max_endings)
        start = r * c.round_endings
        return chunk(whole, start, min(c.round_endings, c.max_endings - start))

    def judge_parts(self, sentences: Sequence[str], k: int) -> tuple[str, str]:
        """The (head, tail) every judge prompt of the position shares (around its ending)."""
        return prompts.judge_parts(sentences[k - 1], continuation_text(sentences, k, self.cfg.continuation_words))

    def verdicts(self, head: str, tail: str, endings: Sequence[str]) -> list[tuple[int, ChatRequest]]:
        """The judge request of each non-empty ending, with the ending's index (an
        empty ending is not judged)."""
        return [(i, self.judge(prompts.judge_messages_from_parts(head, tail, e)))
                for i, e in enumerate(endings) if e.strip()]


def score_routers(cfg: ScoreConfig, client: Client, on_change: Callable[[str], None] | None = None
                  ) -> tuple[Router, Router]:
    """The generation router (which also answers /tokenize) and the judge router. A
    replica taken out or re-admitted is told at once on stderr (and to `on_change`,
    for the run record), not only when the run ends."""
    def told(event: str) -> None:
        warn(event)
        if on_change is not None:
            on_change(event)

    gen = Router("generation", cfg.generation_replicas(), client, limit=cfg.gen_concurrency,
                 tokenize_limit=cfg.tokenize_concurrency, timeout=cfg.timeout, on_change=told)
    judge = Router("judge", cfg.judge_replicas(), client, limit=cfg.judge_concurrency, timeout=cfg.timeout,
                   on_change=told, batch=cfg.judge_batch)
    # a server that cannot take batched prompts is no fault (any OpenAI-compatible one): a note
    judge.batcher.notice = lambda message: warn(message, "note")
    return gen, judge


async def resolve_models(cfg: ScoreConfig, gen: Router, judge: Router, requests: dict[str, int],
                         judge_needed: bool = True,
                         after_check: Callable[[], Awaitable[None]] | None = None) -> ScoreRequests:
    """The requests with the model ids of the cache keys: given ids as they are (so a
    cached rerun sends nothing), else the server's first model; several replicas of
    a role are each asked, and must all serve the model. The judge defaults to the
    generation model when it runs on the same servers.

    The client's first chat or /tokenize request then waits for `server_needs` to
    be checked (core/llm/preflight.py); without `judge_needed` (estimate sends no
    judge request) only the generation servers are. `after_check` runs after the
    check, still before that first request (score reads the servers' /metrics there)."""
    gen_model = await gen.resolve_model(cfg.model, "--model", requests)
    same = judge.urls == gen.urls
    judge_model = await judge.resolve_model(cfg.judge_model or (gen_model if same else None), "--judge-model",
                                            requests)
    reqs = ScoreRequests(cfg, gen_model, judge_model)
    needs = server_needs(cfg, reqs, gen, judge)[: 2 if judge_needed else 1]
    async def gate() -> None:
        await check_servers(gen.client, needs, requests)
        if after_check is not None:
            await after_check()

    gen.client.set_gate(gate)
    return reqs


def server_needs(cfg: ScoreConfig, reqs: ScoreRequests, gen: Router, judge: Router) -> list[Need]:
    """The generation servers, then the judge servers."""
    return [Need(role="generation", urls=tuple(gen.urls), flag="--base-url", models=(reqs.gen_model,),
                 model_flag="--model"),
            Need(role="judge", urls=tuple(judge.urls), flag="--judge-base-url" if cfg.judge_base_url else "--base-url",
                 models=(reqs.judge_model,), model_flag="--judge-model")]
