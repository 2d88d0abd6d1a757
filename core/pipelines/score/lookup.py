"""What the cache holds for one position, in one walk: its endings record, then
its judged record, else a verdict record per non-empty ending.

The live judge (judge.py) sends what the walk does not find; `estimate` counts
what it finds; the view shows it. All three build a position's judge requests
and its judged-record key here, and read through core/run/engine.py's
`CacheReads`, so a change of record or request reaches them together.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from tension.cache import records
from tension.core.llm.protocol import ChatRequest
from tension.core.pipelines.score.requests import ScoreRequests
from tension.core.run.reads import Answers, CacheReads

__all__ = ["JudgeAsk", "Cached", "judge_ask", "lookup", "lookup_at"]


class JudgeAsk(msgspec.Struct, frozen=True, kw_only=True):
    """A position's judge requests, one slot per ending (None: an empty ending, not
    judged), and the key of the judged record that stands for their answers."""

    requests: list[ChatRequest | None]
    group: bytes


def judge_ask(reqs: ScoreRequests, sentences: Sequence[str], k: int, endings: Sequence[str]) -> JudgeAsk:
    head, tail = reqs.judge_parts(sentences, k)
    slots: list[ChatRequest | None] = [None] * len(endings)
    for i, r in reqs.verdicts(head, tail, endings):
        slots[i] = r
    return JudgeAsk(requests=slots, group=reqs.position_key(head, tail, list(endings)))


class Cached(msgspec.Struct, kw_only=True):
    """A position as the cache holds it. `endings` is None when its generation
    record is missing (and `answers` then too); an answer is None for an empty
    ending or a verdict record that is missing."""

    endings: records.Endings | None
    answers: Answers | None = None
    asked: int = 0  # endings judged (non-empty)


def lookup(reads: CacheReads, reqs: ScoreRequests, sentences: Sequence[str], k: int) -> Cached:
    """The position's records, its requests rebuilt from the run's settings."""
    rec = reads.endings(reqs.endings(sentences, k))
    if rec is None:
        return Cached(endings=None)
    ask = judge_ask(reqs, sentences, k, rec.texts)
    return Cached(endings=rec, answers=reads.answers(ask.requests, ask.group),
                  asked=sum(r is not None for r in ask.requests))


def lookup_at(reads: CacheReads, endings_key: bytes, judged_key: bytes | None) -> Cached | None:
    """The position's records by the keys its positions.jsonl line names; None when
    its judged record is missing (an unfinished cache: rebuild its requests instead)."""
    rec = reads.endings_at(endings_key)
    if rec is None:
        return Cached(endings=None)
    answers = reads.group_answers(judged_key) if judged_key is not None else None
    if answers is None:
        return None
    return Cached(endings=rec, answers=answers, asked=answers.found)
