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
from tension.core.pipelines.score.round_walk import RoundWalk, no_count
from tension.core.prompts import score as prompts
from tension.core.run.reads import Answers, CacheReads, chat_key

__all__ = ["JudgeAsk", "Cached", "judge_ask", "lookup", "lookup_at", "lookup_position", "no_count"]


class JudgeAsk(msgspec.Struct, frozen=True, kw_only=True):
    """A position's judge requests, one slot per ending (None: an empty ending, not
    judged), and the key of the judged record that stands for their answers; with
    the endings record's key, the links its verdicts and judged record carry to
    their endings (`records.ending_link`: `cache merge` leaves out those of endings
    it does not keep)."""

    requests: list[ChatRequest | None]
    group: bytes
    links: list[bytes] = []  # per slot (b"" for an empty ending); [] without the endings' key
    link: bytes = b""  # the judged record's


def judge_ask(reqs: ScoreRequests, sentences: Sequence[str], k: int, endings: Sequence[str],
              endings_key: bytes | None = None) -> JudgeAsk:
    head, tail = reqs.judge_parts(sentences, k)
    slots: list[ChatRequest | None] = [None] * len(endings)
    for i, r in reqs.verdicts(head, tail, endings):
        slots[i] = r
    group = reqs.position_key(head, tail, list(endings))
    if endings_key is None:
        return JudgeAsk(requests=slots, group=group)
    links = [records.ending_link(endings_key, e) if r is not None else b"" for e, r in zip(endings, slots)]
    return JudgeAsk(requests=slots, group=group, links=links, link=records.endings_link(endings_key, list(endings)))


class Cached(msgspec.Struct, kw_only=True):
    """A position as the cache holds it. `endings` is None when its generation
    record is missing (and `answers` then too); an answer is None for an empty
    ending or a verdict record that is missing."""

    endings: records.Endings | None
    answers: Answers | None = None
    asked: int = 0  # endings judged (non-empty)
    # adaptive endings: each round's endings key and judge requests (`cache drop --run` names them)
    rounds: list[tuple[bytes, JudgeAsk]] = []
    complete: bool = False  # adaptive endings: every round judged and the stopping rule held at the last


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


def lookup_position(reads: CacheReads, reqs: ScoreRequests, sentences: Sequence[str], k: int) -> Cached:
    """The position's records under the run's settings: its one request, or with adaptive
    endings its rounds (`lookup_rounds`)."""
    return lookup_rounds(reads, reqs, sentences, k) if reqs.cfg.adaptive else lookup(reads, reqs, sentences, k)


def lookup_rounds(reads: CacheReads, reqs: ScoreRequests, sentences: Sequence[str], k: int) -> Cached:
    """Adaptive endings' rounds of the position as the run drew them (`RoundWalk`), joined
    in draw order. An unfinished position gives the rounds cached; `complete` says
    whether the rule held at the last of them."""
    walk = RoundWalk(reqs, sentences, k)
    got = Answers(texts=[], first_logprobs=[], usage=records.Usage())
    asked, found = 0, []
    for request in walk.requests():
        rec = reads.endings(request)
        if rec is None:
            break
        ask = judge_ask(reqs, sentences, k, rec.texts)
        answers = reads.answers(ask.requests, ask.group)
        found.append((chat_key(request), ask))
        got.texts += answers.texts
        got.first_logprobs += answers.first_logprobs
        got.usage.add(answers.usage)
        asked += sum(q is not None for q in ask.requests)
        walk.add(rec, [None if t is None else prompts.counted_verdict(reqs.cfg.judge_constraint, t, lp)
                       for t, lp in zip(answers.texts, answers.first_logprobs)],
                 judged=all(q is None or t is not None for q, t in zip(ask.requests, answers.texts)))
    if not found:
        return Cached(endings=None)
    return Cached(endings=walk.endings(0.0), answers=got, asked=asked, rounds=found, complete=walk.stopped)
