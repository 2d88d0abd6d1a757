"""Adaptive endings' stopping rule (docs/metrics.md 1.7): a position's endings come in
rounds of R (the last one shorter when R does not divide M); after each judged round
the Wilson 95 % interval of its no-rate from all endings so far is computed, and the
position stops once its half-width is at most W, or at M endings.

The no-rate counts endings as docs/metrics.md 1.3 does: an ending is a "no" unless its
verdict is a match (N, empty and malformed all count as no), out of all endings.

One rule for three callers: the live run (`should_stop`), the simulation
(`stop_counts`, vectorised over positions) and `estimate --pilot` (`expected_endings`,
exact from the binomial). Plain numpy: these are a few thousand operations a run.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Z95", "wilson_half_width", "round_ends", "should_stop", "stop_counts", "expected_endings",
           "rounds_distribution"]

Z95 = 1.959963984540054  # the two-sided 95 % normal quantile


def wilson_half_width(n, no):
    """Half-width of the Wilson 95 % interval of `no` no's out of `n` endings (arrays or scalars)."""
    n = np.asarray(n, dtype=np.float64)
    no = np.asarray(no, dtype=np.float64)
    z2 = Z95 * Z95
    with np.errstate(invalid="ignore", divide="ignore"):
        p = no / n
        hw = Z95 / (1.0 + z2 / n) * np.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    return np.where(n > 0, hw, np.inf)


def round_ends(round_size: int, max_endings: int) -> list[int]:
    """The endings a position holds after each round: R, 2R, …, M."""
    out = list(range(round_size, max_endings, round_size))
    return out + [max_endings]


def should_stop(n: int, no: int, target: float, max_endings: int) -> bool:
    """After a judged round of a position holding `n` endings, `no` of them no's."""
    # a tiny tolerance: W = 0.1 is met by a half-width that is 0.1 up to rounding
    return n >= max_endings or float(wilson_half_width(n, no)) <= target + 1e-12


def stop_counts(no_draws: np.ndarray, round_size: int, max_endings: int, target: float) -> np.ndarray:
    """Endings each position uses. `no_draws` is positions × M (1 = a no), in the order the
    endings are drawn; a position uses the first k of its row, k at a round's end."""
    ends = np.asarray(round_ends(round_size, max_endings))
    cum = np.cumsum(no_draws, axis=1)[:, ends - 1]  # positions × rounds: no's after each round
    ok = wilson_half_width(ends[None, :], cum) <= target + 1e-12
    ok[:, -1] = True
    return ends[np.argmax(ok, axis=1)]


def expected_endings(p_no: float, round_size: int, max_endings: int, target: float) -> float:
    """Expected endings a position uses when each ending is a no with probability `p_no`:
    exact, by carrying the distribution of the no count of the positions not yet stopped."""
    from scipy.stats import binom

    p_no = min(max(p_no, 0.0), 1.0)
    alive = np.zeros(max_endings + 1)
    alive[0] = 1.0
    start = 0
    expected = 0.0
    for end in round_ends(round_size, max_endings):
        step = binom.pmf(np.arange(end - start + 1), end - start, p_no)
        alive = np.convolve(alive, step)[: max_endings + 1]
        if end >= max_endings:
            return expected + end * float(alive.sum())
        stops = wilson_half_width(end, np.arange(max_endings + 1)) <= target + 1e-12
        expected += end * float(alive[stops].sum())
        alive = np.where(stops, 0.0, alive)
        start = end
    return expected  # not reached: the last round ends at M


def rounds_distribution(used: list[int], round_size: int, max_endings: int) -> dict[str, int]:
    """Positions per number of rounds ("1": stopped after the first round), for run.json."""
    ends = round_ends(round_size, max_endings)
    out: dict[str, int] = {}
    for n in used:
        r = next((i + 1 for i, e in enumerate(ends) if n <= e), len(ends))
        out[str(r)] = out.get(str(r), 0) + 1
    return {k: out[k] for k in sorted(out, key=int)}

