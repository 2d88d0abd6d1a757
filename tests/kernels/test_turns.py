"""The comparable second-order statistics (kernels/turns.py, docs/metrics.md 1.9) against
a plain reference written from the definition, and their edge cases; the study that
chose them, small (bench/second_order.py runs it whole)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tension.kernels.curves import CurveSettings
from tension.kernels.denoise import corrected_stats
from tension.kernels.turns import TURN_C, TURN_HEIGHT, TURN_Z, smoothed_se, turn_stats, turn_stats_of_curves
from tension.testing.spoiled import SPOILS, spoiled

S = CurveSettings()


def _ref(x, y, se, h=TURN_HEIGHT, z=TURN_Z, c=TURN_C, s=S):
    """Retain, convergence, IRs from the definition, in plain Python."""
    m = len(y)
    half = s.window // 2
    sm = [sum(y[max(0, j - half):min(m, j + half + 1)]) / (min(m, j + half + 1) - max(0, j - half)) for j in range(m)]
    X = [(v - min(x)) / (max(x) - min(x)) for v in x]
    if m < 3:
        return [math.nan] * (2 + len(s.thresholds))
    # zigzag: wait for the first move of h, then follow the running extreme
    pivots = []
    direction, ext = 0, 0
    lo = hi = 0
    for j in range(1, m):
        if direction == 0:
            hi = j if sm[j] > sm[hi] else hi
            lo = j if sm[j] < sm[lo] else lo
            if sm[j] - sm[lo] >= h - 1e-12:
                direction, ext = 1, j
            elif sm[hi] - sm[j] >= h - 1e-12:
                direction, ext = -1, j
            continue
        need = h + z * math.hypot(se[ext], se[j]) - 1e-12
        if direction * (sm[j] - sm[ext]) > 1e-12:
            ext = j
        elif direction * (sm[ext] - sm[j]) >= need:
            pivots.append((ext, direction == 1))
            direction, ext = -direction, j

    def reach(j, step):
        target = h + c * se[j]  # from where the curve is, not from the noisy pivot
        i = j
        while 0 <= i + step < m:
            i += step
            if abs(sm[i] - sm[j]) >= target - 1e-12:
                prev, cur = abs(sm[i - step] - sm[j]), abs(sm[i] - sm[j])
                t = min(1.0, max(0.0, (target - prev) / (cur - prev))) if cur > prev else 1.0
                return abs(X[i - step] + t * (X[i] - X[i - step]) - X[j])
        return math.inf

    irs = [0.0] * len(s.thresholds)
    ratios = []
    for j, is_peak in pivots:
        angle = math.degrees(math.atan(reach(j, -1) / h) + math.atan(reach(j, 1) / h))
        for q, a in enumerate(s.thresholds):
            irs[q] += angle <= a + 1e-9
        if is_peak and sm[j] > 0:
            ratios.append(min(sm[j + 1:j + 1 + s.retention_window]) / sm[j])
    retain = 100 * sum(ratios) / len(ratios) if ratios else math.nan
    return [retain, retain - 100, *(v / m for v in irs)]


def _story(seed, m=None):
    rng = np.random.default_rng(seed)
    m = m or int(rng.integers(3, 90))
    x = np.sort(rng.uniform(0.05, 1.0, m))
    p = np.clip(0.6 + 0.3 * np.sin(np.arange(m) / rng.uniform(1, 6)) + rng.normal(0, 0.05, m), 0.01, 0.99)
    n = rng.integers(4, 120, m)
    return x, n, rng.binomial(n, 1.0 - p)


@pytest.mark.parametrize("seed", range(30))
def test_the_kernel_is_the_definition(seed):
    x, n, k = _story(seed)
    off = np.array([0, len(x)])
    y = 1.0 - k / n
    se = smoothed_se(n, k, len(x), S.window)
    p = (k + 0.5) / (n + 1.0)
    half = S.window // 2
    want_se = [math.sqrt(sum(p[t] * (1 - p[t]) / n[t] for t in range(max(0, j - half), min(len(x), j + half + 1))))
               / (min(len(x), j + half + 1) - max(0, j - half)) for j in range(len(x))]
    assert np.allclose(se, want_se, atol=1e-15)
    assert np.allclose(turn_stats(x, n, k, off)[0], _ref(x, list(y), want_se), equal_nan=True, atol=1e-9)
    assert np.allclose(turn_stats_of_curves(x, y, off)[0], _ref(x, list(y), [0.0] * len(x)), equal_nan=True,
                       atol=1e-9)
    row = corrected_stats(x, n, k, off)[0]
    assert np.allclose(row[2:], turn_stats(x, n, k, off)[0], equal_nan=True)


def test_a_turn_is_counted_by_its_height_not_by_the_curves_scale():
    m = 60
    x = np.linspace(0.1, 0.99, m)
    off = np.array([0, m])
    for depth, turns in ((0.05, 0), (0.3, 1)):  # one dip is one turn (its trough), if deeper than h
        y = np.full(m, 0.8)
        y[30] -= depth
        y[31] -= depth
        got = turn_stats_of_curves(x, y, off)[0]
        assert round(got[-1] * m) == turns  # IR120 counts every turn sharp enough
    # the paper's unit square would count the 0.05 dip as much as the 0.3 one; here a wiggle far below h is no turn
    flat = 0.8 + 0.001 * np.sin(np.arange(m))
    assert list(turn_stats_of_curves(x, flat, off)[0][2:]) == [0.0, 0.0, 0.0]


def test_noise_the_verdicts_can_make_is_not_a_turn():
    m, n = 120, 20
    x = np.linspace(0.1, 0.99, m)
    rng = np.random.default_rng(3)
    k = rng.binomial(n, 0.5, size=(50, m)).ravel()
    off = np.arange(51) * m
    nn = np.full(50 * m, n)
    with_z = turn_stats(x.tolist() * 50, nn, k, off)[:, 3]
    without = turn_stats(x.tolist() * 50, nn, k, off, z=0.0)[:, 3]
    assert with_z.mean() < without.mean()


def test_edge_cases_give_nan_for_that_story_only():
    x, n, k = _story(5, m=40)
    off = np.array([0, 40, 80])
    for bad in SPOILS:
        xb, nb, kb = spoiled(x, n, k, bad, 3)
        rows = turn_stats(np.concatenate([xb, x]), np.concatenate([nb, n]), np.concatenate([kb, k]), off)
        assert np.isnan(rows[0]).all()
        assert np.allclose(rows[1], turn_stats(x, n, k, np.array([0, 40]))[0], equal_nan=True)
    short = turn_stats(np.array([0.1, 0.5]), np.array([10, 10]), np.array([2, 9]), np.array([0, 0, 2]))
    assert short.shape == (2, 5) and np.isnan(short).all()  # empty, and fewer than 3 positions
    flat = turn_stats(np.linspace(0, 1, 20), np.full(20, 10), np.full(20, 10), np.array([0, 20]))[0]
    assert math.isnan(flat[0]) and list(flat[2:]) == [0.0, 0.0, 0.0]  # all matches: no turn, no peak


def test_the_study_prefers_the_chosen_estimate_to_the_papers_raw_value():
    """A small run of bench/second_order.py's study (the figures in docs/metrics.md are
    of the whole): at 100 endings the chosen estimate's IR60 is within the bias bar and
    orders groups better than the paper's raw value, with fewer false positives."""
    from tension.testing.curve_families import CONFIGS
    from tension.testing.second_order import CHOSEN, bank, study

    configs = [c for c in CONFIGS if c[0] in ("flat with dips", "walk, rough", "wave with spikes")]
    banks = [bank(c, 60, 80, 0, candidates=("paper, raw", CHOSEN), ns=(100,)) for c in configs]
    rows = {r.candidate: r for r in study(banks, 40, 1)}
    chosen, raw = rows[CHOSEN], rows["paper, raw"]
    assert 0.7 <= chosen.bias_median <= 1.4, chosen
    assert raw.bias_median > 2, raw
    assert chosen.order > raw.order and chosen.false_positive <= raw.false_positive
    assert chosen.coverage_widened >= 0.9 > raw.coverage_widened


def test_the_reports_estimate_is_the_studys_chosen_candidate():
    """corrected_stats computes what the study's row of z = c = 0.75 computes (the one
    docs/metrics.md 1.9 reports as chosen)."""
    from tension.testing.second_order import CANDIDATES, CHOSEN

    assert (TURN_Z, TURN_C) == (0.75, 0.75)
    for seed in range(5):
        x, n, k = _story(seed, m=50)
        off = np.array([0, 50])
        named = CANDIDATES["turns, z = 0.75, reach + 0.75 se"][1](x, n, k, off, S)
        assert np.array_equal(named, CANDIDATES[CHOSEN][1](x, n, k, off, S), equal_nan=True)
        assert np.array_equal(named, corrected_stats(x, n, k, off)[:, 2:], equal_nan=True)


def test_the_bench_prints_the_studys_table(capsys):
    import runpy
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench" / "second_order.py"
    mod = runpy.run_path(str(bench))
    assert mod["main"](["--families", "stairs", "--stories", "40", "--reps", "5", "--positions", "60"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| statistic | candidate | m | n | bias (median; range) |")
    assert "| ir60 | paper, raw | 60 | 100 |" in out and "| retain | chosen: corrected_stats | 60 | 20 |" in out
    with pytest.raises(SystemExit):
        mod["main"](["--families", "nope"])
    assert "none of 'nope' is a family" in capsys.readouterr().err
