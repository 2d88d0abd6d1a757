"""What one server can do, learned once per server and kept in one record.

The tool is built for vLLM; llama.cpp's `llama-server`, LiteLLM's proxy and hosted
APIs differ in ways a run must know before it sends (measured:
../shared/reviews/external-servers-2026-12-01.md, docs/servers.md). Each
difference is one field of `ServerTraits`, learned from what the server says of
itself (`/v1/models` `owned_by` and `meta`, llama.cpp's `/props`) or from what it
did (a short answer, a 400 naming the most `n` it takes), never guessed from
flags scattered over the code. Each server's `Server` record holds its traits
(core/llm/servers.py, `Client.server(url)`) and run.json shows them (`servers`).
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

from tension.core.llm.protocol import ModelCard, Props

__all__ = ["ServerTraits", "Seeds", "BY_KIND", "learn", "n_limit", "names_n", "is_context_error", "grammar_of",
           "KIND_NAMES", "COUNT_PATH"]

Kind = Literal["vllm", "llamacpp", "llamacpp_python", "other"]
# Whether a seeded request sent again gets the same answer: "held"; "ignored" (not even sent
# alone twice: FastChat); "depend on arrival" (the same alone, another beside other requests:
# transformers serve --continuous-batching, llama.cpp's batched decoding). docs/servers.md "Seeds".
Seeds = Literal["held", "ignored", "depend on arrival"]
BY_KIND = "its kind"  # `seeds_from` of what a server's kind settles
# What each kind is, in messages (`Server.what`).
KIND_NAMES: dict[str, str] = {"vllm": "vLLM", "llamacpp": "llama.cpp's server",
                              "llamacpp_python": "llama-cpp-python's server", "other": "an OpenAI-compatible server"}
# llama-cpp-python's token counter: {"input": text} -> {"count": N} (it has no /tokenize).
COUNT_PATH = "/extras/tokenize/count"

# A 400 that names the parameter n: 'n', "n", `n`, or n as a word ("n must be at most 8").
_NAMES_N = re.compile(r"(?<![\w'\"`.-])['\"`]?n['\"`]?(?![\w'\"`-])")
# The most a refusal says n may be, in the wordings seen: llama.cpp's "Field 'n': Value must be
# between 1 <= value <= 4, but got 8", OpenAI's "Expected a value <= 8, but got 20", and
# "at most 8", "maximum (of|is) 8", "up to 8", "between 1 and 8", "≤ 8".
_MOST = re.compile(r"(?:<=|≤|at most|maximum(?: value)?(?: of| is)?|up to|no more than|between \d+ and)\s*(\d+)",
                   re.IGNORECASE)


class ServerTraits(msgspec.Struct, kw_only=True):
    """One server's capabilities as the run learned them (None: not known)."""

    url: str
    # from /v1/models owned_by: "vllm", "llamacpp", "me" with a token counter that answers
    # (llama-cpp-python), anything else
    kind: Kind = "other"
    # Sequences the server runs at once (llama.cpp's /props total_slots); None: it does not say.
    slots: int | None = None
    # The most choices one request gets, and how that was learned ("slots", "HTTP 400", "short answers").
    max_n: int | None = None
    max_n_from: str | None = None
    context_len: int | None = None  # per sequence: vLLM's max_model_len, llama.cpp's meta.n_ctx
    # How it counts tokens: vLLM's /tokenize {model, prompt}→count, llama.cpp's {content}→tokens, or
    # llama-cpp-python's /extras/tokenize/count {input}→count.
    tokenize: Literal["vllm", "llamacpp", "count"] = "vllm"
    # How --judge-constraint choice / --reader-constraint json reach it: vLLM's
    # structured_outputs, or llama.cpp's grammar / response_format.
    constraint: Literal["structured_outputs", "grammar"] = "structured_outputs"
    # llama.cpp's usage counts one choice of an n-choice answer: the token totals are the server's figure.
    usage: Literal["all choices", "one choice"] = "all choices"
    # vLLM (with the embedded server's seeded-sampling fix) answers a seeded request the
    # same whatever else it is running; llama.cpp's batched decoding does not.
    batch_invariant: bool | None = None
    # Whether its seeds hold (`Seeds`) and how that was learned: its kind (vLLM, llama.cpp,
    # llama-cpp-python), else a probe before the first seeded generation request the run sends it
    # (core/llm/seed_probe.py) or an earlier run's probe kept in the cache folder (core/run/taught.py);
    # None: not learned (no seeded generation request was sent). `probe_requests`: the probe's
    # requests, which no count of the run's requests holds (run.json `http`, `requests`, `usage`).
    seeds: Seeds | None = None
    seeds_from: str | None = None
    probe_requests: int = 0


def learn(url: str, models: list[ModelCard], props: Props | None, counts: bool = False) -> ServerTraits:
    """The traits a server's /v1/models (and, for llama.cpp, /props) answer tells;
    `counts`: its COUNT_PATH answered (with owned_by "me": llama-cpp-python)."""
    owner = next((m.owned_by for m in models if m.owned_by), None)
    kind: Kind = ("vllm" if owner == "vllm" else "llamacpp" if owner == "llamacpp"
                  else "llamacpp_python" if owner == "me" and counts else "other")
    ctx = next((m.max_model_len or (m.meta.n_ctx if m.meta else None) for m in models
                if m.max_model_len or (m.meta and m.meta.n_ctx)), None)
    t = ServerTraits(url=url, kind=kind, context_len=ctx, batch_invariant=True if kind == "vllm" else None)
    if kind == "vllm":
        t.seeds, t.seeds_from = "held", BY_KIND
    if kind == "llamacpp":
        t.tokenize, t.constraint, t.usage, t.batch_invariant = "llamacpp", "grammar", "one choice", False
        # measured: 74 of 300 seeded endings the same through a router (external-servers-2026-12-02.md);
        # a short probe would often pass (the batches' numerics part answers only over long texts), so
        # its kind settles it, and no probe is sent
        t.seeds, t.seeds_from = "depend on arrival", BY_KIND
        slots = props.total_slots if props is not None else None
        if slots:
            # llama.cpp refuses n above its slots (HTTP 400): ask in chunks of that many
            t.slots, t.max_n, t.max_n_from = slots, slots, "slots (/props total_slots)"
    if kind == "llamacpp_python":
        # as measured (../shared/reviews/external-servers-2026-12-02.md section 1): it drops n
        # (one choice per request), serves one request at a time (a lock), honours llama.cpp's
        # grammar / response_format, and counts tokens at COUNT_PATH
        t.tokenize, t.constraint = "count", "grammar"
        t.slots, t.max_n, t.max_n_from = 1, 1, "its kind (llama-cpp-python drops n)"
        t.seeds, t.seeds_from = "held", BY_KIND + " (one request at a time, seeded as asked)"
    return t


def names_n(message: str) -> bool:
    """Whether a 400's message names the field `n` (and is not about the context):
    an n limit (core/llm/failures.py `status_error` types it `NLimitError`)."""
    return bool(_NAMES_N.search(message)) and not is_context_error(message)


def n_limit(message: str, asked: int | None = None) -> int | None:
    """The most `n` a server's 400 says it takes, in any wording that names `n` and
    a bound (below `asked`, the n refused, when given); None when the message is
    another, or names no number (core/llm/servers.py `NAsk` then asks smaller)."""
    if not names_n(message):
        return None
    found = [int(x) for x in _MOST.findall(message)]
    if asked is not None:
        below = [x for x in found if 1 <= x < asked]
        if not below:  # no bound in a known form: the largest number below the n refused
            below = [int(x) for x in re.findall(r"\d+", message) if 1 <= int(x) < asked]
        return max(below) if below else None
    return min((x for x in found if x >= 1), default=None)


def is_context_error(message: str) -> bool:
    """Whether a 400 says the prompt does not fit the context (llama.cpp's
    exceed_context_size_error, vLLM's "maximum context length")."""
    low = message.lower()
    return "exceeds the available context size" in low or "maximum context length" in low


def grammar_of(structured: dict[str, object]) -> dict[str, object] | None:
    """llama.cpp's form of vLLM's `structured_outputs`: a GBNF grammar for a choice,
    the JSON-object response format for a schema (llama.cpp refuses the reader
    schema's `items: false`, so its json_schema is not used); None: no such form."""
    choice = structured.get("choice")
    if isinstance(choice, list) and choice and all(isinstance(c, str) for c in choice):
        alts = " | ".join('"' + c.replace("\\", "\\\\").replace('"', '\\"') + '"' for c in choice)
        return {"grammar": f"root ::= {alts}"}
    if "json" in structured:
        return {"response_format": {"type": "json_object"}}
    return None
