"""RoundWalk (core/pipelines/score/round_walk.py): the one walk of a position's adaptive
rounds that the live run, the cache reader and `estimate` share. Checked against the
stopping rule written out here from docs/metrics.md 1.7 (Wilson half-width at a round's
end, or the maximum), not against kernels/stopping.py."""

from __future__ import annotations

import math

import pytest

from tension.cache.records import Endings, Usage
from tension.core.config import ScoreConfig
from tension.core.pipelines.score.requests import ScoreRequests
from tension.core.pipelines.score.round_walk import RoundWalk, no_count

SENTS = ["One.", "Two.", "Three.", "Four."]


def _walk(target: float = 0.1, rounds: int = 10, most: int = 40) -> RoundWalk:
    cfg = ScoreConfig(target_half_width=target, round_endings=rounds, max_endings=most, seed=1)
    return RoundWalk(ScoreRequests(cfg, "m", "j"), SENTS, 2)


def _rec(n: int, tag: str) -> Endings:
    return Endings(texts=[f"{tag}{i}" for i in range(n)], finish_reasons=["stop"] * n, model="m",
                   usage=Usage(prompt_tokens=5, completion_tokens=n, requests=1), created=0.0, seconds=1.0)


def _half_width(n: int, no: int) -> float:
    z = 1.959963984540054
    p = no / n
    return z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)


def test_stops_where_the_rule_written_out_does() -> None:
    walk = _walk(target=0.2)
    seen = []
    for request in walk.requests():
        seen.append(request)
        r = walk.rounds
        votes = ["N"] * 10 if r == 0 else ["Y"] * 10  # 10 no's, then matches
        walk.add(_rec(10, f"r{r}-"), votes)
        n = 10 * (r + 1)
        assert walk.stopped == (_half_width(n, 10) <= 0.2 or n >= 40)
    assert len(seen) == walk.rounds >= 1
    assert len({r.seed for r in seen}) == len(seen)  # each round its own request
    assert walk.texts[:2] == ["r0-0", "r0-1"] and len(walk.votes) == 10 * walk.rounds
    joined = walk.endings(5.0)
    assert joined.usage.requests == walk.rounds and joined.seconds == walk.rounds and joined.created == 5.0


def test_goes_to_the_maximum_when_the_target_is_never_met() -> None:
    walk = _walk(target=0.01)
    for _request in walk.requests():
        walk.add(_rec(10, "x"), ["Y", "N"] * 5)
    assert walk.rounds == 4 and walk.stopped and len(walk.texts) == 40


def test_a_round_without_all_verdicts_ends_the_walk_not_complete() -> None:
    walk = _walk(target=0.45)  # the first round would meet it
    for _request in walk.requests():
        walk.add(_rec(10, "x"), ["N"] * 9 + [None], judged=False)
    assert walk.rounds == 1 and not walk.stopped


def test_a_caller_that_adds_nothing_ends_the_walk() -> None:
    walk = _walk()
    assert len(list(walk.requests())) == 1 and walk.rounds == 0 and not walk.stopped


def test_no_count_counts_all_but_matches() -> None:
    assert no_count(["Y", " yes", "N", "Maybe", None, ""]) == 4


def test_refuses_a_fixed_run() -> None:
    with pytest.raises(ValueError, match="target half-width"):
        RoundWalk(ScoreRequests(ScoreConfig(), "m", "j"), SENTS, 2)
