"""The model's requests from the token ids of the prompts a run sent: the check of
the model on a real server (bench/prefix_cache.py, the slow test), where every
prompt is known after the run.

A position's generation prompt is one token-id array (its n copies share all its
full blocks); its judge prompts are one array per judged ending, in the order the
judge sends them: the first alone (the warm-up), the others as one batch that
shares the full blocks all of them have in common.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tension.core.pipelines.prefix.engine import Group
from tension.core.pipelines.prefix.schedule import PositionWork
from tension.kernels.prefix_cache import block_hashes, common_prefix

__all__ = ["position_work", "shared_blocks"]


def shared_blocks(prompts: Sequence[np.ndarray], block_size: int) -> tuple[np.ndarray, int]:
    """(the full-block hashes every prompt of `prompts` starts with, capped at
    (shortest - 1) // B; the longest prompt's tokens)."""
    hs = [block_hashes(np.asarray(p, dtype=np.int64), block_size) for p in prompts]
    m = min(len(h) for h in hs)
    for h in hs[1:]:
        m = min(m, common_prefix(hs[0], h))
    cap = (min(len(p) for p in prompts) - 1) // block_size
    return hs[0][:min(m, cap)].copy(), max(len(p) for p in prompts)


def position_work(generation: np.ndarray, n: int, gen_output: int, judge_prompts: Sequence[np.ndarray],
                  judge_output: int, block_size: int, *, warm: bool = True, batched: bool = True) -> PositionWork:
    """One position's requests: the generation prompt's ids (n copies, `gen_output`
    tokens each, e.g. the mean of the endings' lengths), then its judge prompts'
    ids (`judge_output` tokens each)."""
    g_hashes, g_len = shared_blocks([generation], block_size)
    gen = Group(hashes=g_hashes, prompt=g_len, output=gen_output, k=n, role="generation")
    if not judge_prompts:
        return PositionWork(generation=gen)
    first: Group | None = None
    rest = list(judge_prompts)
    if warm:
        h, L = shared_blocks(rest[:1], block_size)
        first = Group(hashes=h, prompt=L, output=judge_output, k=1, role="judge")
        rest = rest[1:]
    batch: Group | None = None
    if rest:
        h, L = shared_blocks(rest, block_size)
        batch = Group(hashes=h, prompt=int(np.mean([len(p) for p in rest]).round()), output=judge_output,
                      k=len(rest), role="judge")
    return PositionWork(generation=gen, warm=first, batch=batch)
