"""The corrected second-order statistics' de-noised curve (kernels/denoise.py,
docs/metrics.md 1.8) against the dense reference in tests/denoise_reference.py, its
statistics against the plain curve reference, and the edge cases: ties (a constant
curve, all-match and no-match positions), NaN, empty stories, short stories, positions
without endings."""

from __future__ import annotations

import math

import curve_reference as cref  # tests/ is on sys.path (pyproject's pythonpath)
import denoise_reference as dref
import numpy as np
import pytest

from tension.kernels.curves import CurveSettings
from tension.kernels.denoise import corrected_stats, denoise
from tension.testing.spoiled import SPOILS, spoiled

S = CurveSettings()


def _story(seed: int):
    """A random story: a shape with reversals, a step or a line, a random n per position."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(3, 60))
    x = np.sort(rng.uniform(0.1, 0.99, m))
    kind = seed % 3
    if kind == 0:
        p = 0.6 + 0.3 * np.sin(rng.uniform(5, 40) * x)
    elif kind == 1:
        p = np.where(x < rng.uniform(0.3, 0.8), 0.9, 0.4)
    else:
        p = np.full(m, rng.uniform(0.05, 0.95)) + rng.uniform(-0.4, 0.4) * (x - 0.5)
    n = rng.integers(5, 120, m)
    k = rng.binomial(n, 1.0 - np.clip(p, 0.01, 0.99))
    return x, n, k


def _ref_row(x, f):
    r = cref.story_stats(x, f)
    return [r["mean_nr"], r["late_nr"], r["retain"], r["convergence"], *r["ir"]]


@pytest.mark.parametrize("seed", range(40))
def test_fit_and_statistics_match_the_dense_reference(seed):
    x, n, k = _story(seed)
    off = np.array([0, len(x)])
    got, lam = denoise(x, n, k, off)
    want = dref.denoise(n, k)
    assert np.allclose(got, want, atol=1e-7, rtol=0), np.abs(got - want).max()
    # corrected_stats' mean and late NR are the raw curve's (its second-order columns are
    # the turns', tests/kernels/test_turns.py)
    row = corrected_stats(x, n, k, off, S)[0]
    assert np.allclose(row[:2], _ref_row(x, 1.0 - k / n)[:2], equal_nan=True, atol=1e-12)
    # χ² of the fit: within the noise's m; at it unless the line (λ = ∞) or λ_max passes
    w = dref.weights(n, k)
    y = 1.0 - k / n
    chi2 = float(np.sum(w * (y - np.clip(got, 0, 1)) ** 2))
    if math.isfinite(lam[0]) and lam[0] < dref.LAMBDA_MAX and (got > 0).all() and (got < 1).all():
        assert chi2 == pytest.approx(len(x), rel=1e-6)


def test_several_stories_each_fit_alone():
    stories = [_story(s) for s in (1, 2, 3, 4)]
    x = np.concatenate([s[0] for s in stories])
    n = np.concatenate([s[1] for s in stories])
    k = np.concatenate([s[2] for s in stories])
    off = np.concatenate([[0], np.cumsum([len(s[0]) for s in stories])])
    together, _ = denoise(x, n, k, off)
    alone = np.concatenate([denoise(*s, np.array([0, len(s[0])]))[0] for s in stories])
    assert np.array_equal(together, alone)


def test_a_constant_curve_is_its_own_fit_and_has_no_reversal():
    m = 30
    x = np.linspace(0.1, 0.99, m)
    for matches in (0, 5, 20):  # all no-match, a tie everywhere, all match
        n = np.full(m, 20)
        k = np.full(m, matches)
        y, lam = denoise(x, n, k, np.array([0, m]))
        assert lam[0] == math.inf
        assert np.allclose(y, 1.0 - matches / 20, atol=1e-12)
        row = corrected_stats(x, n, k, np.array([0, m]))[0]
        assert list(row[4:]) == [0.0, 0.0, 0.0]  # a flat curve: no reversal
        assert math.isnan(row[2]) and math.isnan(row[3])  # and no peak


def test_noise_around_a_line_becomes_the_line_when_the_line_passes():
    m = 150
    x = np.linspace(0.1, 0.99, m)
    p = 0.97 - 0.42 * (x - 0.1) / 0.89
    n = np.full(m, 100)
    lines = 0
    for seed in range(10):
        k = np.random.default_rng(seed).binomial(100, 1.0 - p)
        y, lam = denoise(x, n, k, np.array([0, m]))
        w = dref.weights(n, k)
        j = np.arange(m)
        slope, icpt = np.polyfit(j, 1.0 - k / n, 1, w=np.sqrt(w))
        if np.sum(w * (1.0 - k / n - icpt - slope * j) ** 2) <= m:
            lines += 1
            assert lam[0] == math.inf
            assert np.all(np.diff(y) < 0)
            assert list(corrected_stats(x, n, k, np.array([0, m]))[0][4:]) == [0.0, 0.0, 0.0]
        else:
            assert lam[0] < math.inf
    assert lines >= 2  # χ² of the line is about χ²(m − 2): under m about half the time


def test_nan_pct_no_endings_and_bad_counts_give_nan_for_that_story_only():
    x, n, k = _story(7)
    m = len(x)
    for bad in SPOILS:
        xb, nb, kb = spoiled(x, n, k, bad, 1)
        xx, nn, kk = np.concatenate([xb, x]), np.concatenate([nb, n]), np.concatenate([kb, k])
        off = np.array([0, m, 2 * m])
        y, lam = denoise(xx, nn, kk, off)
        assert np.isnan(y[:m]).all() and math.isnan(lam[0])
        assert np.array_equal(y[m:], denoise(x, n, k, np.array([0, m]))[0])
        rows = corrected_stats(xx, nn, kk, off)
        assert np.isnan(rows[0]).all() and np.isfinite(rows[1][4:]).all()


def test_empty_and_short_stories():
    x = np.array([0.2, 0.5, 0.3, 0.6])
    n = np.array([10, 10, 10, 10])
    k = np.array([1, 4, 2, 9])
    off = np.array([0, 0, 1, 1, 3, 4])  # empty, one position, empty, two positions, one
    y, lam = denoise(x, n, k, off)
    assert np.allclose(y, 1.0 - k / n)  # fewer than 3 positions: the data themselves
    assert list(lam) == [0.0] * 5
    rows = corrected_stats(x, n, k, off)
    assert rows.shape == (5, 7)
    assert np.isnan(rows[0]).all()  # no positions
    assert np.isnan(rows[1][4:]).all()  # fewer than 3: no IR
    y0, lam0 = denoise(np.empty(0), np.empty(0, int), np.empty(0, int), np.array([0]))
    assert y0.shape == (0,) and lam0.shape == (0,)
    assert corrected_stats(np.empty(0), np.empty(0, int), np.empty(0, int), np.array([0])).shape == (0, 7)


def test_bad_packing_is_refused():
    with pytest.raises(ValueError, match="equal length"):
        denoise(np.zeros(3), np.ones(2, int), np.zeros(3, int), np.array([0, 3]))
    with pytest.raises(ValueError, match="offsets"):
        denoise(np.zeros(3), np.ones(3, int), np.zeros(3, int), np.array([0, 2]))
