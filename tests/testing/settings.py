"""A fake server's settings, in two records, and the names their values come from.

- `AnswerSettings`: what a request gets, on either door to the fake answer model
  (the HTTP `LoopbackServer` and the in-process `InProcessServer`): the texts and
  verdicts, the server it answers as (dialect, context, n limits, refusals), the
  routes it serves, what its answers claim, and the time an answer takes (`delay`,
  the "slow" fault's `slow_seconds`, the 429's `retry_after`, a stream cut short).
- `WireSettings`: what only an HTTP server does: where it listens, how many
  requests it serves at once, its key, a gateway's path prefix, a proxy's handling
  of streams, a hosted API's rate limit.

Either door takes an `AnswerSettings`; only LoopbackServer takes a `WireSettings`.
A door's keywords are the two records' field names, each routed to its record
(`route`): so ``LoopbackServer(model="m", dialect="llamacpp", api_key="k")`` and
``InProcessServer("m", dialect="llamacpp")``. What each setting does: the docstring
of tension.testing.openai_server. A server keeps them as plain attributes a test
may set at any time; `LoopbackServer.reset` restores the records' values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
COUNT_PATH = "/extras/tokenize/count"  # llama-cpp-python's token counter (dialect "llamacpp_python")
PROBE_HEADER = "X-Tension-Probe"  # the tool's own probes (core/llm/seed_probe.py), recorded apart
SEEDS = ("hold", "ignored", "arrival")  # how a server takes a generation request's seed (`seeds=`)
MAX_MODEL_LEN = 8192
KINDS = ("generation", "judge", "other")
FAULT_KINDS = (
    "500",
    "503",
    "429",
    "drop",
    "truncate",
    "nonjson",
    "wrong_content_type",
    "few_choices",
    "empty_content",
    "slow",
)
# Faults a retrying client is expected to survive; the standalone --fault-rate default.
TRANSIENT_FAULTS = ("500", "503", "429", "drop", "truncate")
MISBEHAVIOURS = ("think", "random", "always_y", "identical", "echo", "html200", "null_content")
# How a server (or a proxy) can number an answer's choices wrongly (`misnumber=`, `renumbered`).
MISNUMBERINGS = ("zero", "duplicate", "out_of_range", "missing")

_S = TypeVar("_S", bound="_Settings")


class _Settings:
    """What both records share: their field names, their values, and a copy with
    some of them replaced."""

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    def values(self) -> dict[str, Any]:
        """Every field's value, by name (the values themselves, not copies)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def replaced(cls: type[_S], door: str, base: _S | None, knobs: dict[str, Any]) -> _S:
        """`base` (or the defaults) with `knobs` replaced."""
        if base is not None and not isinstance(base, cls):
            raise TypeError(f"{door}: expected {cls.__name__}, got {type(base).__name__}")
        return dataclasses.replace(base or cls(), **knobs)  # type: ignore[type-var]


@dataclass(frozen=True, kw_only=True)
class AnswerSettings(_Settings):
    """What a request gets, on either door (the module docstring)."""

    # the texts: generation choices, judge verdicts, a model that does not do the task
    empty_rate: float = 0.0
    yes_rate: float = 0.3
    malformed_rate: float = 0.0
    misbehave: str | None = None  # one of MISBEHAVIOURS
    # "greedy": a generation request's choices are one text, whatever its temperature and seed, as
    # transformers serve decodes unless sampling is switched on (its request field generation_config
    # '{"do_sample": true}', or the model's generation_config.json): issue 61 H1
    sampling: str = "seeded"
    # fields of a chat request it refuses with transformers serve's 422 "Unexpected fields in the request:
    # {...}" (issue 61 M2: min_p, structured_outputs, …), and whether it drops `logprobs` (answers without
    # them although asked: transformers serve, FastChat; M3)
    refuse_fields: tuple[str, ...] = ()
    drop_logprobs: bool = False
    # "ignored": a seeded generation request is sampled anew each time it comes (FastChat ignores seeds);
    # "arrival": its draw is mixed with the count of chat requests it shared the server with (in flight when
    # it came or arriving while it is served), as transformers serve --continuous-batching sets a request's
    # seed when it joins a batch others share: the same alone, another in company (give `delay` so that
    # requests sent together overlap). Issue 61 M4. A request marked with PROBE_HEADER (the tool's seed
    # probe) is recorded apart (records.py: `count` and `requests` leave it out, `probes` has it), and
    # takes no planted fault and no scripted answer: those are the test's, for the run's requests
    seeds: str = "hold"
    # the server it answers as
    dialect: str = "vllm"  # "llamacpp": llama.cpp's server, as measured; "llamacpp_python"
    max_model_len: int = MAX_MODEL_LEN
    slots: int = 4  # llama.cpp's sequences at once (its n limit, /props total_slots)
    max_n: int = 0  # > 0: at most this many choices per answer, silently
    n_refusal: str | None = None  # with max_n: n above it is a 400 with this message
    refuse: str | None = None  # a chat request whose messages hold this text is a 400 (a content filter)
    batching: bool = False  # True: /detokenize, /v1/completions and templated /tokenize of messages (vLLM's)
    template_quirk: str | None = None  # see render_template
    owned_by: str | None = None  # /v1/models owned_by, when not the dialect's (a proxy in front renames it)
    # the routes it serves
    serve_metrics: bool = True  # False: /metrics answers 404, as a server without it
    serve_tokenize: bool = True  # False: /tokenize is FastAPI's 404, as a server without it
    serve_health: bool = True  # False: /health is FastAPI's 404, as a server without it
    serve_props: bool = True  # False: llama.cpp's /props is a 404 (its n limit only in its 400)
    # what its answers claim, as a proxy in front may change them
    serve_usage: bool = True  # False: answers carry no `usage`, as some OpenAI-compatible servers send
    misnumber: str | None = None  # one of MISNUMBERINGS: the answers' choice indexes made wrong
    misnumber_paths: tuple[str, ...] = (CHAT_PATH, COMPLETIONS_PATH)  # the paths misnumber applies to
    answer_model: str | None = None  # set: answers name this model, not the one asked
    # set (prompt, completion, cached): every answer's `usage` says these, whatever it held (a
    # stub server's fixed usage; cached over prompt: a server that counts its cache wrong)
    fixed_usage: tuple[int, int, int] | None = None
    # the time an answer takes, and how a fault's answer or a stream ends
    delay: float = 0.0  # seconds added to every chat request (llama.cpp: while it holds its slots)
    slow_seconds: float = 5.0  # the "slow" fault
    retry_after: str | None = "0"  # the 429's Retry-After header (None: no header)
    # > 0: a stream ends with [DONE] after this many words, unfinished; -1: after the role event, before
    # the first word (llama-cpp-python cuts a waiting request's stream so)
    stream_cut: int = 0
    # the fake's own books
    record: bool = True  # False: no `requests` kept (a benchmark's long run)
    prefix_cache_blocks: int = 2_000_000  # the prefix cache forgets all past this many blocks


@dataclass(frozen=True, kw_only=True)
class WireSettings(_Settings):
    """What only an HTTP server does (the module docstring): LoopbackServer's alone."""

    host: str = "127.0.0.1"
    port: int = 0
    # > 0: at most this many chat requests are served at once, the rest wait (a GPU's
    # batch); with `delay`, capacity is max_concurrent / delay requests/s
    max_concurrent: int = 0
    api_key: str | None = None  # set: every request needs "Authorization: Bearer <api_key>"
    echo_auth: bool = False  # the 401 body echoes the header it got
    prefix: str = ""  # every path also served under it (a gateway's /api), set before start
    stream_ignored: bool = False  # True: a chat request asking "stream": true gets the plain JSON body
    stream_always: bool = False  # True: chat answers stream even when not asked (a proxy)
    serve_completions: bool = True  # False: /v1/completions is a 404 even with batching
    # False: answers' usage (plain and streamed) without `prompt_tokens_details`, so no `cached_tokens`,
    # as transformers serve, FastChat and llama.cpp send it (issue 61: "reported 0" is not "not reported")
    serve_cached_tokens: bool = True
    # (N, T): a hosted API's rate limit, N chat requests per window of T s, told in OpenAI's
    # x-ratelimit-* headers on every chat answer; the N+1st in a window is a 429 without Retry-After
    rate_limit: tuple[int, float] | None = None


def route(door: str, knobs: dict[str, Any], takes: Sequence[type[_Settings]]) -> list[dict[str, Any]]:
    """`knobs` (a door's keywords) split by the record of `takes` each names a field
    of, in `takes`' order. A name of none is a TypeError: a wire setting given to a
    door that takes none is said as such, any other name with every setting the door takes."""
    parts = [{k: v for k, v in knobs.items() if k in cls.names()} for cls in takes]
    rest = sorted(set(knobs).difference(*(cls.names() for cls in takes)))
    if not rest:
        return parts
    wire = [k for k in rest if k in WireSettings.names()]
    if wire and WireSettings not in takes:
        raise TypeError(f"{door}: {wire} are settings of the wire (WireSettings, LoopbackServer's), "
                        f"not of the answers")
    every = sorted(set().union(*(cls.names() for cls in takes)))
    raise TypeError(f"{door}: unknown setting(s) {rest}; expected some of {every}")
