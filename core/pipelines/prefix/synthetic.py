"""The model's requests from `estimate`'s token counts, before any ending exists.

A block's identity is all the model needs: two prompts share a full block exactly
when they share every token up to its end. So no token ids are made up, only
block identities, from what `estimate` counts (docs/cost.md's symbols):

- a generation prompt is the template's head (the ending system prompt and
  instruction, O, plus the chat template's markers), the story's first P tokens,
  then the template's tail. Its blocks inside the head are the same for every
  story; those inside head + P are the story's (a prefix of the story's tokens, as
  `estimate` counts them); the rest hold the tail and match nothing.
- a judge prompt is the judge's head (system prompt and text before the
  continuation, H, plus markers), then the position's own text (2a + c + M), the
  ending (E) and the text after it (U). Its blocks inside the judge head are the
  same everywhere; then the position's, which all its n prompts share; the rest
  are each prompt's own.

The chat template's markers are counted as ChatML's (Qwen3, SmolLM2): about 8
tokens before the user text and 10 after it (the assistant header, and Qwen3's
empty think block when reasoning is off).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from tension.core.pipelines.prefix.engine import Group
from tension.core.pipelines.prefix.schedule import PositionWork

__all__ = ["SyntheticPrompts", "MARKERS_BEFORE", "MARKERS_AFTER"]

MARKERS_BEFORE = 8  # <|im_start|>system\n … <|im_end|>\n<|im_start|>user\n
MARKERS_AFTER = 10  # <|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _ids(space: int, n: int, start: int = 0) -> np.ndarray:
    """n distinct block identities of `space` (≥ 2, never the kernels' markers 0 and 1)."""
    with np.errstate(over="ignore"):
        x = np.arange(start, start + n, dtype=np.uint64) + np.uint64((space * 0x9E3779B97F4A7C15) % 2**64)
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
    x ^= x >> np.uint64(31)
    return x | np.uint64(2)


class SyntheticPrompts:
    """Every position's requests, story after story, positions in ascending k (the feed's order)."""

    def __init__(self, *, block_size: int, n: int, gen_head: int, judge_head: int, judge_mid: int, judge_tail: int,
                 ending_tokens: float, judge_output: int, warm: bool = True):
        self.B = block_size
        self.n = n
        self.gen_head = gen_head + MARKERS_BEFORE
        self.judge_head = judge_head + MARKERS_BEFORE
        self.M = judge_mid
        self.U = judge_tail + MARKERS_AFTER
        self.E = max(1, round(ending_tokens))
        self.judge_output = judge_output
        self.warm = warm  # one judge prompt alone first (--warm-judge), then the others
        self._gen_global = _ids(0, self.gen_head // block_size + 1)
        self._judge_global = _ids(1, self.judge_head // block_size + 1)
        self._space = 2

    def story(self, prefix_tokens: np.ndarray, anchor: np.ndarray, continuation: np.ndarray) -> Iterator[PositionWork]:
        """One story's positions: P (prefix tokens), a and c per position (tokens, floats)."""
        B, n = self.B, self.n
        if len(prefix_tokens) == 0:
            return
        P = prefix_tokens.astype(np.int64)
        longest = self.gen_head + int(P.max())
        g0 = self.gen_head // B
        chain = np.concatenate([self._gen_global[:g0], _ids(self._space, longest // B - g0 + 1)])
        self._space += 1
        j0 = self.judge_head // B
        for i in range(len(P)):
            L = self.gen_head + int(P[i]) + MARKERS_AFTER
            # the n copies share every full block (up to the cap); later positions only those before the tail
            m = min((self.gen_head + int(P[i])) // B, (L - 1) // B)
            tail = (L - 1) // B - m
            hashes = chain[:m] if tail == 0 else np.concatenate([chain[:m], _ids(self._space, tail)])
            self._space += tail > 0
            gen = Group(hashes=hashes, prompt=L, output=self.E, k=n, role="generation")
            head = self.judge_head + int(round(2 * anchor[i] + continuation[i])) + self.M
            Lj = head + self.E + self.U
            mj = min(head // B, (Lj - 1) // B)
            hashes = np.concatenate([self._judge_global[:min(j0, mj)], _ids(self._space, max(0, mj - j0))])
            self._space += 1
            first = Group(hashes=hashes, prompt=Lj, output=self.judge_output, k=1, role="judge")
            rest = n - 1 if self.warm else n
            batch = Group(hashes=hashes, prompt=Lj, output=self.judge_output, k=rest, role="judge") if rest else None
            yield PositionWork(generation=gen, warm=first if self.warm else None, batch=batch)

    def corpus(self, stories: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Iterator[PositionWork]:
        for P, a, c in stories:
            yield from self.story(P, a, c)
