"""A story's verdict counts with one position spoiled, each way a kernel must refuse it
(a NaN pct, a position without endings, more matches than endings): the edge cases the
kernels of counts share (kernels/denoise.py, kernels/turns.py)."""

from __future__ import annotations

import numpy as np

__all__ = ["SPOILS", "spoiled"]

SPOILS = ("nan", "no endings", "count")


def spoiled(x: np.ndarray, n: np.ndarray, k: np.ndarray, how: str, at: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Copies of (x, n, k) with position `at` spoiled `how` (one of SPOILS)."""
    x, n, k = x.copy(), n.copy(), k.copy()
    if how == "nan":
        x[at] = np.nan
    elif how == "no endings":
        n[at], k[at] = 0, 0
    else:
        k[at] = n[at] + 1
    return x, n, k
