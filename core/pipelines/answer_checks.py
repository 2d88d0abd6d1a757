"""Degenerate answers of `generate` and of the fair-play readers (docs/reliability.md,
"Degenerate answers"); score's own watch is core/pipelines/score/watch.py.

`StoryChecks` sees every generate answer with its prompt: answers that are
mostly the prompt (a wrong chat template echoes it; a weak model repeats the
story so far) and answers that are reasoning traces. `ReaderChecks` sees every
reader and judge answer of `fairplay`: roles whose answers do not parse, and a
reader that gives the same distribution every time (the 135M model returns the
prompt's example). Both keep counts only and say at the end what they saw.
"""

from __future__ import annotations

from collections.abc import Sequence

from tension.core.prompts.answers import json_objects, reasoning_trace
from tension.core.reports.answer_warnings import AnswerWarning

__all__ = ["StoryChecks", "ReaderChecks", "prompt_share", "SHINGLE_WORDS", "PROMPT_SHARE", "TRACE_SHARE",
           "UNPARSED_SHARE", "SAME_VALUES"]

SHINGLE_WORDS = 5  # an answer's text is compared with its prompt in runs of this many words
PROMPT_SHARE = 0.5  # an answer whose runs are more than this share found in its prompt is "mostly the prompt"
TRACE_SHARE = 0.05  # warn when more than this share of the answers is a reasoning trace
UNPARSED_SHARE = 0.5  # warn when more than this share of a role's answers cannot be read
SAME_VALUES = 5  # a reader giving one distribution to at least this many values (all it gave) is warned about
_TOLERANCE = 1e-6  # two distributions closer than this in every entry are the same


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = text.casefold().split()
    return {tuple(words[i:i + SHINGLE_WORDS]) for i in range(max(len(words) - SHINGLE_WORDS + 1, 0))}


def prompt_share(answer: str, messages: Sequence[dict]) -> float:
    """The share of the answer's runs of SHINGLE_WORDS words that also occur in
    its prompt (0 for an answer shorter than one run)."""
    runs = _shingles(answer)
    if not runs:
        return 0.0
    prompt = set().union(*(_shingles(str(m.get("content", ""))) for m in messages))
    return len(runs & prompt) / len(runs)


class StoryChecks:
    """The answers of one generate run (module docstring)."""

    def __init__(self) -> None:
        self.answers = self.echoes = self.traces = 0

    def answer(self, messages: Sequence[dict], text: str) -> None:
        self.answers += 1
        self.traces += reasoning_trace(text)
        self.echoes += prompt_share(text, messages) > PROMPT_SHARE

    def warnings(self) -> list[AnswerWarning]:
        n, out = self.answers, []
        if self.echoes:
            out.append(AnswerWarning(
                check="generate_prompt", count=self.echoes, total=n,
                seen=f"{self.echoes} of {n} answers were mostly their prompt (more than {PROMPT_SHARE:.0%} of "
                     f"their {SHINGLE_WORDS}-word runs are in it)",
                meaning="those stories repeat the idea, the beats or the story so far instead of telling a story "
                        "(a wrong chat template, or a model too weak for the task): scores of them measure the "
                        "prompt, not the generator"))
        if n and self.traces > TRACE_SHARE * n:
            out.append(AnswerWarning(
                check="generate_reasoning", count=self.traces, total=n,
                seen=f"{self.traces} of {n} answers open with a reasoning trace (<think>)",
                meaning="reasoning is not switched off: the stories hold the model's thinking, and tension "
                        "scores of them are not scores of a story"))
        return out


class _ReaderTally:
    __slots__ = ("values", "first", "same", "example")

    def __init__(self, probs: list[float], example: list[float] | None):
        self.values, self.first, self.same, self.example = 1, probs, True, example


class ReaderChecks:
    """The answers of one fairplay run (module docstring)."""

    def __init__(self) -> None:
        self.asked: dict[str, list[int]] = {}  # role -> [answers, unparsed]
        self.readers: dict[str, _ReaderTally] = {}

    def answer(self, role: str, parsed: bool) -> None:
        counts = self.asked.setdefault(role, [0, 0])
        counts[0] += 1
        counts[1] += not parsed

    def value(self, reader: str, messages: Sequence[dict], probs: list[float]) -> None:
        tally = self.readers.get(reader)
        if tally is None:
            self.readers[reader] = _ReaderTally(probs, _example(messages))
            return
        tally.values += 1
        tally.same = tally.same and _same(tally.first, probs)

    def warnings(self) -> list[AnswerWarning]:
        out = []
        for role, (n, bad) in self.asked.items():
            if n and bad > UNPARSED_SHARE * n:
                out.append(AnswerWarning(
                    check="reader_unparsed", count=bad, total=n,
                    seen=f"{bad} of {n} {role} answers could not be read",
                    meaning="each was asked again; a value whose answers never parse is missing (null in "
                            "readers.jsonl), so the curves have gaps and fewer stories count"))
        for reader, t in self.readers.items():
            if t.same and t.values >= SAME_VALUES:
                what = "the example distribution in its prompt" if t.example is not None and _same(
                    t.first, t.example) else "one distribution"
                out.append(AnswerWarning(
                    check="reader_constant", count=t.values, total=t.values,
                    seen=f"the {reader} reader gave {what} ({', '.join(f'{p:.2g}' for p in t.first)}) to every one "
                         f"of its {t.values} values",
                    meaning="it did not read the stories: its curve is flat, and the surprise, coherence and "
                            "fair-play scores from it carry no information"))
        return out


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= _TOLERANCE for x, y in zip(a, b))


def _example(messages: Sequence[dict]) -> list[float] | None:
    """The probabilities of the example a reader prompt shows (its first JSON
    block with `probabilities`), normalised as answers are; None without one."""
    text = "\n".join(str(m.get("content", "")) for m in messages)
    for value in json_objects(text)[0]:
        probs = value.get("probabilities") if isinstance(value, dict) else None
        if isinstance(probs, list) and probs and all(isinstance(p, (int, float)) for p in probs) and sum(probs) > 0:
            return [p / sum(probs) for p in probs]
    return None
