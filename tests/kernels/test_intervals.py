"""Per-story intervals (docs/metrics.md 1.6): tension.kernels.intervals against the
independent reference in ``tests/interval_reference.py`` (the statistics of every
resampled curve recomputed by the plain-Python curve reference), the draws against
their distribution, the edge cases, reproducibility, and coverage on simulated stories."""

from __future__ import annotations

import math

import interval_reference as iref  # tests/ is on sys.path (pyproject's pythonpath)
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tension.kernels import curves, intervals
from tension.kernels.curves import CurveSettings
from tension.kernels.intervals import Draw

HYP = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
NAN = float("nan")


def points_of(x, n, k, offsets, s: CurveSettings) -> np.ndarray:
    y = np.where(np.asarray(n) > 0, 1.0 - np.asarray(k) / np.maximum(np.asarray(n), 1), np.nan)
    b = curves.batch_stats(x, y, offsets, s)
    return np.column_stack([b.mean_nr, b.late_nr, b.retain, b.convergence, b.ir])


def one(x, n, k, s: CurveSettings = CurveSettings(), resamples: int = 200, seed: int = 0, sid: str = "s"):
    x, n, k = np.asarray(x, float), np.asarray(n, np.int64), np.asarray(k, np.int64)
    offsets = np.array([0, len(x)])
    r = intervals.story_intervals([sid], x, n, k, offsets, points_of(x, n, k, offsets, s), s,
                                  n_resamples=resamples, seed=seed)
    return r.lo[0], r.hi[0], points_of(x, n, k, offsets, s)[0]


@st.composite
def stories(draw, max_m=25):
    m = draw(st.integers(1, max_m))
    x = sorted(draw(st.lists(st.integers(10, 99), min_size=m, max_size=m, unique=True)))
    x = [v / 100 for v in x]
    # a fixed n (the paper's), or a different n per position (adaptive rounds)
    if draw(st.booleans()):
        n = [draw(st.sampled_from([1, 2, 5, 20, 100]))] * m
    else:
        n = draw(st.lists(st.integers(1, 120), min_size=m, max_size=m))
    kind = draw(st.sampled_from(["any", "edges", "plateau"]))
    if kind == "edges":  # all matches or none at many positions
        k = [draw(st.sampled_from([0, nj])) for nj in n]
    elif kind == "plateau":  # a constant rate: ties everywhere
        share = draw(st.sampled_from([0.0, 0.5, 1.0]))
        k = [round(share * nj) for nj in n]
    else:
        k = [draw(st.integers(0, nj)) for nj in n]
    return x, n, k


settings_st = st.builds(CurveSettings, window=st.sampled_from([1, 3, 5]),
                        thresholds=st.sampled_from([(30.0, 60.0, 120.0), (45.0,), (90.0, 150.0)]),
                        late_threshold=st.sampled_from([0.8, 0.5]), retention_window=st.integers(1, 10))


@settings(max_examples=60, **HYP)
@given(story=stories(), s=settings_st, seed=st.integers(0, 2**32))
def test_intervals_match_the_reference(story, s, seed):
    """The kernel's interval equals the reference's computed from the same resampled
    curves: each resample's statistics recomputed by the plain curve reference."""
    x, n, k = story
    B = 40
    lo, hi, pt = one(x, n, k, s, resamples=B, seed=seed)
    drawn = intervals.resample_curves(np.asarray(x, float), np.asarray(n), np.asarray(k), np.array([0, len(x)]),
                                      intervals.story_seeds(["s"], seed), B)
    rlo, rhi = iref.interval(x, drawn, list(pt), s.window, s.thresholds, s.late_threshold, s.retention_window)
    for q in range(len(rlo)):
        for got, want in ((lo[q], rlo[q]), (hi[q], rhi[q])):
            assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, abs=1e-9), (q, got, want)


@settings(max_examples=30, **HYP)
@given(story=stories(max_m=12), seed=st.integers(0, 2**32))
def test_the_interval_holds_the_observed_value_and_stays_in_range(story, seed):
    x, n, k = story
    lo, hi, pt = one(x, n, k, resamples=60, seed=seed)
    lo_cut, hi_cut = iref.ranges(3)
    for q in range(len(pt)):
        if math.isnan(lo[q]):
            continue
        assert lo_cut[q] <= lo[q] <= hi[q] <= hi_cut[q]
        assert lo[q] - 1e-9 <= pt[q] <= hi[q] + 1e-9 or not np.isfinite(pt[q])


def test_the_draws_have_the_documented_distribution():
    """Each position's resampled matches: Binomial(n, k/n), and at an all-match or
    no-match position Binomial(n, (k + ½)/(n + 1)); positions may hold different n."""
    # … including many endings at an extreme rate, where (1 − p)^n underflows unless
    # the draw is of the rarer outcome: 500 of 500 matches, 999 of 1000, 1 of 1000
    n = np.array([100, 100, 100, 100, 7, 1, 3, 2000, 50, 500, 1000, 1000, 160])
    k = np.array([30, 0, 100, 99, 3, 1, 0, 1500, 25, 500, 999, 1, 150])
    x = np.linspace(0.1, 0.9, len(n))
    B = 100_000
    got = intervals.resample_curves(x, n, k, np.array([0, len(n)]), np.array([12345]), B)
    want = iref.draw_curves(n, k, B, np.random.default_rng(1))
    for j in range(len(n)):
        p = iref.match_p(int(n[j]), int(k[j]))
        mean, var = 1 - p, p * (1 - p) / n[j]
        se = math.sqrt(var / B) + 1e-12
        assert abs(got[:, j].mean() - mean) < 5 * se, j
        assert abs(want[:, j].mean() - mean) < 5 * se, j
        assert got[:, j].var() == pytest.approx(var, rel=0.03), j
        # the no-rate of a resample is a count over n
        assert np.allclose(np.round(got[:, j] * n[j]), got[:, j] * n[j])
    # the plain bootstrap has no spread at an all-match position; the documented draw has
    plain = intervals.resample_curves(x, n, k, np.array([0, len(n)]), np.array([12345]), 1000, Draw.BINOMIAL)
    assert plain[:, 1].std() == 0.0 and got[:, 1].std() > 0.0


# ---------------------------------------------------------------------------- edge cases

X5 = [0.1, 0.3, 0.5, 0.7, 0.9]


def test_a_position_without_judged_endings_gives_no_interval():
    lo, hi, _ = one(X5, [100, 100, 0, 100, 100], [10, 20, 0, 30, 40])
    assert np.isnan(lo).all() and np.isnan(hi).all()


def test_all_non_matches_gives_an_interval_below_one_not_a_point():
    # y = 1 everywhere: the plain bootstrap would give [1, 1]; one match in 101 is as likely
    lo, hi, pt = one(X5, [100] * 5, [0] * 5)
    assert pt[0] == 1.0 and hi[0] == 1.0 and 0.99 < lo[0] < 1.0
    assert math.isnan(lo[2])  # a flat curve has no peak: no Retain, no interval
    assert lo[4] == 0.0 <= hi[4]  # IR: the observed 0 and resampled noise around it


def test_all_matches_gives_an_interval_above_zero():
    lo, hi, pt = one(X5, [100] * 5, [100] * 5)
    assert pt[0] == 0.0 and lo[0] == 0.0 and 0.0 < hi[0] < 0.01


def test_a_one_position_story_has_intervals_of_what_it_defines():
    lo, hi, pt = one([0.9], [100], [40])
    assert pt[0] == pytest.approx(0.6) and lo[0] < pt[0] < hi[0]
    assert lo[1] == lo[0] and hi[1] == hi[0]  # its one position is late
    assert np.isnan(lo[2:]).all()  # no peak, no inflection rate


def test_nan_pct_and_no_positions_give_no_interval():
    lo, hi, _ = one([0.1, NAN, 0.5], [10, 10, 10], [1, 2, 3])
    assert np.isnan(lo).all()
    s = CurveSettings()
    r = intervals.story_intervals(["a", "b"], np.array([0.5]), np.array([10]), np.array([4]), np.array([0, 0, 1]),
                                  np.array([[NAN] * 7, [0.6, NAN, NAN, NAN, NAN, NAN, NAN]]), s, n_resamples=50)
    assert np.isnan(r.lo[0]).all() and not math.isnan(r.lo[1, 0])


def test_a_statistic_most_resamples_leave_undefined_has_no_interval():
    # one small peak of one ending in 20 per position: most resamples flatten it
    x = [0.1, 0.2, 0.3]
    n = [1000, 1000, 1000]
    lo, hi, pt = one(x, n, [500, 499, 500], CurveSettings(window=1), resamples=400)
    assert not math.isnan(pt[2])  # the observed curve has its peak
    drawn = intervals.resample_curves(np.array(x), np.array(n), np.array([500, 499, 500]), np.array([0, 3]),
                                      intervals.story_seeds(["s"], 0), 400)
    peaks = np.mean([(c[1] > c[0]) and (c[1] > c[2]) for c in drawn])
    assert peaks < 0.5 and math.isnan(lo[2]) and math.isnan(hi[2])


def test_ties_a_plateau_curve():
    # a constant observed curve (ties everywhere): no reversal observed, IR interval from 0
    lo, hi, pt = one(X5 * 1, [20] * 5, [10] * 5, CurveSettings(window=1))
    assert pt[4:].tolist() == [0.0, 0.0, 0.0] and (lo[4:] == 0.0).all() and (hi[4:] >= 0.0).all()


# ------------------------------------------------------------------------- reproducibility


def test_a_story_interval_is_a_function_of_its_verdicts_id_and_seed_alone():
    rng = np.random.default_rng(3)
    m = 30
    x = np.linspace(0.1, 0.99, m)
    cases = [(x, np.full(m, 20), rng.integers(0, 21, m)) for _ in range(5)]
    ids = [f"s{i}" for i in range(5)]
    s = CurveSettings()

    def run(order, seed=7):
        xs = np.concatenate([cases[i][0] for i in order])
        n = np.concatenate([cases[i][1] for i in order])
        k = np.concatenate([cases[i][2] for i in order])
        off = np.arange(len(order) + 1) * m
        r = intervals.story_intervals([ids[i] for i in order], xs, n, k, off, points_of(xs, n, k, off, s), s,
                                      n_resamples=100, seed=seed)
        return {ids[i]: (r.lo[j], r.hi[j]) for j, i in enumerate(order)}

    a, b, alone = run([0, 1, 2, 3, 4]), run([4, 2, 0, 3, 1]), run([2])
    for sid in ids:
        assert np.array_equal(a[sid][0], b[sid][0], equal_nan=True)
        assert np.array_equal(a[sid][1], b[sid][1], equal_nan=True)
    assert np.array_equal(a["s2"][0], alone["s2"][0], equal_nan=True)
    assert not np.array_equal(a["s0"][0], run([0], seed=8)["s0"][0], equal_nan=True)


def test_more_than_one_chunk_of_stories():
    m = 8
    n_st = 150  # more than one kernel call's chunk
    rng = np.random.default_rng(4)
    x = np.tile(np.linspace(0.1, 0.9, m), n_st)
    n = np.full(m * n_st, 10)
    k = rng.integers(0, 11, m * n_st)
    off = np.arange(n_st + 1) * m
    s = CurveSettings()
    ids = [str(i) for i in range(n_st)]
    r = intervals.story_intervals(ids, x, n, k, off, points_of(x, n, k, off, s), s, n_resamples=30, seed=2)
    last = intervals.story_intervals(ids[-1:], x[-m:], n[-m:], k[-m:], np.array([0, m]),
                                     points_of(x[-m:], n[-m:], k[-m:], np.array([0, m]), s), s, n_resamples=30,
                                     seed=2)
    assert np.array_equal(r.lo[-1], last.lo[0], equal_nan=True)


def test_bad_arguments_are_refused():
    s = CurveSettings()
    with pytest.raises(ValueError):
        intervals.story_intervals(["a"], np.array([0.5]), np.array([1, 2]), np.array([1]), np.array([0, 1]),
                                  np.zeros((1, 7)), s)
    with pytest.raises(ValueError):
        intervals.story_intervals(["a"], np.array([0.5]), np.array([1]), np.array([1]), np.array([0, 1]),
                                  np.zeros((1, 6)), s)
    with pytest.raises(ValueError):
        intervals.resample_stats(np.array([0.5]), np.array([1]), np.array([1]), np.array([0, 1]), np.array([0]), s,
                                 n_resamples=0)
