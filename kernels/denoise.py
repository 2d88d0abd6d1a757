"""A story's curve de-noised by a binomial-aware penalised fit (docs/metrics.md 1.8), and
`corrected_stats`, the entry point of the comparable second-order statistics
(docs/metrics.md 1.9: since issue 57 they are the turns of kernels/turns.py; the fit
was the estimate of issue 37 and lost the study that chose them).

The fit is a Whittaker smoother with a second-difference penalty: f minimises
``Σ w_j (y_j − f_j)² + λ Σ (f_j − 2 f_{j+1} + f_{j+2})²`` with ``w_j = n_j / (p̃_j (1 − p̃_j))``,
the inverse of the no-rate's binomial variance at position j (``p̃_j = (k_j + ½)/(n_j + 1)``,
the edge rule of kernels/intervals.py, so an all-match or no-match position is not of
infinite weight). Its strength λ comes from the discrepancy principle: the smoothest fit
whose weighted residuals ``χ² = Σ w_j (y_j − f_j)²`` are no larger than the m the noise
alone would give. The straight line (λ = ∞, the penalty's null space: linear in the
position's index) is taken when it already passes. So the strength follows n: at 20
endings the noise allows a smoother fit than at 100, and a curve whose wiggles the noise
explains becomes a line, which has no reversal and no peak.

The no-rates are packed as kernels/intervals.py's: ``n`` endings and ``k`` matches per
position, stories by ``offsets``. A story with a position without endings, a count
outside [0, n] or a NaN pct gets NaN; the fitted values are cut to [0, 1].
"""

from __future__ import annotations

import math

import numba
import numpy as np

from tension.kernels.curves import batch_stats
from tension.kernels.intervals import pack_counts
from tension.kernels.settings import CurveSettings

__all__ = ["denoise", "corrected_stats", "LAMBDA_MIN", "LAMBDA_MAX"]

# The bisection's range for λ, relative to the mean weight: at LAMBDA_MIN the fit is the
# data (χ² ≈ 0), at LAMBDA_MAX it is a line to well under the noise (the penalty's
# smallest non-zero eigenvalue for 150 positions is ≈ 2e-7, so λ · 2e-7 ≫ 1); beyond it the
# system's condition would cost digits, and the exact line is tried first anyway.
LAMBDA_MIN = 1e-6
LAMBDA_MAX = 1e8
_BISECTIONS = 60


@numba.njit(cache=True, nogil=True)
def _solve(w, y, lam, d0, d1, d2, l0, l1, l2, z, f):
    """f = (W + λ D'D)⁻¹ W y by the banded Cholesky factor of the pentadiagonal system."""
    m = y.shape[0]
    for i in range(m):
        d0[i] = w[i]
        d1[i] = 0.0
        d2[i] = 0.0
    # D'D summed row by row of D: (1, −2, 1) at columns r, r+1, r+2
    for r in range(m - 2):
        d0[r] += lam
        d0[r + 1] += 4.0 * lam
        d0[r + 2] += lam
        d1[r] += -2.0 * lam
        d1[r + 1] += -2.0 * lam
        d2[r] += lam
    for i in range(m):
        a2 = d2[i - 2] / l0[i - 2] if i >= 2 else 0.0
        a1 = (d1[i - 1] - (a2 * l1[i - 1] if i >= 2 else 0.0)) / l0[i - 1] if i >= 1 else 0.0
        l2[i] = a2
        l1[i] = a1
        l0[i] = math.sqrt(d0[i] - a1 * a1 - a2 * a2)
    for i in range(m):
        s = w[i] * y[i]
        if i >= 1:
            s -= l1[i] * z[i - 1]
        if i >= 2:
            s -= l2[i] * z[i - 2]
        z[i] = s / l0[i]
    for i in range(m - 1, -1, -1):
        s = z[i]
        if i + 1 < m:
            s -= l1[i + 1] * f[i + 1]
        if i + 2 < m:
            s -= l2[i + 2] * f[i + 2]
        f[i] = s / l0[i]


@numba.njit(cache=True, nogil=True)
def _chi2(w, y, f):
    s = 0.0
    for i in range(y.shape[0]):
        s += w[i] * (y[i] - f[i]) ** 2
    return s


@numba.njit(cache=True, nogil=True)
def _line(w, y, f):
    """The weighted least-squares line in the position's index."""
    m = y.shape[0]
    sw = 0.0
    sj = 0.0
    sy = 0.0
    for i in range(m):
        sw += w[i]
        sj += w[i] * i
        sy += w[i] * y[i]
    jm = sj / sw
    ym = sy / sw
    sjj = 0.0
    sjy = 0.0
    for i in range(m):
        sjj += w[i] * (i - jm) ** 2
        sjy += w[i] * (i - jm) * (y[i] - ym)
    b = sjy / sjj if sjj > 0 else 0.0
    for i in range(m):
        f[i] = ym + b * (i - jm)


@numba.njit(cache=True, nogil=True)
def _fit(w, y, f, lam_out, d0, d1, d2, l0, l1, l2, z):
    m = y.shape[0]
    limit = float(m)
    if m < 3:
        # no second difference to penalise: the data are their own fit
        for i in range(m):
            f[i] = y[i]
        lam_out[0] = 0.0
        return
    wm = 0.0
    for i in range(m):
        wm += w[i]
    wm /= m
    ws = w / wm
    _line(w, y, f)
    if _chi2(w, y, f) <= limit:
        lam_out[0] = np.inf
        return
    _solve(ws, y, LAMBDA_MAX, d0, d1, d2, l0, l1, l2, z, f)
    if _chi2(w, y, f) <= limit:
        lam_out[0] = LAMBDA_MAX
        return
    # χ² grows with λ: the largest λ that keeps it within the limit, on a log scale
    lo = math.log(LAMBDA_MIN)
    hi = math.log(LAMBDA_MAX)
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        _solve(ws, y, math.exp(mid), d0, d1, d2, l0, l1, l2, z, f)
        if _chi2(w, y, f) <= limit:
            lo = mid
        else:
            hi = mid
    lam_out[0] = math.exp(lo)
    _solve(ws, y, lam_out[0], d0, d1, d2, l0, l1, l2, z, f)


@numba.njit(cache=True, nogil=True)
def _denoise(x, n, k, offsets, out, lam):
    mmax = 1
    for i in range(offsets.shape[0] - 1):
        mmax = max(mmax, offsets[i + 1] - offsets[i])
    w = np.empty(mmax)
    y = np.empty(mmax)
    f = np.empty(mmax)
    d0 = np.empty(mmax)
    d1 = np.empty(mmax)
    d2 = np.empty(mmax)
    l0 = np.empty(mmax)
    l1 = np.empty(mmax)
    l2 = np.empty(mmax)
    z = np.empty(mmax)
    one = np.empty(1)
    for i in range(offsets.shape[0] - 1):
        a = offsets[i]
        b = offsets[i + 1]
        m = b - a
        ok = True
        for j in range(a, b):
            if n[j] <= 0 or k[j] < 0 or k[j] > n[j] or not math.isfinite(x[j]):
                ok = False
        if not ok:
            for j in range(a, b):
                out[j] = np.nan
            lam[i] = np.nan
            continue
        for j in range(m):
            nj = n[a + j]
            y[j] = 1.0 - k[a + j] / nj
            p = (k[a + j] + 0.5) / (nj + 1.0)
            w[j] = nj / (p * (1.0 - p))
        _fit(w[:m], y[:m], f[:m], one, d0[:m], d1[:m], d2[:m], l0[:m], l1[:m], l2[:m], z[:m])
        lam[i] = one[0]
        for j in range(m):
            out[a + j] = min(1.0, max(0.0, f[j]))


def denoise(x, n, k, offsets) -> tuple[np.ndarray, np.ndarray]:
    """(the de-noised no-rate of every position, packed as `x`; each story's λ: ∞ for the
    straight line, 0 for a story of fewer than 3 positions, NaN where undefined)."""
    x, n, k, offsets = pack_counts(x, n, k, offsets)
    out = np.empty(len(x))
    lam = np.empty(len(offsets) - 1)
    _denoise(x, n, k, offsets, out, lam)
    return out, lam


def corrected_stats(x, n, k, offsets, settings: CurveSettings = CurveSettings()) -> np.ndarray:
    """Every statistic of every story, stories × s in stories.csv's order (mean NR, late NR,
    Retain, convergence, the IRs), with the second-order ones by the estimator the study
    chose (docs/metrics.md 1.9, bench/second_order.py): the turns of kernels/turns.py at
    height TURN_HEIGHT, each confirmed beyond TURN_Z standard errors of the story's own
    verdicts. Mean and late NR are the paper's (the noise leaves their mean alone). NaN
    for a story with a position without endings, a count outside [0, n] or a NaN pct.

    `denoise` (the discrepancy-principle fit) is no longer part of it: the study found it
    3–12× too low and unable to order groups across curve families; it stays for
    `turn_stats_of_curves(denoise(…))`, one of the study's candidates."""
    from tension.kernels.turns import turn_stats

    x, n, k, offsets = pack_counts(x, n, k, offsets)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(n > 0, 1.0 - k / np.maximum(n, 1), np.nan)
    b = batch_stats(x, np.where(np.isfinite(y), y, 0.0), offsets, settings)
    second = turn_stats(x, n, k, offsets, settings)
    out = np.column_stack([b.mean_nr, b.late_nr, second])
    bad = ~np.isfinite(y) | (k < 0) | (k > n)
    cum = np.concatenate([[0], np.cumsum(bad)])
    out[cum[offsets[1:]] - cum[offsets[:-1]] > 0] = np.nan
    return out
