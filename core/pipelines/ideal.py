"""The ideal prompt tokens of a score run (docs/cost.md): what a prefix-caching
server must prefill when every shared prefix is computed once. `estimate` computes
it before a run; `score` (run.json, `prompt_tokens`) after one, beside what the
servers computed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from tension.core.config import ScoreConfig
from tension.core.prompts import score as prompts

if TYPE_CHECKING:  # score's package imports this module
    from tension.core.pipelines.score.positions import Position

__all__ = ["TokenTotals", "Tally", "constants", "template_pieces"]


class TokenTotals(msgspec.Struct, kw_only=True):
    sent: int = 0  # prompt tokens summed over every request
    computed: int = 0  # prompt tokens a prefix-caching server must compute (shared prefixes once)



def constants(counts: list[int]) -> dict[str, int]:
    names = ["ending_system", "ending_instruction", "judge_system", "judge_head", "judge_mid", "judge_tail"]
    return dict(zip(names, counts))


def template_pieces() -> list[str]:
    """The fixed texts of the prompts, in `constants` order."""
    head, rest = prompts.JUDGE_USER.split("{anchor} {continuation}")
    mid, tail = rest.split("{anchor} {ending}")
    return [prompts.ENDING_SYSTEM, prompts.ENDING_USER.format(prefix=""), prompts.JUDGE_SYSTEM, head, mid, tail]


class Tally:
    """Per-story sums, vectorised over the story's positions."""

    def __init__(self, cfg: ScoreConfig, const: dict[str, int], ending_tokens: float, keep: bool = False):
        self.cfg = cfg
        self.kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = [] if keep else None  # P, a, c
        self.n = cfg.endings
        self.O = const["ending_system"] + const["ending_instruction"]
        self.H = const["judge_system"] + const["judge_head"]
        self.M = const["judge_mid"]
        self.U = const["judge_tail"]
        self.E = ending_tokens
        self.gen_sent = 0
        self.gen_computed = self.O  # the instruction: once for the whole corpus
        self.judge_sent = 0.0
        self.judge_computed = float(self.H)  # judge system + header: once for the corpus
        self.positions = 0
        self._any = False

    def story(self, sents: list[str], words: int, ps: list[Position], endings: Sequence[int] | None = None) -> None:
        """`endings`: each position's endings, where they differ (adaptive endings); else n."""
        if not ps:
            return
        self._any = True
        n = self.n if endings is None else np.asarray(endings, dtype=np.float64)
        cw = self.cfg.continuation_words
        P = np.fromiter((p.tokens for p in ps), dtype=np.int64, count=len(ps))
        k = np.fromiter((p.k for p in ps), dtype=np.int64, count=len(ps))
        w = np.fromiter((len(s.split()) for s in sents), dtype=np.int64, count=len(sents))
        after = w.sum() - np.cumsum(w)  # words in s[k:] at index k-1
        ratio = ps[0].story_tokens / words if words else 1.0
        a = w[k - 1] * ratio
        c = np.minimum(after[k - 1], cw) * ratio
        self.positions += len(ps)
        self.gen_sent += int(len(ps) * self.O + P.sum())
        self.gen_computed += int(P.max())
        self.judge_sent += float((n * (self.H + 2 * a + c + self.M + self.E + self.U)).sum())
        self.judge_computed += float((2 * a + c + self.M + n * (self.E + self.U)).sum())
        if self.kept is not None:
            self.kept.append((P, a, c))

    def totals(self) -> dict[str, TokenTotals]:
        if not self._any:
            return {"generation": TokenTotals(), "judge": TokenTotals()}
        return {"generation": TokenTotals(sent=self.gen_sent, computed=self.gen_computed),
                "judge": TokenTotals(sent=round(self.judge_sent), computed=round(self.judge_computed))}
