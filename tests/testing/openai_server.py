"""A deterministic OpenAI-compatible (vLLM-flavoured) server for tests and benchmarks.

It stands in for a vLLM server: the same endpoints, the same error JSON, the same
prefix-cache counters, but answers come from hashes, not from a model, so a test can
compute every answer in advance and runs take milliseconds. It imports nothing from
`tension`: it is a fixed point the code under test is measured against.

In a test::

    with LoopbackServer(model="test-model") as srv:
        base = srv.base_url                       # "http://127.0.0.1:PORT" (no /v1)
        srv.fail_next("503", times=2)             # the next two chat requests fail
        ...
        assert srv.count(kind="judge") == 100

As a process (benchmarks, kill/resume tests)::

    python -m tension.testing.openai_server --port 8123 [--model M] [--delay S] [--max-concurrent K]
                                  [--fault-rate 0.1 --seed 1]

prints ``listening on http://127.0.0.1:PORT`` (flushed) and serves until SIGINT/SIGTERM.

Endpoints
---------
- ``GET /v1/models``; ``GET /health``; ``GET /metrics`` (Prometheus text:
  ``vllm:prefix_cache_queries_total``, ``vllm:prefix_cache_hits_total`` (tokens),
  ``vllm:request_success_total``, ``vllm:prompt_tokens_total``,
  ``vllm:generation_tokens_total``); in the llama.cpp dialect llama-server's own
  ``llamacpp:prompt_tokens_total`` and ``llamacpp:tokens_predicted_total`` (no
  prefix-cache counter, as ``llama-server --metrics``).
- ``POST /tokenize`` with ``prompt`` (or ``messages``): ``{"count", "max_model_len",
  "tokens"}``. Tokens are the matches of ``\\w+|[^\\w\\s]`` (`count_tokens`).
- With ``batching=True`` (``--batching``), vLLM's extras that the judge's batched
  path needs (core/llm/batch.py): ``/tokenize`` with ``messages`` renders the
  server's chat template (`render_template`: ``<|role|>`` lines, the assistant line
  with add_generation_prompt, an empty think block when
  ``chat_template_kwargs.enable_thinking`` is false) and tokenizes that text;
  ``POST /detokenize`` turns token ids back into text (the ids are a vocabulary the
  server grows as it meets pieces, so they are reversible); ``POST /v1/completions``
  takes a prompt or a list of prompts, reads each back into the messages it renders
  and answers each as the chat endpoint would (choice ``p * n + i``), with the summed
  usage; /v1/models then says ``owned_by: vllm``, as vLLM does. Without it, those
  paths are FastAPI's 404, as on a server that lacks them, and models are ``owned_by: test``.
- ``POST /v1/chat/completions``; with ``"stream": true`` the same answer as
  server-sent events (one per word, usage last with ``stream_options.include_usage``).
  The request's kind is decided by its system message:
  "fiction writer" → generation, "literary judge" → judge, anything else → other.

  * generation: choice i = `expected_endings` (sha256 of last user message, seed, i);
    a fraction ``empty_rate`` of choices is "" (chosen by the same hash).
  * judge: "Y"/"N" from sha256 of the CONTINUATION and PREDICTED blocks
    (`expected_verdict`), "Maybe." for a fraction ``malformed_rate``.
  * other: "OK".
  * scripted (any kind): a responder added with `LoopbackServer.respond` (a function
    of the messages) or `LoopbackServer.script` (a substring and its answer) answers
    first when it matches (answers by prompt content, e.g. a reader's JSON).

  Content depends only on the request body, never on request order. ``usage`` counts
  message contents with `count_tokens`; ``prompt_tokens_details.cached_tokens`` is the
  longest token prefix shared with an earlier prompt, in whole blocks of
  `BLOCK_SIZE` tokens, as vLLM's prefix cache reports it.

Misbehaviour (`MISBEHAVIOURS`), a server whose model does not do the task, set with
``misbehave=`` (or ``--misbehave``); scripted answers still come first:

==================== ==========================================================
"think"              every answer opens a reasoning trace that max_tokens cuts:
                     ``<think>\nOkay, the user wants …``, finish_reason "length"
                     (a reasoning model whose server ignores enable_thinking)
"random"             every answer is random-looking words from a hash of the
                     request (a simulator, or the wrong model behind the URL)
"always_y"           the judge answers "Y" to every ending
"identical"          a generation request's n choices are all choice 0
                     (temperature or seed not honoured)
"echo"               every answer repeats the last user message (a wrong chat
                     template): a judge echoes its prompt, a writer the idea
"html200"            every POST (chat, completions, /tokenize) answers HTTP 200
                     with an HTML page (a proxy's welcome page in front of no
                     model); /v1/models, /health and /metrics stay well
"null_content"       every generation choice has ``"content": null`` (a server
                     that loses the text); judge answers are normal
==================== ==========================================================

``serve_health=False`` makes ``/health`` FastAPI's 404, as on a server that lacks it
(vllm-router health-checks its workers there); ``serve_usage=False`` leaves ``usage``
out of every answer, as some OpenAI-compatible servers do.

Errors are vLLM-style JSON ``{"error": {"message", "type", "param", "code"}}``: 400 for
a body that is not a JSON object, missing/invalid ``messages``, ``n`` < 1, negative
temperature, a prompt plus ``max_tokens`` over ``max_model_len``; 404 for an unknown model
(vLLM's ``_check_model``: "The model `X` does not exist.", type NotFoundError, on chat
and /tokenize alike). A route the server does not have (``serve_tokenize=False``: a
server without /tokenize) is FastAPI's 404 ``{"detail": "Not Found"}``, which names no
model. With ``api_key`` set, a request without ``Authorization: Bearer <api_key>`` gets
vLLM's 401 ``{"error": "Unauthorized"}``; with ``echo_auth=True`` as well, the 401 body
echoes the Authorization header it got, as some proxies do (a key leak to guard against).

``dialect="llamacpp"`` (``--dialect llamacpp``) answers as llama.cpp's
``llama-server`` does, as measured (../shared/reviews/external-servers-2026-12-01.md):
/v1/models says ``owned_by: llamacpp`` with ``meta.n_ctx`` (no ``max_model_len``);
``GET /props`` gives ``total_slots`` (``slots``, default 4); ``n`` above the slots is
a 400 ``Field 'n': Value must be between 1 <= value <= 4, but got 8``; ``usage``
counts one choice; /tokenize reads ``content`` and answers ``{"tokens": [...]}`` (to a
body without ``content``, vLLM's ``prompt``, ``{"tokens": []}``); ``structured_outputs``
is ignored but ``grammar`` (``root ::= "Y" | "N"``) and ``response_format``
``json_object`` are honoured; a prompt over the context is a 400
``exceed_context_size_error``; a chat request of n choices holds n slots while it is
served (``delay`` seconds), the rest wait in its queue. ``max_n`` > 0 (any dialect)
returns at most that many choices, silently (a server that honours ``n`` only partly);
with ``n_refusal`` as well, n above ``max_n`` is a 400 whose message is
``n_refusal.format(max_n=…, n=…)`` (a hosted API's or a proxy's own wording, or
one naming neither). ``stream_cut`` > 0 ends a stream with ``data: [DONE]`` after
that many words, with no finish event (llama-cpp-python's ``interrupt_requests``
cuts a stream off as soon as another request waits). ``prefix`` (``"/api"``) serves every path under it as well, as
a hosted gateway does (``https://host/api/v1``); records show the path without it.

Faults (`FAULT_KINDS`), queued with `LoopbackServer.fail_next` or drawn at random with
`LoopbackServer.set_fault_rates`; what a plain aiohttp client sees:

==================== ==========================================================
"500", "503"         that status with error JSON
"429"                429 with error JSON and ``Retry-After: <retry_after>``
"drop"               connection closed, no response (ServerDisconnectedError)
"truncate"           200, application/json, full Content-Length, half the body,
                     then the connection closes (ClientPayloadError on read)
"nonjson"            200, text/html ``<html>oops</html>``
"wrong_content_type" 200, the normal JSON body, ``Content-Type: text/plain``
"few_choices"        the normal answer with only the first ``n // 2`` choices
"empty_content"      the normal answer with every choice's content ""
"slow"               sleeps ``slow_seconds`` (default 5), then answers normally
==================== ==========================================================
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import hashlib
import json as _stdjson
import random
import re
import signal
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

try:  # msgspec is a dependency of the project, but the server does not insist on it
    import msgspec

    _encode = msgspec.json.encode
    _decode = msgspec.json.decode
    _DecodeError: tuple[type[BaseException], ...] = (msgspec.DecodeError,)
except ImportError:  # pragma: no cover - exercised only without msgspec

    def _encode(obj: Any) -> bytes:
        return _stdjson.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()

    def _decode(data: bytes) -> Any:
        return _stdjson.loads(data)

    _DecodeError = (ValueError, UnicodeDecodeError)

__all__ = [
    "BLOCK_SIZE",
    "CHAT_PATH",
    "COMPLETIONS_PATH",
    "FAULT_KINDS",
    "HTML_PAGE",
    "KINDS",
    "MAX_MODEL_LEN",
    "PREFIX_CHARS",
    "TRANSIENT_FAULTS",
    "LoopbackServer",
    "Recorded",
    "classify",
    "count_tokens",
    "expected_endings",
    "expected_verdict",
    "judge_blocks",
    "render_template",
    "parse_rendered",
    "tokenize",
]

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
MAX_MODEL_LEN = 8192
BLOCK_SIZE = 16  # cached_tokens are whole blocks of this many tokens, like vLLM's
PREFIX_CHARS = 256  # the prefix cache compares prompts in blocks of this many characters
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
# the page a "html200" server sends for every POST
HTML_PAGE = "<html><body><h1>Welcome to nginx!</h1></body></html>"

# --------------------------------------------------------------------------- tokenizer

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """The test tokenizer: words and single punctuation marks, e.g. "Hi, you." → 4."""
    return _TOKEN_RE.findall(text)


def _char_class(ch: str) -> str:
    """A stand-in ASCII character of `ch`'s class: "a" word, " " space, "." other."""
    return "a" if _WORD_RE.match(ch) else (" " if _SPACE_RE.match(ch) else ".")


_WORD_RE = re.compile(r"\w")
_SPACE_RE = re.compile(r"\s")
_NON_ASCII_RE = re.compile(r"[^\x00-\x7f]")
# ASCII byte -> b"w" (word char), b" " (space) or b"p" (token of its own), as the regex sees it
_CLASS_TABLE = bytes({"a": 119, " ": 32, ".": 112}[_char_class(chr(i))] for i in range(128)) + bytes(128)


def count_tokens(text: str) -> int:
    """Number of tokens of `text` under the test tokenizer: len(`tokenize`(text)).

    Computed without building the token list (a word run counts once, every other
    non-space character once), several times faster than the regex on long prompts.
    """
    if not text.isascii():
        chars = set(_NON_ASCII_RE.findall(text))
        if len(chars) > 64:
            return len(_TOKEN_RE.findall(text))
        for ch in chars:
            text = text.replace(ch, _char_class(ch))
    classes = text.encode("ascii").translate(_CLASS_TABLE)
    runs = classes.replace(b"p", b" ")
    return classes.count(b"p") + runs.count(b" w") + runs.startswith(b"w")


@functools.lru_cache(maxsize=1 << 16)
def _count_answer(text: str | None) -> int:  # answers come from a small set of strings
    return len(_TOKEN_RE.findall(text or ""))


def _token_id(tok: str) -> int:
    return zlib.crc32(tok.encode()) % 50_000


# ------------------------------------------------------------------- message helpers


def _content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of an OpenAI content-part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text", ""), str)
        )
    return ""


def _role_text(messages: Iterable[dict], role: str) -> str:
    return "\n".join(_content_text(m.get("content")) for m in messages if m.get("role") == role)


def _last_user(messages: Sequence[dict]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            return _content_text(m.get("content"))
    return ""


_ROLE_LINE = re.compile(r"<\|(system|user|assistant)\|>\n")
_NO_THINK = "<think>\n\n</think>\n\n"
# a piece of text as the reversible tokenizer cuts it: a token with the spaces before
# it, or the spaces that end the text; the pieces joined are the text again
_PIECE_RE = re.compile(r"\s*(?:\w+|[^\w\s])|\s+")


def render_template(messages: Sequence[dict], add_generation_prompt: bool = True,
                    kwargs: dict | None = None, quirk: str | None = None) -> str:
    """The test server's chat template: ``<|role|>\\n`` + content + ``\\n`` per message,
    then ``<|assistant|>\\n`` (and an empty think block when enable_thinking is false).
    `quirk` "newlines": the template folds blank lines in a content, as a template that
    edits the text would (a prompt built around the rendered template then differs)."""
    def content(m: dict) -> str:
        text = _content_text(m.get("content"))
        return text.replace("\n\n", "\n") if quirk == "newlines" else text

    text = "".join(f"<|{m.get('role')}|>\n{content(m)}\n" for m in messages)
    if add_generation_prompt:
        text += "<|assistant|>\n"
        if isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False:
            text += _NO_THINK
    return text


def parse_rendered(text: str) -> list[dict]:
    """The messages a prompt rendered by `render_template` holds (the generation
    prompt dropped); a text that is not one is a single user message."""
    if text.endswith(_NO_THINK):
        text = text[: -len(_NO_THINK)]
    if text.endswith("<|assistant|>\n"):
        text = text[: -len("<|assistant|>\n")]
    parts = _ROLE_LINE.split(text)
    if parts[0] != "" or len(parts) < 3 or not all(c.endswith("\n") for c in parts[2::2]):
        return [{"role": "user", "content": text}]
    return [{"role": r, "content": c[:-1]} for r, c in zip(parts[1::2], parts[2::2])]


def classify(messages: Sequence[dict]) -> str:
    """"generation" if a system message mentions "fiction writer", "judge" if it
    mentions "literary judge" (case-insensitive), else "other"."""
    system = _role_text(messages, "system").lower()
    if "literary judge" in system:
        return "judge"
    if "fiction writer" in system:
        return "generation"
    return "other"


# ------------------------------------------------------------------ deterministic text

_NAMES = (
    "Mara", "the stranger", "Old Tom", "the detective", "Elena", "the captain",
    "young Pip", "the widow", "Jonah", "the innkeeper", "Sister Agnes", "the twins",
    "Rafael", "the mayor", "Ines", "the lighthouse keeper",
)
_VERBS = (
    "meets", "forgives", "confronts", "betrays", "rescues", "finally understands",
    "buries", "marries", "outwits", "says goodbye to", "unmasks", "follows",
    "writes to", "returns to", "chases", "sits beside",
)
_PLACES = (
    "old mill", "harbor", "burned chapel", "train station", "frozen lake",
    "village square", "lighthouse", "crossroads", "attic", "orchard", "courthouse",
    "cliff path", "empty theater", "border post", "garden gate", "riverbank",
)
_CODAS = (
    "Nothing is the same afterwards.",
    "The secret dies with them.",
    "Spring comes late that year.",
    "Nobody in town ever learns the truth.",
    "The letter is never sent.",
    "They leave together at dawn.",
    "The house is sold within a month.",
    "The storm finally breaks.",
)


def _ending_from_digest(h: bytes) -> str:
    a = _NAMES[h[8] % 16]
    b = _NAMES[h[9] % 16]
    if b == a:
        b = _NAMES[(h[9] + 1) % 16]
    return (
        f"The end comes when {a} {_VERBS[h[10] % 16]} {b} at the {_PLACES[h[11] % 16]}. "
        f"{_CODAS[h[12] % 8]}"
    )


def expected_endings(
    messages: Sequence[dict], n: int, seed: Any = None, empty_rate: float = 0.0
) -> list[str]:
    """The `n` choices a generation request gets (seed as sent in the body; None if absent).

    Choice i comes from sha256(last user message, seed + i) (or (None, i) unseeded),
    so the first k of n choices equal the k choices of the same request with n=k,
    and a follow-up with seed + k continues where a short answer stopped. A choice is "" when
    int(digest[:8]) % 1000 < empty_rate * 1000.
    """
    base = hashlib.sha256()
    base.update(_last_user(messages).encode("utf-8", "surrogatepass"))
    out = []
    threshold = empty_rate * 1000
    for i in range(n):
        hi = base.copy()
        # As vLLM does for parallel sampling (v1/engine/parallel_sampling.py), a
        # seeded request's choice i is sampled with seed + i: so the choices of
        # (seed, n) equal those of (seed, k) followed by (seed + k, n - k).
        hi.update(b"\x00" + (f"{seed + i}" if seed is not None else f"None\x00{i}").encode())
        d = hi.digest()
        if int.from_bytes(d[:8], "big") % 1000 < threshold:
            out.append("")
        else:
            out.append(_ending_from_digest(d))
    return out


_DASHES = "-\u2014\u2013\u2012\u2015\u2212"  # - — – ‒ ― −


def _block(text: str, name: str) -> str:
    i = text.find("BEGIN " + name)
    if i < 0:
        return ""
    i += len(name) + 6
    j = text.find("END " + name, i)
    if j < 0:
        j = len(text)
    # drop the marker's own dashes (right after BEGIN…, right before END…), then spaces
    return text[i:j].lstrip(_DASHES).rstrip(_DASHES).strip()


def judge_blocks(messages: Sequence[dict]) -> tuple[str, str]:
    """(continuation block, predicted block) of a judge request; "" for a missing block.

    A block is the text between "BEGIN X" and "END X" in the message contents; the
    dashes that decorate the markers (—BEGIN CONTINUATION—, em dashes in the real
    prompt, or ASCII/en dashes, or none) and surrounding whitespace are not part of it.
    """
    text = "\n".join(_content_text(m.get("content")) for m in messages)
    return _block(text, "CONTINUATION"), _block(text, "PREDICTED")


def expected_verdict(
    messages: Sequence[dict], yes_rate: float = 0.3, malformed_rate: float = 0.0
) -> str:
    """The content a judge request gets: "Y", "N" or (malformed) "Maybe.".

    v = int(sha256(continuation + "\\x00" + predicted)); "Maybe." when
    (v // 1000) % 1000 < malformed_rate * 1000, else "Y" when v % 1000 < yes_rate * 1000,
    else "N".
    """
    cont, pred = judge_blocks(messages)
    v = int.from_bytes(
        hashlib.sha256((cont + "\x00" + pred).encode("utf-8", "surrogatepass")).digest(), "big"
    )
    if (v // 1000) % 1000 < malformed_rate * 1000:
        return "Maybe."
    return "Y" if v % 1000 < yes_rate * 1000 else "N"


def misbehaving(mode: str, kind: str, messages: Sequence[dict], contents: list[str]) -> list[str | None]:
    """The answers of a misbehaving server (`MISBEHAVIOURS`) in place of `contents`."""
    if mode == "think":
        return ["<think>\nOkay, the user wants me to decide whether this"] * len(contents)
    if mode == "random":
        words = ("lorem", "ipsum", "quantum", "banana", "seventeen", "cobalt", "drift", "ledger")
        h = hashlib.sha256(_last_user(messages).encode("utf-8", "surrogatepass")).digest()
        return [" ".join(words[b % 8] for b in h[i % 8: i % 8 + 6]).capitalize() + "." for i in range(len(contents))]
    if mode == "always_y":
        return ["Y"] * len(contents) if kind == "judge" else contents
    if mode == "identical":
        return contents[:1] * len(contents) if kind == "generation" else contents
    if mode == "html200":  # the answer is replaced whole (LoopbackServer._serve)
        return contents
    if mode == "echo":
        return [_last_user(messages)] * len(contents)
    if mode == "null_content":
        return [None] * len(contents) if kind == "generation" else list(contents)
    raise ValueError(f"misbehave: expected one of {MISBEHAVIOURS}, got {mode!r}")


# ------------------------------------------------------------------------- records


@dataclass(slots=True)
class Recorded:
    """One request as the server saw it, appended when it finished.

    `body` is the decoded JSON body (None for GET or a body that is not a JSON
    object); `status` is the status line sent (200 for "truncate"), 0 when none was
    sent ("drop", a request cancelled by shutdown); `fault` the injected fault kind or None;
    `t` is time.monotonic() at arrival.
    """

    path: str
    method: str
    body: dict | None
    status: int
    fault: str | None
    t: float

    @property
    def kind(self) -> str | None:
        """generation/judge/other for chat requests (see `classify`), None otherwise."""
        if self.path != CHAT_PATH:
            return None
        msgs = self.body.get("messages") if isinstance(self.body, dict) else None
        if not isinstance(msgs, list):
            return "other"
        return classify([m for m in msgs if isinstance(m, dict)])


class _BadRequest(Exception):
    def __init__(self, status: int, message: str, etype: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.etype, self.param = status, message, etype, param


def _error_payload(status: int, message: str, etype: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": etype, "param": param, "code": status}}


_FAULT_STATUS = {
    "500": (500, "InternalServerError"),
    "503": (503, "ServiceUnavailableError"),
    "429": (429, "RateLimitError"),
}


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _logprobs(text: str) -> dict:
    """OpenAI-style logprobs of the first token, when a request asks for them: the
    answer's own first word is the likeliest, "Y" and "N" both appear among the
    top tokens (so a Y-vs-N comparison reproduces the verdict), plus a filler."""
    words = text.split()
    first = words[0] if words else ""
    top = {first: -0.2, "The": -2.0}
    if first.upper().startswith("Y"):
        top.update({"Y": -0.2, "N": -1.6, "No": -2.5})
    elif first.upper().startswith("N"):
        top.update({"N": -0.2, "Y": -1.6, "Yes": -2.5})
    return {"content": [{"token": first, "logprob": top[first], "bytes": None,
                         "top_logprobs": [{"token": t, "logprob": lp, "bytes": None} for t, lp in top.items()]}]}


def _completion_logprobs(text: str) -> dict:
    """`_logprobs` in the completions API's shape."""
    first = _logprobs(text)["content"][0]
    return {"tokens": [first["token"]], "token_logprobs": [first["logprob"]], "text_offset": [0],
            "top_logprobs": [{t["token"]: t["logprob"] for t in first["top_logprobs"]}]}


# -------------------------------------------------------------------------- server


_GBNF_ALT = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _llamacpp_constrained(body: dict, contents: list) -> list:
    """llama.cpp honours its own constraint forms: a `grammar` of literal
    alternatives (``root ::= "Y" | "N"``) and ``response_format`` json_object;
    vLLM's `structured_outputs` it ignores."""
    grammar = body.get("grammar")
    if isinstance(grammar, str) and grammar.startswith("root ::="):
        alts = [a.replace('\\"', '"') for a in _GBNF_ALT.findall(grammar)]
        if alts:
            return [c if isinstance(c, str) and c in alts else alts[0] for c in contents]
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
        out = []
        for c in contents:
            try:
                ok = isinstance(_stdjson.loads(c), dict)
            except (TypeError, ValueError):
                ok = False
            out.append(c if ok else "{}")
        return out
    return contents


class LoopbackServer:
    """An aiohttp OpenAI-compatible server on 127.0.0.1 in a background thread.

    `model` is one served model name or several. Answer knobs (`empty_rate`,
    `yes_rate`, `malformed_rate`), timing knobs (`delay`: seconds added to every chat
    request; `slow_seconds`: the "slow" fault) and `retry_after` (the 429 header value;
    None omits it) are plain attributes, settable at any time from any thread.
    `max_concurrent` > 0 serves at most that many chat requests at once (set it
    before start): a replica's capacity, for the scale-out tests and bench.
    `misbehave` (one of `MISBEHAVIOURS`, or None) makes the model not do the task.
    `reset` makes a used server as new (the tests share one, tests/conftest.py).
    """

    def __init__(
        self,
        model: str | Sequence[str] = "test-model",
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        delay: float = 0.0,
        empty_rate: float = 0.0,
        yes_rate: float = 0.3,
        malformed_rate: float = 0.0,
        slow_seconds: float = 5.0,
        retry_after: str | None = "0",
        max_model_len: int = MAX_MODEL_LEN,
        record: bool = True,
        prefix_cache_blocks: int = 2_000_000,
        serve_metrics: bool = True,
        max_concurrent: int = 0,
        misbehave: str | None = None,
        serve_tokenize: bool = True,
        serve_health: bool = True,
        serve_usage: bool = True,
        batching: bool = False,
        template_quirk: str | None = None,
        api_key: str | None = None,
        echo_auth: bool = False,
        dialect: str = "vllm",
        slots: int = 4,
        max_n: int = 0,
        serve_props: bool = True,
        owned_by: str | None = None,
        refuse: str | None = None,
        n_refusal: str | None = None,
        prefix: str = "",
        stream_cut: int = 0,
    ) -> None:
        models: tuple[str, ...] = (model,) if isinstance(model, str) else tuple(model)
        if not models:
            raise ValueError("LoopbackServer needs at least one model name")
        self.host = host
        self.port = port
        # The knobs, plain attributes a test may set at any time; `reset` restores them.
        self._knobs: dict[str, Any] = dict(
            models=models, model=models[0],
            delay=delay, empty_rate=empty_rate, yes_rate=yes_rate, malformed_rate=malformed_rate,
            slow_seconds=slow_seconds, retry_after=retry_after, max_model_len=max_model_len, record=record,
            prefix_cache_blocks=prefix_cache_blocks,
            serve_metrics=serve_metrics,  # False: /metrics answers 404, as a server without it
            serve_tokenize=serve_tokenize,  # False: /tokenize is FastAPI's 404, as a server without it
            serve_health=serve_health,  # False: /health is FastAPI's 404, as a server without it
            serve_usage=serve_usage,  # False: answers carry no `usage`, as some OpenAI-compatible servers send
            batching=batching,  # True: /detokenize, /v1/completions and templated /tokenize of messages (vLLM's)
            template_quirk=template_quirk,  # see render_template
            api_key=api_key,  # set: every request needs "Authorization: Bearer <api_key>"
            echo_auth=echo_auth,  # the 401 body echoes the header it got
            # > 0: at most this many chat requests are served at once, the rest wait (a
            # GPU's batch); with `delay`, capacity is max_concurrent / delay requests/s
            max_concurrent=max_concurrent,
            misbehave=misbehave,
            dialect=dialect,  # "llamacpp": llama.cpp's server, as measured (module docstring)
            slots=slots,  # llama.cpp's sequences at once (its n limit, /props total_slots)
            max_n=max_n,  # > 0: at most this many choices per answer, silently
            serve_props=serve_props,  # False: llama.cpp's /props is a 404 (its n limit only in its 400)
            owned_by=owned_by,  # /v1/models owned_by, when not the dialect's (a proxy in front renames it)
            refuse=refuse,  # a chat request whose messages hold this text is a 400 (a content filter)
            n_refusal=n_refusal,  # with max_n: n above it is a 400 with this message (module docstring)
            prefix=prefix,  # every path also served under it (a gateway's /api), set before start
            stream_cut=stream_cut,  # > 0: a stream ends with [DONE] after this many words, unfinished
        )
        self.models: tuple[str, ...]
        self.model: str
        vars(self).update(self._knobs)
        self._vocab: dict[str, int] = {}  # piece -> token id (see _PIECE_RE)
        self._pieces: list[str] = []
        self._capacity: asyncio.Semaphore | None = None
        self._slot_free: asyncio.Condition | None = None
        self._slots_used = 0
        self._peak_slots = 0
        self._active = 0  # requests being served (in the server's loop)

        self.responders: list[Any] = []  # see `respond`

        self._lock = threading.Lock()
        self._records: list[Recorded] = []
        self._queued: dict[str, collections.deque[str]] = {}
        self._rates: list[tuple[str, float]] = []
        self._rate_path: str | None = CHAT_PATH
        self._rng = random.Random(0)

        self._blocks: set[int] = set()
        self._counters = dict.fromkeys(
            ("prefix_cache_queries", "prefix_cache_hits", "request_success",
             "prompt_tokens", "generation_tokens"), 0)

        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # ------------------------------------------------------------ scripted answers

    def respond(self, fn) -> None:
        """Script answers by prompt content: ``fn(messages, n, seed)`` returns the
        choices' contents (a list of n strings, or one string for every choice), or
        None to leave the request to the next responder and then to the default
        answers above. Responders are asked in the order they were added; the
        request's kind (`classify`) is unchanged."""
        with self._lock:
            self.responders.append(fn)

    def _scripted(self, msgs: list[dict], n: int, seed: Any) -> list[str] | None:
        with self._lock:
            responders = list(self.responders)
        for fn in responders:
            out = fn(msgs, n, seed)
            if out is not None:
                return [out] * n if isinstance(out, str) else list(out)[:n]
        return None

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        """"http://127.0.0.1:PORT", the server root (append /v1 for the OpenAI API)."""
        if not self.port:
            raise RuntimeError("LoopbackServer is not started; call start() or use `with`")
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> LoopbackServer:
        """Bind and serve; returns once the port is open. After stop(), start() serves
        again on the same port (so `base_url` stays valid) with an empty prefix cache
        and zeroed /metrics counters; records and faults are kept."""
        if self.running:
            raise RuntimeError("LoopbackServer is already running")
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                import uvloop

                loop = uvloop.new_event_loop()
            except ImportError:  # pragma: no cover
                loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                loop.run_until_complete(self._astart())
            except BaseException as exc:  # noqa: BLE001 - handed to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                self._drain_and_close(loop)

        self._blocks = set()
        self._capacity = None  # a new loop: a new semaphore
        self._slot_free = None
        self._slots_used = self._peak_slots = 0
        for k in self._counters:
            self._counters[k] = 0
        self._thread = threading.Thread(target=run, name=f"LoopbackServer:{self.port}", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self, grace: float = 0.1) -> None:
        """Stop serving. In-flight requests get `grace` seconds, then are cancelled
        (their connections close without a response). Idempotent."""
        loop, thread = self._loop, self._thread
        if thread is None or loop is None or not thread.is_alive():
            self._thread = None
            return
        try:
            fut = asyncio.run_coroutine_threadsafe(self._astop(grace), loop)
            fut.result(timeout=grace * 4 + 5)
        except Exception:  # noqa: BLE001 - shutting down regardless
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = None

    def shutdown_hard(self) -> None:
        """Abort every connection at once (clients see a disconnect), then stop."""
        loop = self._loop
        if self.running and loop is not None:

            def abort_all() -> None:
                server = self._runner.server if self._runner is not None else None
                for conn in list(getattr(server, "_connections", ()) or ()):
                    tr = conn.transport
                    if tr is not None:
                        tr.abort()

            done = threading.Event()
            loop.call_soon_threadsafe(lambda: (abort_all(), done.set()))
            done.wait(timeout=5)
        self.stop(grace=0.01)

    def reset(self) -> LoopbackServer:
        """As a new server on the same port, for one shared by many tests: every knob
        as the constructor set it (attributes a test added are dropped), no records,
        faults, scripted answers, token vocabulary or prefix cache, /metrics counters
        at 0. A request still being served (left behind by the last test) is cancelled
        by a restart, so that it records nothing in the next test; a stopped server
        starts again."""
        if self.running and self._active:
            self.stop()
        for k in [k for k in vars(self) if not k.startswith("_") and k not in self._knobs
                  and k not in ("host", "port", "responders")]:
            delattr(self, k)
        vars(self).update(self._knobs)
        with self._lock:
            self._records.clear()
            self._queued.clear()
            self._rates, self._rate_path, self._rng = [], CHAT_PATH, random.Random(0)
            self.responders.clear()
            self._vocab.clear()
            self._pieces.clear()
        if self.running:  # idle: nothing in the server's loop uses these now
            self._blocks = set()
            self._capacity = None
            for k in self._counters:
                self._counters[k] = 0
        else:
            self.start()  # a fresh prefix cache, semaphore and counters
        return self

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"port={self.port}" if self.running else "stopped"
        return f"<LoopbackServer models={list(self.models)} {state}>"

    async def _astart(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._auth])
        app.router.add_get("/v1/models", self._h_models)
        app.router.add_get("/health", self._h_health)
        app.router.add_get("/metrics", self._h_metrics)
        app.router.add_get("/props", self._h_props)
        app.router.add_post("/tokenize", self._h_tokenize)
        app.router.add_post(CHAT_PATH, self._h_chat)
        app.router.add_post("/detokenize", self._h_detokenize)
        app.router.add_post(COMPLETIONS_PATH, self._h_completions)
        if self.prefix:  # a gateway's path prefix: the same handlers under it
            for route in list(app.router.routes()):
                if route.method in ("GET", "POST"):
                    app.router.add_route(route.method, self.prefix + route.resource.canonical, route.handler)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, backlog=1024)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = runner.addresses[0][1]

    async def _astop(self, grace: float) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            runner._shutdown_timeout = max(grace, 0.001)
            await runner.cleanup()

    @staticmethod
    def _drain_and_close(loop: asyncio.AbstractEventLoop) -> None:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    # ------------------------------------------------------------------- records

    @property
    def requests(self) -> list[Recorded]:
        """A copy of the records, in order of completion."""
        with self._lock:
            return list(self._records)

    def count(self, path: str | None = None, kind: str | None = None) -> int:
        """Finished requests to `path` (any if None) of `kind` (any if None).
        `kind` is "generation", "judge" or "other" and only matches chat requests."""
        if kind is not None and kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
        with self._lock:
            recs = list(self._records)
        return sum(
            1 for r in recs if (path is None or r.path == path) and (kind is None or r.kind == kind)
        )

    def reset_records(self) -> None:
        with self._lock:
            self._records.clear()

    def _add_record(self, rec: Recorded) -> None:
        if self.prefix and rec.path.startswith(self.prefix + "/"):
            rec.path = rec.path[len(self.prefix):]
        if self.record:
            with self._lock:
                self._records.append(rec)

    # -------------------------------------------------------------------- faults

    def fail_next(self, kind: str, times: int = 1, path: str = CHAT_PATH) -> None:
        """Queue `times` faults of `kind` for the next requests to `path`
        (taken before any random fault)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"fault kind: expected one of {FAULT_KINDS}, got {kind!r}")
        if not _is_int(times) or times < 1:
            raise ValueError(f"times: expected an int >= 1, got {times!r}")
        with self._lock:
            self._queued.setdefault(path, collections.deque()).extend([kind] * times)

    def set_fault_rates(
        self, rates: dict[str, float], seed: int = 0, path: str | None = CHAT_PATH
    ) -> None:
        """Inject faults at random: each request to `path` (every path if None) draws
        one uniform number from a Random(seed) and gets kind k with probability
        rates[k]. The rates must sum to at most 1; {} turns random faults off."""
        for k, r in rates.items():
            if k not in FAULT_KINDS:
                raise ValueError(f"fault kind: expected one of {FAULT_KINDS}, got {k!r}")
            if not _is_num(r) or r < 0:
                raise ValueError(f"rate of {k!r}: expected a number >= 0, got {r!r}")
        if sum(rates.values()) > 1 + 1e-9:
            raise ValueError(f"fault rates sum to {sum(rates.values())}, more than 1")
        with self._lock:
            self._rates = [(k, float(r)) for k, r in rates.items() if r > 0]
            self._rate_path = path
            self._rng = random.Random(seed)

    def clear_faults(self) -> None:
        """Drop queued faults and turn random faults off."""
        with self._lock:
            self._queued.clear()
            self._rates = []

    def pending_faults(self, path: str = CHAT_PATH) -> int:
        """Queued faults not yet used for `path`."""
        with self._lock:
            q = self._queued.get(path)
            return len(q) if q else 0

    def _take_fault(self, path: str) -> str | None:
        if not self._queued and not self._rates:  # fast path, no lock
            return None
        with self._lock:
            q = self._queued.get(path)
            if q:
                return q.popleft()
            if self._rates and (self._rate_path is None or self._rate_path == path):
                u = self._rng.random()
                acc = 0.0
                for k, r in self._rates:
                    acc += r
                    if u < acc:
                        return k
        return None

    def script(self, contains: str, answer: Any) -> None:
        """Chat requests whose message contents (any role) contain `contains` get
        `answer` as each choice instead of the hash-made text: a string, or a
        function ``answer(messages, seed, i) -> str`` for choice i (seed as sent, or
        None). A responder like those of `respond`, asked in the same order."""
        def fn(msgs, n, seed):
            if contains not in "\n".join(_content_text(m.get("content")) for m in msgs):
                return None
            return [answer(msgs, seed, i) if callable(answer) else answer for i in range(n)]

        self.respond(fn)

    def clear_scripts(self) -> None:
        """Forget every scripted answer (`script` and `respond`)."""
        with self._lock:
            self.responders.clear()

    # ------------------------------------------------------------------- metrics

    def metrics(self) -> dict[str, int]:
        """Counter values as /metrics shows them (without the `vllm:` / `_total`)."""
        return dict(self._counters)

    def _cached_tokens(self, text: str, prompt_tokens: int) -> int:
        """Approximate cached tokens of a prompt (`text` = its message contents joined).

        The longest prefix shared with an earlier prompt is found in whole blocks of
        `PREFIX_CHARS` characters (chained hashes; this prompt's blocks are remembered),
        converted to tokens in proportion (prompt_tokens * chars / len(text)) and
        rounded down to whole `BLOCK_SIZE` blocks. Cheap: no second tokenizer pass.
        """
        seen = self._blocks
        if len(seen) > self.prefix_cache_blocks:
            seen.clear()
        h = 0
        matched = 0
        hit = True
        for start in range(0, len(text) - PREFIX_CHARS + 1, PREFIX_CHARS):
            h = hash((h, text[start : start + PREFIX_CHARS]))
            if hit and h in seen:
                matched += PREFIX_CHARS
            else:
                hit = False
                seen.add(h)
        if not matched:
            return 0
        return prompt_tokens * matched // len(text) // BLOCK_SIZE * BLOCK_SIZE

    # ------------------------------------------------------------------ handlers

    def _json(self, payload: Any, status: int = 200) -> web.Response:
        return web.Response(body=_encode(payload), status=status, content_type="application/json")

    async def _h_health(self, request: web.Request) -> web.Response:
        if not self.serve_health:
            return self._not_found(request)
        self._add_record(Recorded(request.path, request.method, None, 200, None, time.monotonic()))
        return web.Response(status=200)

    async def _h_models(self, request: web.Request) -> web.Response:
        t0 = time.monotonic()
        created = int(time.time())
        if self.dialect == "llamacpp":
            data = [{"id": m, "object": "model", "created": created, "owned_by": self.owned_by or "llamacpp",
                     "meta": {"vocab_type": 2, "n_ctx_train": 8192, "n_ctx": self.max_model_len}}
                    for m in self.models]
            self._add_record(Recorded(request.path, request.method, None, 200, None, t0))
            return self._json({"object": "list", "data": data, "models": [{"name": m} for m in self.models]})
        data = [
            {"id": m, "object": "model", "created": created,
             "owned_by": self.owned_by or ("vllm" if self.batching else "test"),
             "root": m, "max_model_len": self.max_model_len}
            for m in self.models
        ]
        self._add_record(Recorded(request.path, request.method, None, 200, None, t0))
        return self._json({"object": "list", "data": data})

    async def _h_metrics(self, request: web.Request) -> web.Response:
        t0 = time.monotonic()
        if not self.serve_metrics:
            self._add_record(Recorded(request.path, request.method, None, 404, None, t0))
            return web.Response(status=404, text="Not Found")
        c = self._counters
        if self.dialect == "llamacpp":  # llama-server --metrics: its own names, no prefix-cache counter
            lines = []
            for name, key in (("llamacpp:prompt_tokens_total", "prompt_tokens"),
                              ("llamacpp:tokens_predicted_total", "generation_tokens")):
                lines += [f"# TYPE {name} counter", f"{name} {float(c[key])}"]
            self._add_record(Recorded(request.path, request.method, None, 200, None, t0))
            return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8")
        label = f'model_name="{self.model}"'
        lines = []
        for name, key, help_, extra in (
            ("vllm:prefix_cache_queries_total", "prefix_cache_queries",
             "Prefix cache queries, in terms of number of queried tokens.", ""),
            ("vllm:prefix_cache_hits_total", "prefix_cache_hits",
             "Prefix cache hits, in terms of number of cached tokens.", ""),
            ("vllm:request_success_total", "request_success",
             "Count of successfully processed requests.", 'finished_reason="stop",'),
            ("vllm:prompt_tokens_total", "prompt_tokens", "Number of prefill tokens processed.", ""),
            ("vllm:generation_tokens_total", "generation_tokens",
             "Number of generation tokens processed.", ""),
        ):
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} counter")
            lines.append(f'{name}{{engine="0",{extra}{label}}} {float(c[key])}')
        self._add_record(Recorded(request.path, request.method, None, 200, None, t0))
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8")

    async def _h_props(self, request: web.Request) -> web.Response:
        if self.dialect != "llamacpp" or not self.serve_props:
            return self._not_found(request)
        self._add_record(Recorded(request.path, request.method, None, 200, None, time.monotonic()))
        return self._json({"total_slots": self.slots, "model_path": f"/models/{self.model}.gguf",
                           "default_generation_settings": {"n_ctx": self.max_model_len}})

    @property
    def peak_slots(self) -> int:
        """The most llama.cpp slots busy at once since the server started (dialect "llamacpp")."""
        return self._peak_slots

    async def _slots_held(self, n: int) -> None:
        """llama.cpp's slots: a request of n choices waits for n free ones, holds them for `delay`."""
        if self._slot_free is None:
            self._slot_free = asyncio.Condition()
        want = max(1, min(n, self.slots))
        async with self._slot_free:
            await self._slot_free.wait_for(lambda: self._slots_used + want <= self.slots)
            self._slots_used += want
            self._peak_slots = max(self._peak_slots, self._slots_used)
        try:
            if self.delay > 0:
                await asyncio.sleep(self.delay)
        finally:
            async with self._slot_free:
                self._slots_used -= want
                self._slot_free.notify_all()

    async def _read_json(self, request: web.Request) -> tuple[Any, bool]:
        raw = await request.read()
        try:
            return _decode(raw), True
        except _DecodeError:
            return None, False

    def _check_model(self, body: dict) -> None:
        model = body.get("model")
        if model is None:
            return
        if not isinstance(model, str):
            raise _BadRequest(400, f"model: expected a string, got {type(model).__name__}",
                              "BadRequestError", "model")
        if model not in self.models:
            raise _BadRequest(404, f"The model `{model}` does not exist.", "NotFoundError", "model")

    @web.middleware
    async def _auth(self, request: web.Request, handler) -> web.StreamResponse:
        if self.api_key is None:
            return await handler(request)
        got = request.headers.get("Authorization", "")
        if got == f"Bearer {self.api_key}":
            return await handler(request)
        self._add_record(Recorded(request.path, request.method, None, 401, None, time.monotonic()))
        if self.echo_auth:
            return self._json(_error_payload(401, f"invalid credentials in header Authorization: {got}",
                                             "AuthenticationError"), status=401)
        return self._json({"error": "Unauthorized"}, status=401)

    async def _h_tokenize(self, request: web.Request) -> web.StreamResponse:
        if not self.serve_tokenize:
            self._add_record(Recorded(request.path, request.method, None, 404, None, time.monotonic()))
            return self._json({"detail": "Not Found"}, status=404)
        return await self._serve(request, chat=False)

    async def _h_chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _h_detokenize(self, request: web.Request) -> web.StreamResponse:
        if not self.batching:
            return self._not_found(request)
        return await self._serve(request, chat=False, payload=self._detokenize_payload)

    async def _h_completions(self, request: web.Request) -> web.StreamResponse:
        if not self.batching:
            return self._not_found(request)
        return await self._serve(request, chat=True, payload=self._completions_payload)

    def _not_found(self, request: web.Request) -> web.Response:
        self._add_record(Recorded(request.path, request.method, None, 404, None, time.monotonic()))
        return self._json({"detail": "Not Found"}, status=404)

    def _token_ids(self, text: str) -> list[int]:
        """Reversible ids of `text`'s pieces (`_PIECE_RE`), from the server's vocabulary."""
        out = []
        with self._lock:
            for piece in _PIECE_RE.findall(text):
                tid = self._vocab.get(piece)
                if tid is None:
                    tid = self._vocab[piece] = len(self._pieces)
                    self._pieces.append(piece)
                out.append(tid)
        return out

    def _detokenize_payload(self, body: dict) -> dict:
        self._check_model(body)
        ids = body.get("tokens")
        if not isinstance(ids, list) or not all(_is_int(t) for t in ids):
            raise _BadRequest(400, "tokens: expected a list of integers", "BadRequestError", "tokens")
        with self._lock:
            if any(not 0 <= t < len(self._pieces) for t in ids):
                raise _BadRequest(400, "tokens: an id outside the vocabulary", "BadRequestError", "tokens")
            return {"prompt": "".join(self._pieces[t] for t in ids)}

    def _completions_payload(self, body: dict, fault: str | None = None) -> dict:
        """Each prompt read back into messages and answered as a chat request with the
        same parameters (and faults applied to the whole answer); usage summed."""
        prompts = body.get("prompt")
        if isinstance(prompts, str):
            prompts = [prompts]
        if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
            raise _BadRequest(400, "prompt: expected a string or a non-empty list of strings", "BadRequestError",
                              "prompt")
        params = {k: v for k, v in body.items() if k not in ("prompt", "logprobs", "add_special_tokens", "echo")}
        choices, usage = [], {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
        for p, prompt in enumerate(prompts):
            answer = self._chat_payload({**params, "messages": parse_rendered(prompt)})
            for ch in answer["choices"]:
                text = ch["message"]["content"]
                choices.append({"index": p * len(answer["choices"]) + ch["index"], "text": text,
                                "logprobs": _completion_logprobs(text) if body.get("logprobs") else None,
                                "finish_reason": ch["finish_reason"], "stop_reason": None})
            u = answer["usage"]
            usage["prompt_tokens"] += u["prompt_tokens"]
            usage["completion_tokens"] += u["completion_tokens"]
            usage["cached_tokens"] += u["prompt_tokens_details"]["cached_tokens"]
        if fault == "few_choices":
            choices = choices[: len(choices) // 2]
        elif fault == "empty_content":
            for ch in choices:
                ch["text"] = ""
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": body.get("model") or self.model, "choices": choices,
                "usage": {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                          "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
                          "prompt_tokens_details": {"cached_tokens": usage["cached_tokens"]}}}

    def _tokenize_payload(self, body: dict) -> dict:
        if self.dialect == "llamacpp":  # reads `content` only, and no model
            content = body.get("content")
            return {"tokens": [_token_id(t) for t in tokenize(content)] if isinstance(content, str) else []}
        self._check_model(body)
        if "prompt" in body:
            prompt = body["prompt"]
            if not isinstance(prompt, str):
                raise _BadRequest(400, f"prompt: expected a string, got {type(prompt).__name__}",
                                  "BadRequestError", "prompt")
            toks = tokenize(prompt)
            if self.batching:
                return {"count": len(toks), "max_model_len": self.max_model_len, "tokens": self._token_ids(prompt)}
        elif "messages" in body:
            msgs = self._check_messages(body.get("messages"))
            if self.batching:  # the prompt the chat endpoint would build, as vLLM's /tokenize gives it
                ids = self._token_ids(render_template(msgs, body.get("add_generation_prompt", True) is not False,
                                                      body.get("chat_template_kwargs"), self.template_quirk))
                return {"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids}
            toks = []
            for m in msgs:
                toks.extend(tokenize(_content_text(m.get("content"))))
        else:
            raise _BadRequest(400, "expected `prompt` or `messages`", "BadRequestError", "prompt")
        return {"count": len(toks), "max_model_len": self.max_model_len,
                "tokens": [_token_id(t) for t in toks]}

    @staticmethod
    def _check_messages(msgs: Any) -> list[dict]:
        if not isinstance(msgs, list) or not msgs:
            raise _BadRequest(400, "messages: expected a non-empty list of messages",
                              "BadRequestError", "messages")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise _BadRequest(400, f"messages[{i}]: expected an object with a string `role`",
                                  "BadRequestError", "messages")
            c = m.get("content")
            if c is not None and not isinstance(c, (str, list)):
                raise _BadRequest(400, f"messages[{i}].content: expected a string, got "
                                  f"{type(c).__name__}", "BadRequestError", "messages")
        return msgs

    def _chat_payload(self, body: dict, fault: str | None = None) -> dict:
        self._check_model(body)
        msgs = self._check_messages(body.get("messages"))
        n = body.get("n", 1)
        if n is None:
            n = 1
        if not _is_int(n) or n < 1:
            raise _BadRequest(400, f"n: expected an int >= 1, got {n!r}", "BadRequestError", "n")
        temp = body.get("temperature")
        if temp is not None and (not _is_num(temp) or temp < 0):
            raise _BadRequest(400, f"temperature: expected a number >= 0, got {temp!r}",
                              "BadRequestError", "temperature")
        top_p = body.get("top_p")
        if top_p is not None and (not _is_num(top_p) or not 0 < top_p <= 1):
            raise _BadRequest(400, f"top_p: expected a number in (0, 1], got {top_p!r}",
                              "BadRequestError", "top_p")
        max_tokens = body.get("max_tokens")
        if max_tokens is not None and (not _is_int(max_tokens) or max_tokens < 1):
            raise _BadRequest(400, f"max_tokens: expected an int >= 1, got {max_tokens!r}",
                              "BadRequestError", "max_tokens")
        seed = body.get("seed")
        if seed is not None and not _is_int(seed):
            raise _BadRequest(400, f"seed: expected an int, got {seed!r}", "BadRequestError", "seed")

        if self.refuse and any(self.refuse in _content_text(m.get("content")) for m in msgs):
            raise _BadRequest(400, "the request was refused by the server's content filter", "BadRequestError")
        llama = self.dialect == "llamacpp"
        if llama and n > self.slots:
            raise _BadRequest(400, f"Field 'n': Value must be between 1 <= value <= {self.slots}, but got {n}",
                              "invalid_request_error", "n")
        texts = [_content_text(m.get("content")) for m in msgs]
        prompt_tokens = sum(count_tokens(t) for t in texts)
        if llama and prompt_tokens + (max_tokens or 0) > self.max_model_len:
            raise _BadRequest(400, f"request ({prompt_tokens + (max_tokens or 0)} tokens) exceeds the available "
                              f"context size ({self.max_model_len} tokens), try increasing it",
                              "exceed_context_size_error")
        if prompt_tokens + (max_tokens or 0) > self.max_model_len:
            raise _BadRequest(
                400,
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {prompt_tokens + (max_tokens or 0)} tokens ({prompt_tokens} in "
                f"the messages, {max_tokens or 0} in the completion). Please reduce the length "
                f"of the messages or completion.",
                "BadRequestError", "max_tokens")

        kind = classify(msgs)
        scripted = self._scripted(msgs, n, seed)
        if scripted is not None:
            contents = scripted
        elif kind == "generation":
            contents = expected_endings(msgs, n, seed, self.empty_rate)
        elif kind == "judge":
            contents = [expected_verdict(msgs, self.yes_rate, self.malformed_rate)] * n
        else:
            contents = ["OK"] * n
        if self.misbehave and scripted is None:
            contents = misbehaving(self.misbehave, kind, msgs, contents)  # type: ignore[assignment]
        finish = "length" if self.misbehave == "think" else "stop"
        if llama:
            contents = _llamacpp_constrained(body, contents)
        if self.max_n > 0 and self.n_refusal and n > self.max_n:
            raise _BadRequest(400, self.n_refusal.format(max_n=self.max_n, n=n), "invalid_request_error")
        if self.max_n > 0:
            contents = contents[: self.max_n]
        if fault == "few_choices":
            contents = contents[: n // 2]
        elif fault == "empty_content":
            contents = [""] * len(contents)

        cached = self._cached_tokens("\x1e".join(texts), prompt_tokens)
        completion_tokens = sum(_count_answer(c) for c in contents)
        if llama:  # llama.cpp's usage counts one choice
            completion_tokens = _count_answer(contents[-1]) if contents else 0
        c = self._counters
        c["prefix_cache_queries"] += prompt_tokens
        c["prefix_cache_hits"] += cached
        c["request_success"] += 1
        c["prompt_tokens"] += prompt_tokens
        c["generation_tokens"] += completion_tokens
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": text},
                 "logprobs": _logprobs(text or "") if body.get("logprobs") else None,
                 "finish_reason": finish, "stop_reason": None}
                for i, text in enumerate(contents)
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }

    async def _serve(self, request: web.Request, chat: bool, payload=None) -> web.StreamResponse:
        """Read, apply the fault, answer, record (also when cancelled by shutdown).
        `payload`: the answer's maker, when not the chat or /tokenize one."""
        make = payload
        t0 = time.monotonic()
        path = request.path.removeprefix(self.prefix) if self.prefix else request.path
        body: Any = None
        status = 0
        fault = self._take_fault(path)
        self._active += 1
        try:
            body, ok = await self._read_json(request)
            if chat and self.dialect == "llamacpp" and isinstance(body, dict) and make is None:
                n = body.get("n", 1)
                await self._slots_held(n if _is_int(n) and n >= 1 else 1)
            elif chat and self.max_concurrent > 0:
                if self._capacity is None:  # made in the server's own loop
                    self._capacity = asyncio.Semaphore(self.max_concurrent)
                async with self._capacity:
                    if self.delay > 0:
                        await asyncio.sleep(self.delay)
            elif chat and self.delay > 0:
                await asyncio.sleep(self.delay)
            if fault in _FAULT_STATUS:
                status, etype = _FAULT_STATUS[fault]
                resp = self._json(_error_payload(status, f"injected fault {fault}", etype), status)
                if fault == "429" and self.retry_after is not None:
                    resp.headers["Retry-After"] = str(self.retry_after)
                return resp
            if fault == "drop":
                request.transport.close()  # FIN, no response; aiohttp then skips writing
                return web.Response(status=204)
            if fault == "slow":
                await asyncio.sleep(self.slow_seconds)

            if not ok or not isinstance(body, dict):
                status = 400
                payload = _error_payload(400, "the body is not a JSON object", "BadRequestError")
            else:
                try:
                    if make is not None:
                        payload = make(body, fault) if chat else make(body)
                    else:
                        payload = self._chat_payload(body, fault) if chat else self._tokenize_payload(body)
                    status = 200
                except _BadRequest as e:
                    status = e.status
                    payload = _error_payload(e.status, e.message, e.etype, e.param)

            if self.misbehave == "html200":
                status = 200
                return web.Response(text=HTML_PAGE, content_type="text/html")
            if status == 200 and not self.serve_usage and isinstance(payload, dict):
                payload = {k: v for k, v in payload.items() if k != "usage"}
            if chat and make is None and status == 200 and body.get("stream") is True and fault is None:
                return await self._stream(request, body, payload)
            if fault == "nonjson":
                status = 200
                return web.Response(text="<html>oops</html>", content_type="text/html")
            data = _encode(payload)
            if fault == "wrong_content_type":
                return web.Response(body=data, status=status, content_type="text/plain")
            if fault == "truncate":
                head = (
                    f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                    f"Connection: close\r\n\r\n"
                ).encode()
                tr = request.transport
                tr.write(head + data[: len(data) // 2])
                tr.close()  # flushes the half body, then FIN
                return web.Response(status=204)
            return web.Response(body=data, status=status, content_type="application/json")
        finally:
            if not isinstance(body, dict):
                body = None
            self._add_record(Recorded(path, request.method, body, status, fault, t0))
            self._active -= 1


    async def _stream(self, request: web.Request, body: dict, payload: dict) -> web.StreamResponse:
        """The answer as vLLM streams it (``"stream": true``): server-sent events,
        one per word of each choice, a finish event per choice, the usage last when
        ``stream_options.include_usage`` is set, then ``data: [DONE]``."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        base = {"id": payload["id"], "object": "chat.completion.chunk", "created": payload["created"],
                "model": payload["model"]}

        async def event(choices: list, usage: dict | None = None) -> None:
            await resp.write(b"data: " + _encode({**base, "choices": choices, "usage": usage}) + b"\n\n")

        words = 0
        for ch in payload["choices"]:
            i = ch["index"]
            await event([{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
            for piece in re.findall(r"\S+\s*", ch["message"]["content"]):
                if self.stream_cut and words >= self.stream_cut:  # cut off: no finish, no usage
                    await resp.write(b"data: [DONE]\n\n")
                    await resp.write_eof()
                    return resp
                words += 1
                await event([{"index": i, "delta": {"content": piece}, "finish_reason": None}])
            await event([{"index": i, "delta": {}, "finish_reason": ch["finish_reason"]}])
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            if self.dialect == "llamacpp":  # one usage event per choice, each counting that choice
                for ch in payload["choices"]:
                    await event([], {**payload["usage"], "completion_tokens": _count_answer(ch["message"]["content"])})
            else:
                await event([], payload["usage"])
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


# ----------------------------------------------------------------------- standalone


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--model", action="append", help="served model name (repeatable)")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds added to each chat request")
    ap.add_argument("--max-concurrent", type=int, default=0,
                    help="chat requests served at once, the others wait (0: no limit)")
    ap.add_argument("--fault-rate", type=float, default=0.0,
                    help="probability that a chat request gets a fault")
    ap.add_argument("--fault-kinds", default=",".join(TRANSIENT_FAULTS),
                    help="comma-separated kinds sharing --fault-rate equally")
    ap.add_argument("--seed", type=int, default=0, help="seed of the fault RNG")
    ap.add_argument("--empty-rate", type=float, default=0.0)
    ap.add_argument("--yes-rate", type=float, default=0.3)
    ap.add_argument("--malformed-rate", type=float, default=0.0)
    ap.add_argument("--slow-seconds", type=float, default=5.0)
    ap.add_argument("--max-model-len", type=int, default=MAX_MODEL_LEN)
    ap.add_argument("--misbehave", choices=MISBEHAVIOURS, default=None, help="a model that does not do the task")
    ap.add_argument("--no-health", action="store_true", help="/health answers 404, as on a server without it")
    ap.add_argument("--batching", action="store_true",
                    help="serve /detokenize, /v1/completions and templated /tokenize of messages (vLLM's)")
    ap.add_argument("--dialect", choices=("vllm", "llamacpp"), default="vllm",
                    help="llamacpp: answer as llama.cpp's llama-server does (the module docstring)")
    ap.add_argument("--slots", type=int, default=4, help="llama.cpp's slots (with --dialect llamacpp)")
    ap.add_argument("--max-n", type=int, default=0, help="> 0: at most this many choices per answer")
    args = ap.parse_args(argv)

    srv = LoopbackServer(
        args.model or ["test-model"], host=args.host, port=args.port, delay=args.delay,
        empty_rate=args.empty_rate, yes_rate=args.yes_rate, malformed_rate=args.malformed_rate,
        slow_seconds=args.slow_seconds, max_model_len=args.max_model_len, record=False,
        max_concurrent=args.max_concurrent, misbehave=args.misbehave, batching=args.batching,
        serve_health=not args.no_health, dialect=args.dialect, slots=args.slots, max_n=args.max_n,
    )
    if args.fault_rate > 0:
        kinds = [k.strip() for k in args.fault_kinds.split(",") if k.strip()]
        srv.set_fault_rates({k: args.fault_rate / len(kinds) for k in kinds}, seed=args.seed)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    srv.start()
    print(f"listening on {srv.base_url}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
