"""The answer rules: what a request gets, computed from its body alone (never from
request order), so a test can compute every answer in advance. Generation choices
(`expected_endings`), judge verdicts (`expected_verdict`, from `judge_blocks`), a
misbehaving model's answers (`misbehaving`), a proxy's wrong choice numbers
(`renumbered`), llama.cpp's honoured constraints and the first token's logprobs."""

from __future__ import annotations

import hashlib
import json as _stdjson
import re
from collections.abc import Sequence
from typing import Any

from .messages import content_text, last_user
from .settings import MISBEHAVIOURS, MISNUMBERINGS

# the page a "html200" server sends for every POST
HTML_PAGE = "<html><body><h1>Welcome to nginx!</h1></body></html>"


# ------------------------------------------------------------------ generation

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
    base.update(last_user(messages).encode("utf-8", "surrogatepass"))
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


# ----------------------------------------------------------------------- judge

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
    text = "\n".join(content_text(m.get("content")) for m in messages)
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


# -------------------------------------------------- misbehaving models and proxies


def misbehaving(mode: str, kind: str, messages: Sequence[dict], contents: Sequence[str | None]) -> list[str | None]:
    """The answers of a misbehaving server (`MISBEHAVIOURS`) in place of `contents`."""
    if mode == "think":
        return ["<think>\nOkay, the user wants me to decide whether this"] * len(contents)
    if mode == "random":
        words = ("lorem", "ipsum", "quantum", "banana", "seventeen", "cobalt", "drift", "ledger")
        h = hashlib.sha256(last_user(messages).encode("utf-8", "surrogatepass")).digest()
        return [" ".join(words[b % 8] for b in h[i % 8: i % 8 + 6]).capitalize() + "." for i in range(len(contents))]
    if mode == "always_y":
        return ["Y"] * len(contents) if kind == "judge" else list(contents)
    if mode == "identical":
        return list(contents[:1]) * len(contents) if kind == "generation" else list(contents)
    if mode == "html200":  # the answer is replaced whole (LoopbackServer._serve)
        return list(contents)
    if mode == "echo":
        return [last_user(messages)] * len(contents)
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


# ------------------------------------------------ logprobs, llama.cpp's constraints


def logprobs(text: str, yn: bool = False) -> dict:
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


def completion_logprobs(text: str) -> dict:
    """`logprobs` in the completions API's shape."""
    first = logprobs(text)["content"][0]
    return {"tokens": [first["token"]], "token_logprobs": [first["logprob"]], "text_offset": [0],
            "top_logprobs": [{t["token"]: t["logprob"] for t in first["top_logprobs"]}]}


_GBNF_ALT = re.compile(r'"((?:[^"\\]|\\.)*)"')


def llamacpp_constrained(body: dict, contents: list) -> list:
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
