"""The fake answer model: the rules that decide what a fake OpenAI-compatible
server answers, shared by both doors to it, the HTTP test server
(`tension.testing.openai_server.LoopbackServer`, the wire) and the in-process
transport (`tension.testing.inprocess.InProcessServer`, no sockets). So a pipeline
spec gets the same endings, verdicts, readers' (scripted) answers, usage, prefix-cache
counts, errors and faults on either, and a test says which door it needs.

The rules are documented where the HTTP server is (the docstring of
tension.testing.openai_server): a request's kind from its system message
(`classify`), generation choices (`expected_endings`), judge verdicts
(`expected_verdict`), scripted answers first (`AnswerModel.respond`, `script`),
misbehaviours (`misbehaving`), the llama.cpp dialect's constraints and limits,
vLLM's validation errors (400/404 JSON), usage counted with `count_tokens`, and
`cached_tokens` from a prefix cache. `AnswerModel` holds the state and the
payload makers; a door reads a body, takes a fault (`_take_fault`), asks for a
payload and sends it. Like the server, it imports nothing from `tension`: it is a
fixed point the code under test is measured against.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import itertools
import json as _stdjson
import random
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
COUNT_PATH = "/extras/tokenize/count"  # llama-cpp-python's token counter (dialect "llamacpp_python")
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
# How a server (or a proxy) can number an answer's choices wrongly (`misnumber=`, `renumbered`).
MISNUMBERINGS = ("zero", "duplicate", "out_of_range", "missing")
# the page a "html200" server sends for every POST
HTML_PAGE = "<html><body><h1>Welcome to nginx!</h1></body></html>"


# The knobs of LoopbackServer that decide answers, with its defaults: the in-process
# door takes these (the wire's own, delay, max_concurrent, api_key, …, it has not).
ANSWER_KNOBS: dict[str, Any] = dict(
    empty_rate=0.0, yes_rate=0.3, malformed_rate=0.0, slow_seconds=5.0, retry_after="0",
    max_model_len=MAX_MODEL_LEN, record=True, prefix_cache_blocks=2_000_000, serve_metrics=True,
    misbehave=None, serve_tokenize=True, serve_health=True, serve_usage=True, batching=False,
    template_quirk=None, dialect="vllm", slots=4, max_n=0, serve_props=True, owned_by=None, refuse=None,
    n_refusal=None, stream_cut=0, misnumber=None, misnumber_paths=(CHAT_PATH, COMPLETIONS_PATH), answer_model=None,
    fixed_usage=None,
)


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    """A test server's settings, one object for both doors: where LoopbackServer
    listens, the answer knobs (`ANSWER_KNOBS`, the in-process door's too) and the
    wire's own (LoopbackServer's only). What each does: the docstring of
    tension.testing.openai_server. The server keeps them as plain attributes a test
    may set at any time; `LoopbackServer.reset` restores these.

        LoopbackServer(model="m", settings=ServerSettings(dialect="llamacpp"), delay=0.1)

    takes the settings with `delay` replaced (keywords alone build them too)."""

    host: str = "127.0.0.1"
    port: int = 0
    delay: float = 0.0  # seconds added to every chat request
    empty_rate: float = 0.0
    yes_rate: float = 0.3
    malformed_rate: float = 0.0
    slow_seconds: float = 5.0  # the "slow" fault
    retry_after: str | None = "0"  # the 429's Retry-After header (None: no header)
    max_model_len: int = MAX_MODEL_LEN
    record: bool = True
    prefix_cache_blocks: int = 2_000_000
    serve_metrics: bool = True  # False: /metrics answers 404, as a server without it
    # > 0: at most this many chat requests are served at once, the rest wait (a GPU's
    # batch); with `delay`, capacity is max_concurrent / delay requests/s
    max_concurrent: int = 0
    misbehave: str | None = None  # one of MISBEHAVIOURS
    serve_tokenize: bool = True  # False: /tokenize is FastAPI's 404, as a server without it
    serve_health: bool = True  # False: /health is FastAPI's 404, as a server without it
    serve_usage: bool = True  # False: answers carry no `usage`, as some OpenAI-compatible servers send
    batching: bool = False  # True: /detokenize, /v1/completions and templated /tokenize of messages (vLLM's)
    template_quirk: str | None = None  # see render_template
    api_key: str | None = None  # set: every request needs "Authorization: Bearer <api_key>"
    echo_auth: bool = False  # the 401 body echoes the header it got
    dialect: str = "vllm"  # "llamacpp": llama.cpp's server, as measured; "llamacpp_python"
    slots: int = 4  # llama.cpp's sequences at once (its n limit, /props total_slots)
    max_n: int = 0  # > 0: at most this many choices per answer, silently
    serve_props: bool = True  # False: llama.cpp's /props is a 404 (its n limit only in its 400)
    owned_by: str | None = None  # /v1/models owned_by, when not the dialect's (a proxy in front renames it)
    refuse: str | None = None  # a chat request whose messages hold this text is a 400 (a content filter)
    n_refusal: str | None = None  # with max_n: n above it is a 400 with this message
    prefix: str = ""  # every path also served under it (a gateway's /api), set before start
    stream_cut: int = 0  # > 0: a stream ends with [DONE] after this many words, unfinished
    misnumber: str | None = None  # one of MISNUMBERINGS: the answers' choice indexes made wrong
    misnumber_paths: tuple[str, ...] = (CHAT_PATH, COMPLETIONS_PATH)  # the paths misnumber applies to
    answer_model: str | None = None  # set: answers name this model, not the one asked
    # set (prompt, completion, cached): every answer's `usage` says these, whatever it held (a
    # stub server's fixed usage; cached over prompt: a server that counts its cache wrong)
    fixed_usage: tuple[int, int, int] | None = None
    stream_ignored: bool = False  # True: a chat request asking "stream": true gets the plain JSON body
    stream_always: bool = False  # True: chat answers stream even when not asked (a proxy)
    serve_completions: bool = True  # False: /v1/completions is a 404 even with batching
    # (N, T): a hosted API's rate limit, N chat requests per window of T s, told in OpenAI's
    # x-ratelimit-* headers on every chat answer; the N+1st in a window is a 429 without Retry-After
    rate_limit: tuple[int, float] | None = None

    @classmethod
    def build(cls, door: str, base: ServerSettings | None, knobs: dict[str, Any]) -> ServerSettings:
        """`base` (or the defaults) with `knobs` replaced; an unknown name is a
        TypeError that names the door and every setting."""
        unknown = sorted(set(knobs) - set(cls.__dataclass_fields__))
        if unknown:
            raise TypeError(f"{door}: unknown setting(s) {unknown}; expected some of "
                            f"{sorted(cls.__dataclass_fields__)}")
        return dataclasses.replace(base or cls(), **knobs)


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


@functools.lru_cache(maxsize=8192)
def count_tokens(text: str) -> int:
    """Number of tokens of `text` under the test tokenizer: len(`tokenize`(text)).

    Computed without building the token list (a word run counts once, every other
    non-space character once), several times faster than the regex on long prompts.
    Remembered for the last texts counted: a test sends the same prompts again and
    again (its runs share a corpus; every request carries the same system prompt).
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


@functools.lru_cache(maxsize=1024)
def _tokens_of(text: str) -> tuple[int, ...]:
    """The test tokenizer's ids of `text` (`tokenize`, `_token_id`), remembered as
    `count_tokens` is: a run asks for the same prefixes' tokens as the run before."""
    return tuple(_token_id(t) for t in tokenize(text))


# An answer's id: unique in the process, as vLLM's (a random uuid4 per answer cost more
# than the rest of an answer on this machine's urandom; no test reads more than its prefix).
_answer_ids = itertools.count(1)


def _answer_id(prefix: str) -> str:
    return f"{prefix}-{next(_answer_ids):032x}"


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



def renumbered(mode: str, choices: list[dict]) -> list[dict]:
    """`choices` (each with its ``index``) numbered as `mode` (`MISNUMBERINGS`) says,
    each text in place: as a proxy that renumbers an answer may send it."""
    k = len(choices)
    if mode == "zero":
        return [{**c, "index": 0} for c in choices]
    if mode == "duplicate":
        return [{**c, "index": max(0, i - 1)} for i, c in enumerate(choices)]
    if mode == "out_of_range":
        return [{**c, "index": k if i == k - 1 else c["index"]} for i, c in enumerate(choices)]
    if mode == "missing":
        return [c for i, c in enumerate(choices) if i != 1 or k == 1]
    raise ValueError(f"misnumber: expected one of {MISNUMBERINGS}, got {mode!r}")


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
    # `kind`, found once ("": not yet; None is a kind, a request not for chat): a test that
    # waits for a count (`count(kind=…)` every few ms while a run goes on) classified every
    # record again at each look
    _kind: str | None = dataclasses.field(default="", repr=False, compare=False)

    @property
    def kind(self) -> str | None:
        """generation/judge/other for chat requests (see `classify`), None otherwise."""
        if self._kind == "":
            self._kind = self._classify()
        return self._kind

    def _classify(self) -> str | None:
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


def _logprobs(text: str, yn: bool = False) -> dict:
    """OpenAI-style logprobs of the first token, when a request asks for them: the
    answer's own first word is the likeliest, "Y" and "N" both appear among the
    top tokens (so a Y-vs-N comparison reproduces the verdict), plus a filler.
    `yn` (the knob `yn_logprobs`): a free-text answer still has Y and N among its
    top tokens, as a small judge's has (the 135M model of the 2026-12-02 review)."""
    words = text.split()
    first = words[0] if words else ""
    top = {first: -0.2, "The": -2.0}
    if first.upper().startswith("Y"):
        top.update({"Y": -0.2, "N": -1.6, "No": -2.5})
    elif first.upper().startswith("N"):
        top.update({"N": -0.2, "Y": -1.6, "Yes": -2.5})
    elif yn:
        top.update({"Y": -1.2, "N": -1.9} if len(text) % 2 else {"N": -1.2, "Y": -1.9})
    return {"content": [{"token": first, "logprob": top[first], "bytes": None,
                         "top_logprobs": [{"token": t, "logprob": lp, "bytes": None} for t, lp in top.items()]}]}


def _completion_logprobs(text: str) -> dict:
    """`_logprobs` in the completions API's shape."""
    first = _logprobs(text)["content"][0]
    return {"tokens": [first["token"]], "token_logprobs": [first["logprob"]], "text_offset": [0],
            "top_logprobs": [{t["token"]: t["logprob"] for t in first["top_logprobs"]}]}



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


class AnswerModel:
    """The answers' state and makers, for a door to mix in (LoopbackServer,
    InProcessServer). The door sets the knobs as plain attributes (`models`, `model`,
    `empty_rate`, `yes_rate`, `malformed_rate`, `max_model_len`, `prefix_cache_blocks`,
    `record`, `misbehave`, `dialect`, `slots`, `max_n`, `refuse`, `n_refusal`, `batching`,
    `template_quirk`, `misnumber`, `misnumber_paths`, `answer_model`, `fixed_usage`; see LoopbackServer) and calls `_init_model_state` once."""

    models: tuple[str, ...]
    model: str

    def _init_model_state(self) -> None:
        """Records, faults, scripted answers, the token vocabulary, the prefix cache
        and the /metrics counters, all empty."""
        self.responders: list[Any] = []  # see `respond`
        self._vocab: dict[str, int] = {}  # piece -> token id (see _PIECE_RE)
        self._pieces: list[str] = []

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

    def _models_payload(self) -> dict:
        """The /v1/models answer, in the server's dialect."""
        created = int(time.time())
        if self.dialect == "llamacpp_python":  # owned_by "me", no context, no meta (its app.py)
            data = [{"id": m, "object": "model", "owned_by": self.owned_by or "me", "permissions": []}
                    for m in self.models]
            return {"object": "list", "data": data}
        if self.dialect == "llamacpp":
            data = [{"id": m, "object": "model", "created": created, "owned_by": self.owned_by or "llamacpp",
                     "meta": {"vocab_type": 2, "n_ctx_train": 8192, "n_ctx": self.max_model_len}}
                    for m in self.models]
            return {"object": "list", "data": data, "models": [{"name": m} for m in self.models]}
        data = [
            {"id": m, "object": "model", "created": created,
             "owned_by": self.owned_by or ("vllm" if self.batching else "test"),
             "root": m, "max_model_len": self.max_model_len}
            for m in self.models
        ]
        return {"object": "list", "data": data}


    # ------------------------------------------------------------ scripted answers

    def _metrics_text(self) -> str:
        """The /metrics answer (Prometheus text) from the counters, in the server's dialect."""
        c = self._counters
        if self.dialect == "llamacpp":  # llama-server --metrics: its own names, no prefix-cache counter
            lines = []
            for name, key in (("llamacpp:prompt_tokens_total", "prompt_tokens"),
                              ("llamacpp:tokens_predicted_total", "generation_tokens")):
                lines += [f"# TYPE {name} counter", f"{name} {float(c[key])}"]
            return "\n".join(lines) + "\n"
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
        return "\n".join(lines) + "\n"

    def _props_payload(self) -> dict:
        """llama.cpp's /props answer."""
        return {"total_slots": self.slots, "model_path": f"/models/{self.model}.gguf",
                "default_generation_settings": {"n_ctx": self.max_model_len}}

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
        prefix = getattr(self, "prefix", "")
        if prefix and rec.path.startswith(prefix + "/"):
            rec.path = rec.path[len(prefix):]
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

    def _check_model(self, body: dict) -> None:
        model = body.get("model")
        if model is None:
            return
        if not isinstance(model, str):
            raise _BadRequest(400, f"model: expected a string, got {type(model).__name__}",
                              "BadRequestError", "model")
        if model not in self.models:
            raise _BadRequest(404, f"The model `{model}` does not exist.", "NotFoundError", "model")


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
            answer = self._chat_answer({**params, "messages": parse_rendered(prompt)})
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
        return self._claimed(COMPLETIONS_PATH, {
                "id": _answer_id("cmpl"), "object": "text_completion", "created": int(time.time()),
                "model": body.get("model") or self.model, "choices": choices,
                "usage": {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                          "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
                          "prompt_tokens_details": {"cached_tokens": usage["cached_tokens"]}}})

    def _count_payload(self, body: dict) -> dict:
        """llama-cpp-python's POST /extras/tokenize/count: ``{"input": text}`` →
        ``{"count": N}`` (its own tokenizer's count; here `count_tokens`)."""
        text = body.get("input")
        if not isinstance(text, str):
            raise _BadRequest(422, "input: field required", "ValidationError", "input")
        return {"count": count_tokens(text)}

    def _tokenize_payload(self, body: dict) -> dict:
        if self.dialect == "llamacpp":  # reads `content` only, and no model
            content = body.get("content")
            return {"tokens": list(_tokens_of(content)) if isinstance(content, str) else []}
        self._check_model(body)
        if "prompt" in body:
            prompt = body["prompt"]
            if not isinstance(prompt, str):
                raise _BadRequest(400, f"prompt: expected a string, got {type(prompt).__name__}",
                                  "BadRequestError", "prompt")
            if self.batching:  # the count is the test tokenizer's, the ids the vocabulary's pieces
                return {"count": count_tokens(prompt), "max_model_len": self.max_model_len,
                        "tokens": self._token_ids(prompt)}
            tokens = list(_tokens_of(prompt))
        elif "messages" in body:
            msgs = self._check_messages(body.get("messages"))
            if self.batching:  # the prompt the chat endpoint would build, as vLLM's /tokenize gives it
                ids = self._token_ids(render_template(msgs, body.get("add_generation_prompt", True) is not False,
                                                      body.get("chat_template_kwargs"), self.template_quirk))
                return {"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids}
            tokens = [t for m in msgs for t in _tokens_of(_content_text(m.get("content")))]
        else:
            raise _BadRequest(400, "expected `prompt` or `messages`", "BadRequestError", "prompt")
        return {"count": len(tokens), "max_model_len": self.max_model_len, "tokens": tokens}

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

    def _claimed(self, path: str, payload: dict) -> dict:
        """What the answer to `path` claims beyond its texts, as a proxy in front may
        change it: its choices' indexes (`misnumber` on `misnumber_paths`) and the
        model it names (`answer_model`), and its usage (`fixed_usage`)."""
        if self.misnumber and path in self.misnumber_paths:
            payload = {**payload, "choices": renumbered(self.misnumber, payload["choices"])}
        if self.answer_model:
            payload = {**payload, "model": self.answer_model}
        if self.fixed_usage is not None and "usage" in payload:
            prompt, completion, cached = self.fixed_usage
            payload = {**payload, "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                            "total_tokens": prompt + completion,
                                            "prompt_tokens_details": {"cached_tokens": cached}}}
        return payload

    def _chat_payload(self, body: dict, fault: str | None = None) -> dict:
        """The answer to a chat request, as its claims say (`_claimed`)."""
        return self._claimed(CHAT_PATH, self._chat_answer(body, fault))

    def _chat_answer(self, body: dict, fault: str | None = None) -> dict:
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
        python = self.dialect == "llamacpp_python"  # llama-cpp-python: n dropped, its constraint forms honoured
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
        if llama or python:
            contents = _llamacpp_constrained(body, contents)
        if python:
            contents = contents[:1]  # it drops `n` (exclude={"n", …}): always one choice
        if self.max_n > 0 and self.n_refusal and n > self.max_n:  # a hosted API's wording of the limit
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
            "id": _answer_id("chatcmpl"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": text},
                 "logprobs": _logprobs(text or "", getattr(self, "yn_logprobs", False)) if body.get("logprobs")
                 else None,
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


def stream_events(payload: dict, body: dict, *, dialect: str, stream_cut: int,
                  encode: Callable[[Any], bytes]) -> Iterator[bytes]:
    """A chat answer `payload` as vLLM streams it (``"stream": true``), one
    server-sent event (``data: …\\n\\n``) at a time: a role event, one per word of
    each choice and a finish event per choice, the usage last when
    ``stream_options.include_usage`` is set (llama.cpp: one per choice, each counting
    that choice), then ``data: [DONE]``. `stream_cut` > 0: [DONE] after that many
    words, with no finish and no usage (a stream cut off). Both doors send these."""
    base = {"id": payload["id"], "object": "chat.completion.chunk", "created": payload["created"],
            "model": payload["model"]}

    def event(choices: list, usage: dict | None = None) -> bytes:
        return b"data: " + encode({**base, "choices": choices, "usage": usage}) + b"\n\n"

    words = 0
    for ch in payload["choices"]:
        i = ch["index"]
        yield event([{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        for piece in re.findall(r"\S+\s*", ch["message"]["content"]):
            if stream_cut and words >= stream_cut:
                yield b"data: [DONE]\n\n"
                return
            words += 1
            yield event([{"index": i, "delta": {"content": piece}, "finish_reason": None}])
        yield event([{"index": i, "delta": {}, "finish_reason": ch["finish_reason"]}])
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") and "usage" in payload:  # serve_usage=False: none
        if dialect == "llamacpp":
            for ch in payload["choices"]:
                yield event([], {**payload["usage"], "completion_tokens": _count_answer(ch["message"]["content"])})
        else:
            yield event([], payload["usage"])
    yield b"data: [DONE]\n\n"
