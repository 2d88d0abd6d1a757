"""Wilson's score interval written out as textbooks print it, for tests that check the
audit's intervals (core/reports/judge_audit.py) against a reference of their own."""

from __future__ import annotations

import math

__all__ = ["wilson_textbook"]


def wilson_textbook(x: float, n: float) -> tuple[float, float]:
    """Wilson (1927): (p + z²/2n ± z·√(p(1 − p)/n + z²/4n²)) / (1 + z²/n), with Brown, Cai &
    DasGupta's (2001) ends near 0 and n: ½χ²(2x; 0.05)/n for x = 1 … x* (x* = 2 up to n = 50,
    3 up to 100), 1 − ½χ²(2(n − x); 0.05)/n for x = n − x* … n − 1."""
    from scipy.stats import chi2, norm

    z = norm.ppf(0.975)
    p = x / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo, hi = max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))
    near = 2 if n <= 50 else 3 if n <= 100 else 0
    if 0 < x <= near:
        lo = chi2.ppf(0.05, 2 * x) / 2 / n
    if 0 < n - x <= near:
        hi = 1 - chi2.ppf(0.05, 2 * (n - x)) / 2 / n
    return lo, hi
