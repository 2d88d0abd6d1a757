"""Reading the readers' answers: JSON probabilities over suspects, a named culprit,
a suspect list (docs/fairplay.md, "Parsing and retries").

Models wrap JSON in code fences or prose, rename or reorder suspects, give
probabilities that do not sum to 1. What is unambiguous is repaired and the repair
is named; anything else is an error, for which the caller asks again (with another
seed) and finally records a failure. No function here ever makes up a number: a
missing, negative or non-numeric probability is an error, never a default.

    parse_distribution(text, suspects)  -> Parsed(probs | error, repairs)
    parse_culprit(text, suspects)       -> Culprit(index | None, error, repairs)
    parse_suspect_list(text)            -> (names | None, error)
    reasoning_trace(text)               -> whether the answer is a model's thinking
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any, cast

import msgspec

__all__ = ["Parsed", "Culprit", "json_objects", "match_suspect", "parse_distribution", "parse_culprit",
           "parse_suspect_list", "reasoning_trace"]

SUM_TOLERANCE = 1e-6  # a sum this close to 1 is left as it is
# Words that name a role, not a person: "Mr. Gruner" is matched by "gruner".
_TITLES = frozenset("mr mrs ms miss dr sir lady lord the a an baron count countess colonel captain major "
                    "inspector professor rev reverend father mister madam madame monsieur herr st".split())
_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
# How reasoning models open their thinking when the server does not switch it off
# (Qwen3, DeepSeek-R1: <think>; others <thinking>, <reasoning>, <|channel|>analysis).
_TRACE_OPENING = re.compile(r"\s*(?:<(?:think|thinking|reasoning|reflection)>|<\|channel\|>\s*analysis)", re.I)
_FENCE = re.compile(r"(?:```|\u201d\u2019|'''|\u2019\u2019\u2019)[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)"
                    r"(?:```|\u201d\u2019|'''|\u2019\u2019\u2019)", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_PROB_KEYS = ("probabilities", "probability", "probs", "culprit_probabilities", "likelihoods")
_NAME_KEYS = ("suspects", "suspect", "names", "characters")


class Parsed(msgspec.Struct, kw_only=True):
    """A distribution in the order of `suspects` (sums to 1), or the error why not."""

    probs: list[float] | None = None
    error: str | None = None
    repairs: list[str] = []


class Culprit(msgspec.Struct, kw_only=True):
    """`index` of the named suspect; None with no error when the answer names nobody."""

    index: int | None = None
    error: str | None = None
    repairs: list[str] = []


# ----------------------------------------------------------------- JSON in prose


def json_objects(text: str) -> tuple[list[Any], list[str]]:
    """Every JSON value (object or array) found in `text`, in order, and the repairs
    needed to read them. Fenced blocks are read first; otherwise each balanced
    ``{…}`` / ``[…]`` outside another one."""
    text = _THINK.sub("", text or "")
    repairs: list[str] = []
    fenced = [m.group(1) for m in _FENCE.finditer(text)]
    found: list[Any] = []
    for block in fenced:
        found += _scan(block, repairs)
    if not found:
        found = _scan(text, repairs)
    return found, repairs


def _scan(text: str, repairs: list[str]) -> list[Any]:
    out = []
    i = 0
    while i < len(text):
        if text[i] not in "{[":
            i += 1
            continue
        end = _balanced_end(text, i)
        if end is None:
            i += 1
            continue
        value = _load(text[i:end], repairs)
        if value is None or (isinstance(value, list) and text[i] == "["
                             and not any(isinstance(v, str) for v in value)):
            # A bare list of numbers in prose ("[0.2, 0.8]") is not an answer
            # we can tie to suspects by itself; objects and name lists are.
            i += 1
            continue
        out.append(value)
        i = end
    return out


def _balanced_end(text: str, start: int) -> int | None:
    """Index after the bracket closing the one at `start`, skipping strings."""
    depth = 0
    quote = None
    escaped = False
    for j in range(start, len(text)):
        ch = text[j]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'" and not (ch == "'" and j > 0 and text[j - 1].isalpha()):
            quote = ch  # an apostrophe inside a word ("it's") opens nothing
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def _load(block: str, repairs: list[str]) -> Any:
    try:
        return json.loads(block)
    except ValueError:
        pass
    fixed = block.replace("\u201c", '"').replace("\u201d", '"')
    fixed = _TRAILING_COMMA.sub(r"\1", fixed)
    try:
        value = json.loads(fixed)
        repairs.append("fixed curly quotes or trailing commas in the JSON")
        return value
    except ValueError:
        pass
    try:  # Python literals: single quotes, True/False/None
        value = ast.literal_eval(fixed.replace("null", "None").replace("true", "True").replace("false", "False"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, (dict, list)):
        repairs.append("read single-quoted (Python-style) JSON")
        return value
    return None


# ----------------------------------------------------------------- suspect names


def _norm(name: str) -> str:
    return " ".join(re.sub(r"[^\w\s'-]", " ", name.casefold()).split())


def _tokens(name: str) -> set[str]:
    return {t for t in _norm(name).replace("'s", "").split() if len(t) >= 3 and t not in _TITLES}


def match_suspect(name: str, suspects: list[str]) -> tuple[int | None, str | None]:
    """(index, None) for the one suspect `name` means, or (None, why not). Tried in
    order, the first rule with exactly one hit wins: the same name ignoring case,
    spaces and punctuation; one is a prefix of the other (≥ 3 characters); a
    shared word that is not a title ("Gruner" for "Adelbert Gruner")."""
    if not isinstance(name, str) or not _norm(name):
        return None, f"suspect name {name!r} is not a name"
    n = _norm(name)
    normed = [_norm(s) for s in suspects]
    rules = (
        lambda s: s == n,
        lambda s: len(n) >= 3 and (s.startswith(n) or n.startswith(s)),
        lambda s: bool(_tokens(name) & _tokens(s)),
    )
    for rule in rules:
        hits = [i for i, s in enumerate(normed) if rule(s)]
        if len(hits) == 1:
            return hits[0], None
        if len(hits) > 1:
            return None, f"{name!r} could be any of {', '.join(repr(suspects[i]) for i in hits)}"
    return None, f"{name!r} is not one of the suspects ({', '.join(suspects)})"


# ----------------------------------------------------------------- distributions


def parse_distribution(text: str, suspects: list[str]) -> Parsed:
    """The culprit distribution an answer gives, in the order of `suspects`."""
    values, repairs = json_objects(text)
    if not values:
        return Parsed(error="no JSON object in the answer" if (text or "").strip() else "empty answer")
    results: list[Parsed] = [_distribution(v, suspects) for v in values]
    good = [(r, r.probs) for r in results if r.probs is not None]
    if not good:
        return results[0]
    first, first_probs = good[0]
    for _, other_probs in good[1:]:
        if any(abs(a - b) > 1e-9 for a, b in zip(first_probs, other_probs)):
            return Parsed(error=f"{len(good)} JSON answers with different probabilities")
    if len(values) > 1:
        first.repairs.append(f"{len(values)} JSON values in the answer; used the one with probabilities")
    first.repairs[:0] = repairs
    return first


def _distribution(obj: Any, suspects: list[str]) -> Parsed:
    if not isinstance(obj, dict):
        return Parsed(error=f"expected a JSON object, got {type(obj).__name__}")
    repairs: list[str] = []
    lower = {str(k).casefold().strip(): v for k, v in obj.items()}
    probs = next((lower[k] for k in _PROB_KEYS if k in lower), None)
    names = next((lower[k] for k in _NAME_KEYS if k in lower), None)
    if probs is None:
        rest = {k: v for k, v in obj.items() if "distract" not in str(k).casefold()}
        if rest and all(_is_number_like(v) for v in rest.values()):
            probs = rest  # {"Ana": 0.7, "Mack": 0.3}: names are the keys
            repairs.append("read the probabilities from name keys at the top level")
        else:
            return Parsed(error="no `probabilities` field")
    if isinstance(probs, dict):
        pairs = list(probs.items())
    elif isinstance(probs, list):
        if isinstance(names, list):
            if len(names) != len(probs):
                return Parsed(error=f"{len(names)} suspects but {len(probs)} probabilities")
            pairs = list(zip(names, probs))
        elif len(probs) == len(suspects):
            pairs = list(zip(suspects, probs))
            repairs.append("no suspect names in the answer; took the probabilities in the asked order")
        else:
            return Parsed(error=f"{len(probs)} probabilities for {len(suspects)} suspects and no names")
    else:
        return Parsed(error=f"`probabilities` is {type(probs).__name__}, not a list or an object")

    out: list[float | None] = [None] * len(suspects)
    for name, raw in pairs:
        value, why = _number(raw)
        if why:
            return Parsed(error=f"probability of {name!r}: {why}")
        if why is None and isinstance(raw, str):
            repairs.append(f"read {raw!r} as a number")
        idx, why = match_suspect(name, suspects)
        if idx is None:
            if value == 0.0 and why is not None and "not one of the suspects" in why:
                repairs.append(f"dropped {name!r} (not a suspect, probability 0)")
                continue
            return Parsed(error=why)
        if out[idx] is not None:
            return Parsed(error=f"two answers for suspect {suspects[idx]!r}")
        if suspects[idx] != name:
            repairs.append(f"read {name!r} as {suspects[idx]!r}")
        out[idx] = value
    missing = [s for s, v in zip(suspects, out) if v is None]
    if missing:
        return Parsed(error=f"no probability for {', '.join(map(repr, missing))}")
    got = cast(list[float], out)  # no suspect is missing: every value is set
    total = sum(got)
    if total <= 0:
        return Parsed(error="the probabilities are all 0")
    if abs(total - 1.0) > SUM_TOLERANCE:
        repairs.append(f"renormalised (they summed to {total:g})")
    if [n for n, _ in pairs] != suspects and isinstance(probs, list) and isinstance(names, list) \
            and sorted(map(_norm, names)) == sorted(map(_norm, suspects)):
        repairs.append("reordered the suspects")
    return Parsed(probs=[v / total for v in got], repairs=repairs)


def _is_number_like(v: Any) -> bool:
    return _number(v)[1] is None


def _number(raw: Any) -> tuple[float, str | None]:
    """(value, None) for a finite non-negative number or numeric string ("0.3",
    "30%"); (nan, why) otherwise."""
    if isinstance(raw, bool) or raw is None:
        return math.nan, "missing" if raw is None else "not a number"
    value = raw
    if isinstance(raw, str):
        s = raw.strip()
        scale = 100.0 if s.endswith("%") else 1.0
        try:
            value = float(s.rstrip("%").strip()) / scale
        except ValueError:
            return math.nan, f"{raw!r} is not a number"
    if not isinstance(value, (int, float)):
        return math.nan, f"expected a number, got {type(raw).__name__}"
    value = float(value)
    if not math.isfinite(value):
        return math.nan, f"{raw!r} is not finite"
    if value < 0:
        return math.nan, f"negative ({raw!r})"
    return value, None


# ----------------------------------------------------------------- culprit, suspects

_NOBODY = frozenset({"none", "nobody", "no one", "unknown", "null", "n/a", "not revealed", "unclear"})


def parse_culprit(text: str, suspects: list[str]) -> Culprit:
    """Which suspect the judge says a finished story reveals as the culprit."""
    values, repairs = json_objects(text)
    names = []
    for v in values:
        if isinstance(v, dict):
            lower = {str(k).casefold().strip(): x for k, x in v.items()}
            if "culprit" in lower:
                names.append(lower["culprit"])
    if not names:
        bare = (text or "").strip().strip("\"'`*.").strip()
        if not bare:
            return Culprit(error="empty answer")
        if len(bare) > 60 or "\n" in bare:
            return Culprit(error="no JSON `culprit` field and not a bare name")
        names = [bare]
        repairs = ["read a bare name"]
    picks: set[int | None] = set()
    for name in names:
        if name is None or (isinstance(name, str) and _norm(name) in _NOBODY):
            picks.add(None)
            continue
        idx, why = match_suspect(name, suspects)
        if idx is None:
            return Culprit(error=why)
        picks.add(idx)
    if len(picks) > 1:
        return Culprit(error="the answer names more than one culprit")
    return Culprit(index=picks.pop(), repairs=repairs)


def parse_suspect_list(text: str) -> tuple[list[str] | None, str | None]:
    """The names of an extraction answer (``{"suspects": [...]}`` or a bare list),
    stripped and without repeats; at least two."""
    values, _ = json_objects(text)
    for v in values:
        names = v.get("suspects") if isinstance(v, dict) else v
        if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
            out: list[str] = []
            for n in names:
                n = " ".join(n.split())
                if n and _norm(n) not in {_norm(o) for o in out}:
                    out.append(n)
            if len(out) >= 2:
                return out, None
            return None, f"only {len(out)} distinct suspect name(s)"
    return None, "no JSON list of suspect names in the answer"


# ----------------------------------------------------------------- reasoning traces


def reasoning_trace(text: str | None) -> bool:
    """Whether an answer opens with a reasoning model's thinking (``<think>`` …)
    instead of the answer asked for: reasoning was not switched off, or the server
    ignored ``enable_thinking: false``. Only the opening is read: O(1) per answer."""
    if not text:
        return False
    return _TRACE_OPENING.match(text, 0, 64) is not None
