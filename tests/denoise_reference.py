"""Plain reference for kernels/denoise.py (docs/metrics.md 1.8), written from the text:
dense matrices and scipy's root finder instead of the kernel's banded Cholesky and
bisection.

For a story of no-rates ``y_j = 1 − k_j/n_j``: weights ``w_j = n_j / (p_j (1 − p_j))`` with
``p_j = (k_j + ½)/(n_j + 1)``; the fit ``f = argmin Σ w (y − f)² + λ ‖D₂ f‖²`` (D₂ the
second differences over the position's index); ``χ²(λ) = Σ w (y − f_λ)²``. The weighted
least-squares line in the index if its χ² ≤ m; else the fit at λ = 1e8 · mean(w) if
that passes; else the λ with χ² = m. Fewer than 3 positions: the data. Cut to [0, 1]."""

from __future__ import annotations

import math

import numpy as np

LAMBDA_MAX = 1e8
LAMBDA_MIN = 1e-6


def weights(n, k) -> np.ndarray:
    n = np.asarray(n, dtype=float)
    p = (np.asarray(k, dtype=float) + 0.5) / (n + 1.0)
    return n / (p * (1.0 - p))


def fit(y, w, lam: float) -> np.ndarray:
    m = len(y)
    d = np.zeros((m - 2, m))
    for r in range(m - 2):
        d[r, r], d[r, r + 1], d[r, r + 2] = 1.0, -2.0, 1.0
    return np.linalg.solve(np.diag(w) + lam * d.T @ d, w * y)


def denoise(n, k) -> np.ndarray:
    n, k = np.asarray(n), np.asarray(k)
    y = 1.0 - k / n
    m = len(y)
    if m < 3:
        return np.clip(y.astype(float), 0.0, 1.0)
    w = weights(n, k)
    j = np.arange(m, dtype=float)
    slope, icpt = np.polyfit(j, y, 1, w=np.sqrt(w))
    line = icpt + slope * j
    if np.sum(w * (y - line) ** 2) <= m:
        return np.clip(line, 0.0, 1.0)
    scale = float(np.mean(w))

    def excess(log_lam: float) -> float:
        f = fit(y, w, math.exp(log_lam) * scale)
        return float(np.sum(w * (y - f) ** 2) - m)

    if excess(math.log(LAMBDA_MAX)) <= 0:
        return np.clip(fit(y, w, LAMBDA_MAX * scale), 0.0, 1.0)
    from scipy.optimize import brentq  # at use: not at every worker's collection

    root = brentq(excess, math.log(LAMBDA_MIN), math.log(LAMBDA_MAX), xtol=1e-13)
    return np.clip(fit(y, w, math.exp(root) * scale), 0.0, 1.0)
