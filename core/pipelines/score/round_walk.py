"""Adaptive endings' rounds of one position (docs/metrics.md 1.7), walked one way.

A position's endings come in rounds, each its own generation request
(`ScoreRequests.endings_round`), judged before the next is asked, until the
stopping rule (kernels/stopping.py) holds. Three readers walk those rounds: the
live run (rounds.py `draw`: sends each round and judges it), the cache (lookup.py
`lookup_rounds`: reads each round, for the view, `cache drop --run` and the
report's rerun) and `estimate` (what is complete, what is left). `RoundWalk` is the
walk without its I/O: it hands out each round's request, takes the round's endings
and counted verdicts, joins them in draw order and applies the rule once per round.
Whoever fetches the rounds, live or cached, stops them where the others would.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tension.cache.records import Endings, Usage
from tension.core.llm.protocol import ChatRequest
from tension.core.pipelines.score.requests import ScoreRequests
from tension.core.prompts import score as prompts
from tension.kernels.stopping import round_ends, should_stop

__all__ = ["RoundWalk", "no_count"]


def no_count(verdicts: Sequence[str | None]) -> int:
    """Endings that count as no (docs/metrics.md 1.3): all but the matches (N, empty and
    malformed alike), of the verdicts each ending counts."""
    return sum(not prompts.parse_verdict(v)[0] for v in verdicts)


class RoundWalk:
    """One position's rounds: `requests()` yields round r's generation request, the
    next only after `add` took round r and the rule asked for another; a caller that
    cannot add a round (not cached, a verdict missing) leaves the loop, and the walk
    holds the rounds added so far."""

    def __init__(self, reqs: ScoreRequests, sentences: Sequence[str], k: int):
        cfg = reqs.cfg
        if cfg.target_half_width is None:
            raise ValueError("RoundWalk: adaptive endings need a target half-width")
        self._reqs, self._sentences, self._k = reqs, sentences, k
        self._target, self._max = cfg.target_half_width, cfg.max_endings
        self._ends = round_ends(cfg.round_endings, cfg.max_endings)
        self.texts: list[str] = []
        self.reasons: list[str | None] = []
        self.votes: list[str | None] = []  # counted verdict per ending (None: empty, not judged)
        self.usage = Usage()  # the rounds' generation usage
        self.model = ""
        self.seconds = 0.0
        self.rounds = 0  # rounds added
        self.stopped = False  # the rule held after the last round: the position is complete
        self._open = True  # False once a round came without all its verdicts: the walk ends there

    def requests(self) -> Iterator[ChatRequest]:
        for r in range(len(self._ends)):
            if self.stopped or not self._open or self.rounds != r:
                return  # complete, cut short, or the caller did not add the last round
            yield self._reqs.endings_round(self._sentences, self._k, r)

    def add(self, rec: Endings, votes: Sequence[str | None], judged: bool = True) -> None:
        """Round `rounds`' endings and their counted verdicts (`prompts.counted_verdict`).
        judged=False: a verdict is missing (read from a cache), so the rule cannot tell
        whether the run went on; the round is kept and the walk ends with it."""
        end = self._ends[self.rounds]
        self.texts += rec.texts
        self.reasons += rec.finish_reasons
        self.votes += votes
        self.usage.add(rec.usage)
        self.model = self.model or rec.model
        self.seconds += rec.seconds
        self.rounds += 1
        self._open = judged
        self.stopped = judged and should_stop(end, no_count(self.votes), self._target, self._max)

    def endings(self, created: float) -> Endings:
        """The rounds' records joined: what a fixed run of as many endings holds."""
        return Endings(texts=self.texts, finish_reasons=self.reasons, model=self.model, usage=self.usage,
                       created=created, seconds=self.seconds)
