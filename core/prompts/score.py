"""Every prompt the product sends, as data (paper 000, App. C.4–C.5; docs/metrics.md 1.2–1.3).

The texts are the paper's, verbatim, with its LaTeX rendered: `2--3` is an en dash
and `---` an em dash. Changing any character here changes every cache key that
uses it — which is the point: a changed prompt can never be served a stale answer.
"""

from __future__ import annotations

import math

__all__ = [
    "ENDING_SYSTEM", "ENDING_USER", "JUDGE_SYSTEM", "JUDGE_USER",
    "ending_messages", "judge_messages", "judge_parts", "judge_messages_from_parts",
    "parse_verdict", "verdict_from_logprobs", "counted_verdict",
]

ENDING_SYSTEM = "You are a fiction writer. Write only story text."

ENDING_USER = (
    "In 2\u20133 sentences, describe how you think this story ends. "
    "No commentary, no explanation, no preamble.\n"
    "\n"
    "STORY SO FAR:\n"
    "{prefix}"
)

JUDGE_SYSTEM = (
    "You are a literary judge. You determine whether a predicted story ending captures the "
    "general direction of the true story continuation. Answer Y if the prediction gets the broad "
    "plot trajectory right \u2014 the same characters are involved, similar types of events unfold, "
    "or the emotional arc matches. Minor differences in specific details, wording, or sequence are "
    "acceptable. Answer N only if the prediction describes a fundamentally different outcome from "
    "what actually happens."
)

JUDGE_USER = (
    "Here is the actual continuation of a story:\n"
    "\n"
    "\u2014BEGIN CONTINUATION\u2014\n"
    "{anchor} {continuation}\n"
    "\u2014END CONTINUATION\u2014\n"
    "\n"
    "Here is a predicted ending:\n"
    "\n"
    "\u2014BEGIN PREDICTED\u2014\n"
    "{anchor} {ending}\n"
    "\u2014END PREDICTED\u2014\n"
    "\n"
    "Does the predicted ending capture the general direction of the true continuation \u2014 "
    "similar characters involved, similar types of events, or a matching emotional arc? Answer Y "
    "if the broad trajectory is right, even if specific details differ. Answer N only if the "
    "prediction is fundamentally wrong about what happens. Answer ONLY Y or N.\n"
    "\n"
    "Judgment:"
)


def ending_messages(prefix: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": ENDING_SYSTEM},
        {"role": "user", "content": ENDING_USER.format(prefix=prefix)},
    ]


def judge_messages(anchor: str, continuation: str, ending: str) -> list[dict[str, str]]:
    user = JUDGE_USER.format(anchor=anchor, continuation=continuation, ending=ending)
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


_JUDGE_HEAD, _JUDGE_TAIL = JUDGE_USER.split("{anchor} {ending}")
_JUDGE_TAIL = _JUDGE_TAIL.format()  # no field there; format() only to read the template as format() would


def judge_parts(anchor: str, continuation: str) -> tuple[str, str]:
    """(head, tail) such that a position's judge user text for `ending` is
    head + ending + tail, the same string `judge_messages` formats: a position
    formats the long continuation once, not once per ending."""
    return _JUDGE_HEAD.format(anchor=anchor, continuation=continuation) + anchor + " ", _JUDGE_TAIL


def judge_messages_from_parts(head: str, tail: str, ending: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": head + ending + tail}]


def verdict_from_logprobs(logprobs: dict[str, float] | None) -> str:
    """"Y" or "N" by which answer the judge's first token makes more likely: the
    summed probability of tokens reading as yes (Y, Yes, yes, …) against those
    reading as no. "" (malformed) when neither appears among the top tokens."""
    if not logprobs:
        return ""
    yes = sum(math.exp(lp) for tok, lp in logprobs.items() if tok.strip().upper().startswith("Y"))
    no = sum(math.exp(lp) for tok, lp in logprobs.items() if tok.strip().upper().startswith("N"))
    if yes == 0 and no == 0:
        return ""
    return "Y" if yes > no else "N"


def counted_verdict(constraint: str, text: str, first_logprobs: dict[str, float] | None) -> str:
    """The verdict text a position counts: the raw answer, or with a logprobs
    judge (`--judge-constraint logprobs`) the letter its first-token
    probabilities favour."""
    return verdict_from_logprobs(first_logprobs) if constraint == "logprobs" else text


def parse_verdict(text: str | None) -> tuple[bool, bool]:
    """(match, malformed): match when the stripped, uppercased answer starts with Y;
    malformed when it starts with neither Y nor N (still counted as no match)."""
    # Only the first character decides, and str.upper maps character by character:
    # upper-casing that one character is the same test as upper-casing the whole answer.
    first = (text or "").lstrip()[:1].upper()
    match = first.startswith("Y")
    return match, not (match or first.startswith("N"))
