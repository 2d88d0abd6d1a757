"""Curve statistics (docs/metrics.md 1.4): tension.kernels.curves against hand-worked
examples and against the plain-Python reference in ``tests/curve_reference.py``."""

from __future__ import annotations

import math

import curve_reference as ref  # tests/ is on sys.path (pyproject's pythonpath)
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tension.kernels import curves
from tension.kernels.curves import CurveSettings, Reason

NAN = float("nan")
ALL_EMPTY = Reason.NO_POSITIONS | Reason.FEW_POSITIONS | Reason.NO_LATE | Reason.NO_PEAK
# hypothesis: no example database (it would be written outside tests/kernels),
# no deadline (the first call may compile the numba kernels).
HYP = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def same(a: float, b: float, rel: float = 1e-12, abs_: float = 1e-12) -> bool:
    """Equal within tolerance, NaN == NaN, inf never silently equal to a number."""
    a = float(a)
    b = float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def assert_same(a, b, what="", rel=1e-12, abs_=1e-12):
    assert same(a, b, rel, abs_), f"{what}: got {a!r}, expected {b!r}"


def assert_stats(got: curves.StoryStats, exp: dict, ctx=""):
    """Compare a StoryStats with a reference dict field by field."""
    assert got.n_positions == exp["n_positions"], ctx
    assert_same(got.mean_nr, exp["mean_nr"], f"mean_nr {ctx}")
    assert_same(got.late_nr, exp["late_nr"], f"late_nr {ctx}")
    assert_same(got.retain, exp["retain"], f"retain {ctx}", rel=1e-10, abs_=1e-9)
    assert_same(got.convergence, exp["convergence"], f"convergence {ctx}", rel=1e-10, abs_=1e-9)
    assert len(got.ir) == len(exp["ir"]), ctx
    for k, (g, e) in enumerate(zip(got.ir, exp["ir"])):
        assert_same(g, e, f"ir[{k}] {ctx}", rel=0.0, abs_=1e-12)
    assert int(got.reasons) == exp["reasons"], (
        f"reasons {ctx}: got {Reason(int(got.reasons))!r}, expected {Reason(exp['reasons'])!r}"
    )


def run_both(x, y, **kw):
    """story_stats from the kernel and from the reference for the same settings."""
    s = CurveSettings(**kw)
    got = curves.story_stats(np.asarray(x, float), np.asarray(y, float), s)
    exp = ref.story_stats(
        x, y, window=s.window, thresholds=s.thresholds,
        late_threshold=s.late_threshold, retention_window=s.retention_window,
    )
    return got, exp


# ===========================================================================
# (a) hand-worked examples


class TestAngles:
    def test_v_shape_53_degrees(self):
        # window=1 (no smoothing), x and y already span [0, 1] so the unit square
        # is the identity. Vertex (0.5, 0): legs u = (-0.5, 1), v = (0.5, 1);
        # u.v = -0.25 + 1 = 0.75, |u||v| = 1.25, cos = 0.6 -> 53.1301023542 deg
        # (= 2*atan(0.5); NOT 90 deg). A valley, so a reversal.
        x, y = [0.0, 0.5, 1.0], [1.0, 0.0, 1.0]
        ang = curves.vertex_angles(x, y)
        assert math.isnan(ang[0]) and math.isnan(ang[2])
        assert ang[1] == pytest.approx(53.13010235415598, abs=1e-9)
        assert list(curves.reversals(y)) == [False, True, False]
        st_ = curves.story_stats(x, y, CurveSettings(window=1))
        # IR_30 = 0 (53 > 30), IR_60 = IR_120 = 1 reversal / 3 positions
        assert st_.ir == pytest.approx((0.0, 1 / 3, 1 / 3), abs=1e-15)
        assert st_.mean_nr == pytest.approx(2 / 3)  # (1 + 0 + 1) / 3
        assert st_.late_nr == 1.0  # only x = 1.0 >= 0.8
        # raw curve: the only interior point is a valley -> no peak
        assert math.isnan(st_.retain) and math.isnan(st_.convergence)
        assert st_.reasons == Reason.NO_PEAK

    def test_v_shape_realistic_x(self):
        # same shape with x = 0.1, 0.5, 0.9: X = (x - 0.1) / 0.8 = 0, 0.5, 1 -> 53.13 deg
        ang = curves.vertex_angles([0.1, 0.5, 0.9], [1.0, 0.0, 1.0])
        assert ang[1] == pytest.approx(53.13010235415598, abs=1e-9)

    def test_right_angle(self):
        # unit square identity; vertex (0.5, 0), u = (-0.5, 1), v = (0.5, 0.25):
        # u.v = -0.25 + 0.25 = 0 exactly -> 90 deg exactly. Valley -> reversal.
        x, y = [0.0, 0.5, 1.0], [1.0, 0.0, 0.25]
        assert curves.vertex_angles(x, y)[1] == pytest.approx(90.0, abs=1e-12)
        s = CurveSettings(window=1, thresholds=(89.9, 90.0, 90.1))
        assert curves.story_stats(x, y, s).ir == pytest.approx((0.0, 1 / 3, 1 / 3), abs=1e-15)

    def test_sixty_degrees_exactly_at_threshold(self):
        # Isosceles peak: vertex (0.5, 1), legs to (0.5 -+ d, 0.5) with d = 0.5/sqrt(3):
        # half-angle atan(d / 0.5) = atan(1/sqrt(3)) = 30 deg -> vertex angle 60 deg.
        # The outer points (0, 0) and (1, 0) fix the unit square to the identity and
        # lie on monotone stretches (no reversal at j = 1, 3). In floating point the
        # angle comes out as 60.00000000000001 (true value of the float points is
        # 60 + 2e-15), so without the 1e-9 degree tolerance it would miss IR_60.
        d = 0.5 / math.sqrt(3.0)
        x = [0.0, 0.5 - d, 0.5, 0.5 + d, 1.0]
        y = [0.0, 0.5, 1.0, 0.5, 0.0]
        ang = curves.vertex_angles(x, y)
        assert ang[2] == pytest.approx(60.0, abs=1e-9)
        assert ref.vertex_angles(x, y)[2] > 60.0  # the float angle is just above 60
        assert list(curves.reversals(y)) == [False, False, True, False, False]
        st_ = curves.story_stats(x, y, CurveSettings(window=1))
        # IR_30 = 0, IR_60 = IR_120 = 1/5
        assert st_.ir == pytest.approx((0.0, 0.2, 0.2), abs=1e-15)
        # just below 60 it must not count; exactly 60 and above it must
        s = CurveSettings(window=1, thresholds=(59.99999, 60.0, 60.00001))
        assert curves.story_stats(x, y, s).ir == pytest.approx((0.0, 0.2, 0.2), abs=1e-15)

    def test_sixty_degrees_realistic_x(self):
        # the same curve moved to x in [0.1, 0.9]: still 60 deg within rounding
        d = 0.5 / math.sqrt(3.0)
        x = [0.1 + 0.8 * v for v in (0.0, 0.5 - d, 0.5, 0.5 + d, 1.0)]
        y = [0.0, 0.5, 1.0, 0.5, 0.0]
        st_ = curves.story_stats(x, y, CurveSettings(window=1))
        assert st_.ir == pytest.approx((0.0, 0.2, 0.2), abs=1e-15)

    def test_four_point_curve_45_and_71_degrees(self):
        # x = 0.2 .. 0.8 -> X = 0, 1/3, 2/3, 1; y = 0.2, 0.8, 0.4, 0.6 -> Y = 0, 1, 1/3, 2/3.
        # j=1 (peak): u = (-1/3, -1), v = (1/3, -2/3); u.v = 5/9, |u||v| = sqrt(50)/9
        #   cos = 1/sqrt(2) -> 45 deg.
        # j=2 (valley): u = (-1/3, 2/3), v = (1/3, 1/3); u.v = 1/9, |u||v| = sqrt(10)/9
        #   cos = 1/sqrt(10) -> 71.5650511771 deg.
        x = [0.2, 0.4, 0.6, 0.8]
        y = [0.2, 0.8, 0.4, 0.6]
        ang = curves.vertex_angles(x, y)
        assert ang[1] == pytest.approx(45.0, abs=1e-9)
        assert ang[2] == pytest.approx(71.56505117707799, abs=1e-9)
        st_ = curves.story_stats(x, y, CurveSettings(window=1))
        # 30: none; 60: the 45-deg peak; 120: both -> 0, 1/4, 2/4
        assert st_.ir == pytest.approx((0.0, 0.25, 0.5), abs=1e-15)
        s = CurveSettings(window=1, thresholds=(44.9, 45.1, 71.5, 71.6))
        assert curves.story_stats(x, y, s).ir == pytest.approx((0.0, 0.25, 0.25, 0.5), abs=1e-15)
        # mean NR = 2.0 / 4; late: x = 0.8 is included (>=) -> 0.6
        assert st_.mean_nr == pytest.approx(0.5)
        assert st_.late_nr == pytest.approx(0.6)
        # raw peak at j=1 (0.8 > 0.2, 0.8 > 0.4); j=2 is a valley.
        # low = min(0.4, 0.6) = 0.4, retention = 0.4/0.8 -> Retain 50 %, convergence -50 %
        assert st_.retain == pytest.approx(50.0)
        assert st_.convergence == pytest.approx(-50.0)
        assert st_.reasons == Reason.NONE


class TestSmoothingByHand:
    def test_three_points_window5_is_flat(self):
        # m=3, w=5: every window y[max(0,j-2):min(3,j+3)] is the whole curve, so
        # ŷ = 1.4/3 everywhere -> flat -> IR = 0 (not NaN) at every threshold.
        x, y = [0.1, 0.5, 0.9], [0.2, 0.8, 0.4]
        assert curves.smooth(y, 5) == pytest.approx([1.4 / 3] * 3)
        st_ = curves.story_stats(x, y)
        assert st_.ir == (0.0, 0.0, 0.0)
        # retention uses the RAW curve: peak 0.8, low 0.4 -> 50 %
        assert st_.retain == pytest.approx(50.0)
        assert st_.convergence == pytest.approx(-50.0)
        assert st_.mean_nr == pytest.approx(1.4 / 3)
        assert st_.late_nr == pytest.approx(0.4)
        assert st_.reasons == Reason.NONE

    def test_three_points_window3_right_angle_valley(self):
        # w=3: ŷ = [(0.2+0.8)/2, 1.4/3, (0.8+0.4)/2] = [0.5, 0.4667, 0.6] -> valley.
        # Y = (ŷ - 1.4/3) / (1.8/3 - 1.4/3) = [0.25, 0, 1], X = [0, 0.5, 1];
        # u = (-0.5, 0.25), v = (0.5, 1): u.v = 0 -> 90 deg -> IR = (0, 0, 1/3).
        x, y = [0.1, 0.5, 0.9], [0.2, 0.8, 0.4]
        ys = curves.smooth(y, 3)
        assert ys == pytest.approx([0.5, 1.4 / 3, 0.6])
        assert curves.vertex_angles(x, ys)[1] == pytest.approx(90.0, abs=1e-9)
        st_ = curves.story_stats(x, y, CurveSettings(window=3))
        assert st_.ir == pytest.approx((0.0, 0.0, 1 / 3), abs=1e-15)

    def test_window_shrinks_symmetrically_at_ends(self):
        # w=5 on 0..6: j=0 -> mean(y[0:3]) = 1, j=1 -> mean(y[0:4]) = 1.5,
        # j=2 -> mean(y[0:5]) = 2, ..., j=5 -> mean(y[3:7]) = 4.5, j=6 -> mean(y[4:7]) = 5
        y = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        assert list(curves.smooth(y, 5)) == pytest.approx([1.0, 1.5, 2.0, 3.0, 4.0, 4.5, 5.0])
        # w=1 is the identity; a window longer than the curve averages everything
        assert list(curves.smooth(y, 1)) == y
        assert list(curves.smooth([0.2, 0.6], 7)) == pytest.approx([0.4, 0.4])


class TestPlateausAndFlat:
    def test_plateau_peak_is_not_a_reversal(self):
        # ŷ = y (w=1): diffs +0.3, 0, -0.3 -> products 0 at j=1 and j=2: no reversal.
        # Raw: 0.5 > 0.5 is false on both plateau points -> no peak.
        x, y = [0.1, 0.4, 0.7, 0.9], [0.2, 0.5, 0.5, 0.2]
        assert not curves.reversals(y).any()
        st_ = curves.story_stats(x, y, CurveSettings(window=1))
        assert st_.ir == (0.0, 0.0, 0.0)
        assert math.isnan(st_.retain) and math.isnan(st_.convergence)
        assert st_.reasons == Reason.NO_PEAK
        assert st_.mean_nr == pytest.approx(0.35)
        assert st_.late_nr == pytest.approx(0.2)
        # w=3: ŷ = [0.35, 0.4, 0.4, 0.35], still a plateau
        assert curves.story_stats(x, y, CurveSettings(window=3)).ir == (0.0, 0.0, 0.0)

    def test_plateau_valley_is_not_a_reversal(self):
        x, y = [0.1, 0.4, 0.7, 0.9], [0.6, 0.3, 0.3, 0.6]
        assert not curves.reversals(y).any()
        assert curves.story_stats(x, y, CurveSettings(window=1)).ir == (0.0, 0.0, 0.0)

    def test_broken_plateau_is_a_reversal(self):
        # control for the two tests above: 0.5 -> 0.6 makes j=2 a strict peak.
        # X = (x-0.1)/0.8 = [0, 3/8, 3/4, 1], Y = (y-0.2)/0.4 = [0, 3/4, 1, 0];
        # at j=2: u = (-3/8, -1/4), v = (1/4, -1): u.v = -3/32 + 1/4 = 5/32,
        # |u| = sqrt(13)/8, |v| = sqrt(17)/4 -> cos = 5/sqrt(221) -> 70.346 deg.
        x, y = [0.1, 0.4, 0.7, 0.9], [0.2, 0.5, 0.6, 0.2]
        assert list(curves.reversals(y)) == [False, False, True, False]
        assert curves.vertex_angles(x, y)[2] == pytest.approx(
            math.degrees(math.acos(5 / math.sqrt(221))), abs=1e-9)
        st_ = curves.story_stats(x, y, CurveSettings(window=1))
        assert st_.ir == pytest.approx((0.0, 0.0, 0.25), abs=1e-15)
        # peak 0.6, low = 0.2 -> 33.33 %
        assert st_.retain == pytest.approx(100 * 0.2 / 0.6)

    @pytest.mark.parametrize("window", [1, 3, 5, 7])
    def test_flat_curve(self, window):
        x = [0.1, 0.25, 0.4, 0.55, 0.7, 0.85]
        y = [0.7] * 6
        st_ = curves.story_stats(x, y, CurveSettings(window=window))
        assert st_.ir == (0.0, 0.0, 0.0)  # m >= 3: a rate of zero, not NaN
        assert st_.mean_nr == pytest.approx(0.7)
        assert st_.late_nr == pytest.approx(0.7)
        assert math.isnan(st_.retain) and math.isnan(st_.convergence)
        assert st_.reasons == Reason.NO_PEAK
        assert st_.n_positions == 6

    def test_flat_curve_three_points(self):
        st_ = curves.story_stats([0.1, 0.5, 0.9], [0.0, 0.0, 0.0])
        assert st_.ir == (0.0, 0.0, 0.0)
        assert st_.reasons == Reason.NO_PEAK


class TestTies:
    def test_difference_of_1e13_is_no_reversal_and_no_peak(self):
        # without the tie rule j=2 would be a strict peak (0.5+1e-13 > 0.5 and > 0.2)
        x, y = [0.1, 0.4, 0.7, 0.9], [0.2, 0.5, 0.5 + 1e-13, 0.2]
        assert not curves.reversals(y).any()
        st_ = curves.story_stats(x, y, CurveSettings(window=1))
        assert st_.ir == (0.0, 0.0, 0.0)
        assert math.isnan(st_.retain)
        assert st_.reasons == Reason.NO_PEAK

    def test_tiny_bump_is_no_peak(self):
        x, y = [0.1, 0.5, 0.9], [0.4, 0.4 + 1e-13, 0.4]
        st_ = curves.story_stats(x, y, CurveSettings(window=1))
        assert st_.ir == (0.0, 0.0, 0.0)
        assert st_.reasons == Reason.NO_PEAK
        # the same bump of 1e-11 is real: peak + reversal. Y = [0, 1, 0] -> 53.13 deg
        y2 = [0.4, 0.4 + 1e-11, 0.4]
        st2 = curves.story_stats(x, y2, CurveSettings(window=1))
        assert st2.ir == pytest.approx((0.0, 1 / 3, 1 / 3), abs=1e-15)
        assert st2.retain == pytest.approx(100 * 0.4 / (0.4 + 1e-11), rel=1e-14)
        assert st2.reasons == Reason.NONE

    def test_tie_boundary_exactly_1e12(self):
        # 1e-12 - 0 == 1e-12 exactly in floating point: |d| <= 1e-12 is a tie
        x = [0.1, 0.5, 0.9]
        st_ = curves.story_stats(x, [0.0, 1e-12, 0.0], CurveSettings(window=1))
        assert st_.ir == (0.0, 0.0, 0.0)
        assert st_.reasons == Reason.NO_PEAK
        assert not curves.reversals([0.0, 1e-12, 0.0]).any()
        # 2e-12 is not a tie: peak with low 0 -> Retain 0 %, convergence -100 %;
        # unit square Y = [0, 1, 0], X = [0, .5, 1] -> 53.13 deg
        st2 = curves.story_stats(x, [0.0, 2e-12, 0.0], CurveSettings(window=1))
        assert st2.retain == 0.0
        assert st2.convergence == pytest.approx(-100.0)
        assert st2.ir == pytest.approx((0.0, 1 / 3, 1 / 3), abs=1e-15)
        assert list(curves.reversals([0.0, 2e-12, 0.0])) == [False, True, False]

    def test_summation_noise_is_no_reversal(self):
        # Left-to-right means of windows of [0.3, 0.1, 0.2]*4 are all 0.2 in exact
        # arithmetic but come out as 0.2 +- 1 ulp in floating point.
        y = [0.3, 0.1, 0.2] * 4
        noisy = [sum(y[j - 1 : j + 2]) / 3 for j in range(1, len(y) - 1)]
        assert len(set(noisy)) > 1  # precondition: the noise is really there
        assert max(noisy) - min(noisy) < 1e-15
        assert not curves.reversals(noisy).any()
        # as a raw curve (w=1): no reversal, no peak, flat-as-zero IR
        x = list(np.linspace(0.1, 0.9, len(noisy)))
        st_ = curves.story_stats(x, noisy, CurveSettings(window=1))
        assert st_.ir == (0.0, 0.0, 0.0)
        assert st_.reasons == Reason.NO_PEAK
        # smoothing the periodic curve itself: interior flat; the ends differ for
        # real (0.2 vs 0.15) -> no reversal anywhere
        st3 = curves.story_stats(list(np.linspace(0.1, 0.9, 12)), y, CurveSettings(window=3))
        assert st3.ir == (0.0, 0.0, 0.0)

    def test_norate_arithmetic_ties(self):
        # no-rates as 1 - k/100 are not exactly (100-k)/100; a plateau built from two
        # spellings of the same rate must stay a plateau
        a = 1 - 0.07
        b = 0.93
        assert a != b  # precondition: they differ by float noise
        x, y = [0.1, 0.4, 0.7, 0.9], [0.5, a, b, 0.5]
        st_ = curves.story_stats(x, y, CurveSettings(window=1))
        assert st_.ir == (0.0, 0.0, 0.0)
        assert st_.reasons == Reason.NO_PEAK


class TestRetention:
    def test_retention_window_is_next_ten_positions(self):
        # peak 0.9 at j=1, then ten positions at 0.5, then 0.05 at j=12.
        # R=10: low = min(y[2:12]) = 0.5 -> 55.5556 %, convergence -44.4444 %.
        # R=11: low = min(y[2:13]) = 0.05 -> 5.5556 %.
        # Plateau 0.5 -> 0.5 and 0.5 -> 0.05 make no other peak.
        y = [0.1, 0.9] + [0.5] * 10 + [0.05]
        x = list(np.linspace(0.1, 0.95, len(y)))
        st10 = curves.story_stats(x, y)
        assert st10.retain == pytest.approx(100 * 0.5 / 0.9)
        assert st10.convergence == pytest.approx(100 * (0.5 - 0.9) / 0.9)
        st11 = curves.story_stats(x, y, CurveSettings(retention_window=11))
        assert st11.retain == pytest.approx(100 * 0.05 / 0.9)
        st1 = curves.story_stats(x, y, CurveSettings(retention_window=1))
        assert st1.retain == pytest.approx(100 * 0.5 / 0.9)

    def test_two_peaks_are_averaged(self):
        # peaks j=1 (0.8) and j=3 (1.0).
        # j=1: low = min(0.4, 1.0, 0.25) = 0.25 -> 0.3125
        # j=3: low = min(0.25) = 0.25 -> 0.25
        # Retain = 100 * (0.3125 + 0.25) / 2 = 28.125; convergence = 28.125 - 100
        x = [0.1, 0.3, 0.5, 0.7, 0.9]
        y = [0.0, 0.8, 0.4, 1.0, 0.25]
        st_ = curves.story_stats(x, y)
        assert st_.retain == pytest.approx(28.125)
        assert st_.convergence == pytest.approx(-71.875)

    def test_peaks_need_both_neighbours(self):
        # a maximum at either end is not a peak
        st_ = curves.story_stats([0.1, 0.5, 0.9], [0.9, 0.5, 0.1])
        assert math.isnan(st_.retain)
        st_ = curves.story_stats([0.1, 0.5, 0.9], [0.1, 0.5, 0.9])
        assert math.isnan(st_.retain)
        assert st_.reasons == Reason.NO_PEAK

    def test_low_of_zero_gives_zero_retention(self):
        # peak 1.0, low = 0.0 -> Retain 0 %, convergence -100 %
        st_ = curves.story_stats([0.1, 0.5, 0.9], [0.5, 1.0, 0.0])
        assert st_.retain == 0.0
        assert st_.convergence == pytest.approx(-100.0)


class TestLengths:
    def test_empty(self):
        st_ = curves.story_stats([], [])
        assert st_.n_positions == 0
        for v in (st_.mean_nr, st_.late_nr, st_.retain, st_.convergence, *st_.ir):
            assert math.isnan(v)
        assert len(st_.ir) == 3
        assert st_.reasons == ALL_EMPTY

    def test_empty_custom_thresholds(self):
        st_ = curves.story_stats([], [], CurveSettings(thresholds=(45.0,)))
        assert len(st_.ir) == 1 and math.isnan(st_.ir[0])

    def test_one_position(self):
        st_ = curves.story_stats([0.85], [0.3])
        assert st_.n_positions == 1
        assert st_.mean_nr == pytest.approx(0.3)
        assert st_.late_nr == pytest.approx(0.3)
        assert all(math.isnan(v) for v in st_.ir)
        assert math.isnan(st_.retain)
        assert st_.reasons == Reason.FEW_POSITIONS | Reason.NO_PEAK
        st_ = curves.story_stats([0.5], [0.3])
        assert math.isnan(st_.late_nr)
        assert st_.reasons == Reason.FEW_POSITIONS | Reason.NO_PEAK | Reason.NO_LATE

    def test_two_positions(self):
        st_ = curves.story_stats([0.5, 0.9], [0.2, 0.6])
        assert st_.n_positions == 2
        assert st_.mean_nr == pytest.approx(0.4)
        assert st_.late_nr == pytest.approx(0.6)
        assert all(math.isnan(v) for v in st_.ir)
        assert st_.reasons == Reason.FEW_POSITIONS | Reason.NO_PEAK

    def test_three_positions_is_enough(self):
        st_ = curves.story_stats([0.1, 0.5, 0.7], [0.2, 0.8, 0.4], CurveSettings(window=1))
        # peak at j=1: Y = [0, 1, 1/3], X = [0, 2/3, 1]; u = (-2/3, -1), v = (1/3, -2/3)
        # u.v = -2/9 + 2/3 = 4/9, |u||v| = sqrt(13)/3 * sqrt(5)/3 -> cos = 4/sqrt(65)
        # -> 60.255 deg: not <= 60, <= 120
        assert curves.vertex_angles([0.1, 0.5, 0.7], [0.2, 0.8, 0.4])[1] == pytest.approx(
            math.degrees(math.acos(4 / math.sqrt(65))), abs=1e-9)
        assert st_.ir == pytest.approx((0.0, 0.0, 1 / 3), abs=1e-15)
        assert st_.reasons == Reason.NO_LATE  # all x < 0.8
        assert math.isnan(st_.late_nr)


class TestLateNR:
    def test_late_threshold_is_inclusive(self):
        x = [0.1, 0.5, 0.79, 0.8, 0.95]
        y = [0.1, 0.2, 0.3, 0.4, 0.6]
        st_ = curves.story_stats(x, y)
        assert st_.late_nr == pytest.approx(0.5)  # (0.4 + 0.6) / 2; 0.79 is out
        assert st_.mean_nr == pytest.approx(0.32)  # 1.6 / 5

    def test_late_threshold_tie(self):
        # docs/metrics.md 1.4: |a - b| <= 1e-12 counts as zero in every comparison, so an
        # x within 1e-12 below 0.8 is on the threshold (late); 1e-11 below is not.
        x = [0.1, 0.5, 0.8 - 5e-13, 0.9]
        y = [0.1, 0.2, 0.3, 0.6]
        assert curves.story_stats(x, y).late_nr == pytest.approx(0.45)  # (0.3 + 0.6) / 2
        x = [0.1, 0.5, 0.8 - 1e-11, 0.9]
        assert curves.story_stats(x, y).late_nr == pytest.approx(0.6)

    def test_custom_late_threshold(self):
        x = [0.1, 0.5, 0.79, 0.8, 0.95]
        y = [0.1, 0.2, 0.3, 0.4, 0.6]
        st_ = curves.story_stats(x, y, CurveSettings(late_threshold=0.5))
        assert st_.late_nr == pytest.approx(0.375)  # (0.2 + 0.3 + 0.4 + 0.6) / 4

    def test_no_late_position(self):
        x = [0.1, 0.3, 0.5, 0.7, 0.79]
        y = [0.1, 0.9, 0.3, 0.4, 0.6]
        st_ = curves.story_stats(x, y)
        assert math.isnan(st_.late_nr)
        assert st_.reasons == Reason.NO_LATE
        # the rest is still computed
        assert st_.mean_nr == pytest.approx(0.46)
        assert st_.retain == pytest.approx(100 * 0.3 / 0.9)


class TestNaNInput:
    @pytest.mark.parametrize(
        "x,y",
        [
            ([0.1, 0.3, 0.5, 0.7, 0.9], [0.1, 0.5, NAN, 0.2, 0.3]),
            ([0.1, 0.3, 0.5, 0.7, 0.9], [0.1, 0.5, 0.9, 0.2, math.inf]),
            ([0.1, 0.3, NAN, 0.7, 0.9], [0.1, 0.5, 0.9, 0.2, 0.3]),
            ([0.1, 0.3, 0.5, 0.7, -math.inf], [0.1, 0.5, 0.9, 0.2, 0.3]),
            ([0.9], [NAN]),
            ([0.5, 0.9], [0.2, -math.inf]),
        ],
    )
    def test_nan_or_inf_poisons_everything(self, x, y):
        st_ = curves.story_stats(x, y)
        assert st_.n_positions == len(x)
        for v in (st_.mean_nr, st_.late_nr, st_.retain, st_.convergence, *st_.ir):
            assert math.isnan(v)
        assert len(st_.ir) == 3
        assert st_.reasons == Reason.NAN_INPUT


# ===========================================================================
# (b) property tests against the reference


def _y_values(draw, m):
    kind = draw(st.sampled_from(["uniform", "percent", "norate", "coarse", "constant", "noisy"]))
    if kind == "uniform":
        return draw(st.lists(st.floats(0.0, 1.0), min_size=m, max_size=m))
    if kind == "percent":  # k / 100
        return [k / 100 for k in draw(st.lists(st.integers(0, 100), min_size=m, max_size=m))]
    if kind == "norate":  # 1 - #Y / #endings, as the pipeline computes it
        n = draw(st.sampled_from([100, 100, 99, 97]))
        return [1 - k / n for k in draw(st.lists(st.integers(0, n), min_size=m, max_size=m))]
    if kind == "coarse":  # few levels: many plateaus
        q = draw(st.sampled_from([2, 3, 4, 10]))
        return [k / q for k in draw(st.lists(st.integers(0, q), min_size=m, max_size=m))]
    if kind == "constant":
        return [draw(st.sampled_from([0.0, 0.37, 1.0]))] * m
    # noisy: k/10 plus |noise| <= 2e-13, so every near-tie is a tie
    ks = draw(st.lists(st.integers(0, 9), min_size=m, max_size=m))
    eps = draw(st.lists(st.floats(0.0, 2e-13), min_size=m, max_size=m))
    return [k / 10 + e for k, e in zip(ks, eps)]


@st.composite
def curve_cases(draw, max_m=60):
    m = draw(st.integers(0, max_m))
    if draw(st.booleans()):  # pct on a 1/100 grid: x can equal the late threshold
        x = sorted(k / 100 for k in draw(st.lists(st.integers(10, 99), min_size=m, max_size=m, unique=True)))
    else:
        x = sorted(draw(st.lists(st.floats(0.1, 0.99), min_size=m, max_size=m, unique=True)))
    y = _y_values(draw, m)
    return x, y


angles = st.one_of(
    st.sampled_from([30.0, 60.0, 120.0, 45.0, 90.0, 150.0, 180.0, 5.0]),
    st.floats(0.5, 179.5),
)
settings_st = st.builds(
    CurveSettings,
    window=st.sampled_from([1, 3, 5, 7]),
    thresholds=st.lists(angles, min_size=1, max_size=4, unique=True).map(tuple),
    late_threshold=st.sampled_from([0.8, 0.8, 0.5, 0.9, 0.95, 0.1]),
    retention_window=st.integers(1, 12),
)


@settings(max_examples=800, **HYP)
@given(case=curve_cases(), s=settings_st)
def test_story_stats_matches_reference(case, s):
    x, y = case
    got = curves.story_stats(np.asarray(x, float), np.asarray(y, float), s)
    exp = ref.story_stats(x, y, s.window, s.thresholds, s.late_threshold, s.retention_window)
    assert_stats(got, exp, f"x={x} y={y} {s}")


@settings(max_examples=150, **HYP)
@given(case=curve_cases(max_m=30), s=settings_st, where=st.integers(0, 29),
       bad=st.sampled_from([NAN, math.inf, -math.inf]), in_x=st.booleans())
def test_nonfinite_anywhere_matches_reference(case, s, where, bad, in_x):
    x, y = case
    if not x:
        return
    j = where % len(x)
    (x if in_x else y)[j] = bad
    got = curves.story_stats(np.asarray(x, float), np.asarray(y, float), s)
    exp = ref.story_stats(x, y, s.window, s.thresholds, s.late_threshold, s.retention_window)
    assert exp["reasons"] == ref.NAN_INPUT
    assert_stats(got, exp, f"x={x} y={y} {s}")


@settings(max_examples=200, **HYP)
@given(case=curve_cases(), window=st.sampled_from([1, 3, 5, 7]), pick=st.integers(0, 59))
def test_threshold_equal_to_a_vertex_angle(case, window, pick):
    # thresholds set to the kernel's own angle at a reversal: "angle <= threshold"
    # must count that vertex (and the reference, within 1e-9 deg, agrees)
    x, y = case
    if len(x) < 3:
        return
    ys = curves.smooth(np.asarray(y, float), window)
    rev = np.flatnonzero(curves.reversals(ys))
    if rev.size == 0:
        return
    j = int(rev[pick % rev.size])
    a = float(curves.vertex_angles(x, ys)[j])
    if not 0.01 < a < 179.99:
        return  # arccos is too coarse next to 0 and 180 deg to pin a threshold on
    s = CurveSettings(window=window, thresholds=(a, min(180.0, a + 1e-6), max(1e-3, a - 1e-6)))
    got = curves.story_stats(np.asarray(x, float), np.asarray(y, float), s)
    exp = ref.story_stats(x, y, s.window, s.thresholds, s.late_threshold, s.retention_window)
    assert_stats(got, exp, f"x={x} y={y} {s}")
    assert got.ir[0] >= 1 / len(x)


def _random_curve(rng: np.random.Generator, m: int):
    if rng.random() < 0.5:
        x = np.sort(rng.choice(np.arange(10, 100), size=m, replace=False)) / 100
    else:
        x = np.sort(rng.uniform(0.1, 0.99, size=m))
        x = np.unique(x)  # strictly increasing (collisions are practically impossible)
    m = len(x)
    kind = rng.integers(0, 4)
    if kind == 0:
        y = rng.uniform(0, 1, size=m)
    elif kind == 1:
        y = 1 - rng.integers(0, 101, size=m) / 100
    elif kind == 2:  # a random walk in 1/100 steps: realistic, plateau-rich
        y = np.clip(0.5 + np.cumsum(rng.integers(-3, 4, size=m)) / 100, 0, 1)
    else:
        y = rng.integers(0, 5, size=m) / 4
    return [float(v) for v in x], [float(v) for v in y]


@pytest.mark.parametrize("window", [1, 3, 5, 7])
def test_seeded_random_batch_matches_reference(window):
    rng = np.random.default_rng(20240 + window)
    cases = [_random_curve(rng, int(rng.integers(0, 61))) for _ in range(1000)]
    s = CurveSettings(window=window, thresholds=(30.0, 60.0, 120.0, 90.0))
    got = curves.batch_stats(*curves.pack(cases), s)
    assert len(got) == len(cases)
    for i, (x, y) in enumerate(cases):
        exp = ref.story_stats(x, y, s.window, s.thresholds, s.late_threshold, s.retention_window)
        assert_stats(got.story(i), exp, f"story {i}: x={x} y={y}")


def test_reference_finds_reversals_in_random_data():
    # guard against a property test that only ever compares zeros and NaNs
    rng = np.random.default_rng(7)
    n_rev = n_peak = n_late_nan = 0
    for _ in range(200):
        x, y = _random_curve(rng, int(rng.integers(0, 61)))
        e = ref.story_stats(x, y)
        n_rev += (not math.isnan(e["ir"][2])) and e["ir"][2] > 0
        n_peak += not math.isnan(e["retain"])
        n_late_nan += math.isnan(e["late_nr"])
    assert n_rev > 50 and n_peak > 50 and n_late_nan > 5


# ===========================================================================
# (c) batch == one story at a time


def _as_dict(s: curves.StoryStats) -> dict:
    return dict(n_positions=s.n_positions, mean_nr=s.mean_nr, late_nr=s.late_nr,
                retain=s.retain, convergence=s.convergence, ir=list(s.ir),
                reasons=int(s.reasons))


def _identical(a: dict, b: dict) -> bool:
    def eq(u, v):
        if isinstance(u, list):
            return len(u) == len(v) and all(eq(p, q) for p, q in zip(u, v))
        if isinstance(u, float) and math.isnan(u):
            return isinstance(v, float) and math.isnan(v)
        return u == v
    return a.keys() == b.keys() and all(eq(a[k], b[k]) for k in a)


@settings(max_examples=60, **HYP)
@given(cases=st.lists(curve_cases(max_m=25), min_size=0, max_size=12), s=settings_st)
def test_batch_equals_story_by_story(cases, s):
    x, y, offsets = curves.pack(cases)
    assert list(offsets) == [0] + list(np.cumsum([len(c[0]) for c in cases]))
    b = curves.batch_stats(x, y, offsets, s)
    assert len(b) == len(cases)
    assert b.ir.shape == (len(cases), len(s.thresholds))
    for i, (cx, cy) in enumerate(cases):
        one = curves.story_stats(cx, cy, s)
        # exactly the same numbers (same kernel), not just close
        assert _identical(_as_dict(b.story(i)), _as_dict(one)), f"story {i}: {b.story(i)} != {one}"


def test_batch_with_empty_nan_and_short_stories():
    cases = [
        ([], []),
        ([0.2, 0.4, 0.6, 0.8], [0.2, 0.8, 0.4, 0.6]),
        ([], []),
        ([0.1, 0.5, 0.9], [0.1, NAN, 0.3]),
        ([0.85], [0.3]),
        ([0.5, 0.9], [0.2, 0.6]),
        ([0.1, 0.4, 0.7, 0.9], [0.2, 0.5, 0.5, 0.2]),
        ([], []),
    ]
    s = CurveSettings(window=1)
    b = curves.batch_stats(*curves.pack(cases), s)
    assert len(b) == len(cases)
    assert list(b.n_positions) == [0, 4, 0, 3, 1, 2, 4, 0]
    for i, (cx, cy) in enumerate(cases):
        exp = ref.story_stats(cx, cy, window=1)
        assert_stats(b.story(i), exp, f"story {i}")
        assert_stats(curves.story_stats(cx, cy, s), exp, f"single {i}")
    # the hand-worked story survives its neighbours
    assert b.story(1).retain == pytest.approx(50.0)
    assert b.story(1).ir == pytest.approx((0.0, 0.25, 0.5), abs=1e-15)
    assert b.story(0).reasons == ALL_EMPTY and b.story(7).reasons == ALL_EMPTY
    assert b.story(3).reasons == Reason.NAN_INPUT


def test_batch_of_nothing():
    x, y, offsets = curves.pack([])
    assert len(x) == 0 and list(offsets) == [0]
    b = curves.batch_stats(x, y, offsets)
    assert len(b) == 0
    assert b.ir.shape[0] == 0


def test_batch_columns_match_story():
    cases = [([0.2, 0.4, 0.6, 0.8], [0.2, 0.8, 0.4, 0.6]), ([], [])]
    b = curves.batch_stats(*curves.pack(cases), CurveSettings(window=1))
    assert b.mean_nr[0] == pytest.approx(0.5) and math.isnan(b.mean_nr[1])
    assert b.retain[0] == pytest.approx(50.0)
    assert b.convergence[0] == pytest.approx(-50.0)
    assert b.late_nr[0] == pytest.approx(0.6)
    assert list(b.reasons) == [0, int(ALL_EMPTY)]


def test_pack_and_batch_reject_bad_input():
    with pytest.raises(ValueError):
        curves.pack([([0.1, 0.2], [0.3])])
    x, y, offsets = curves.pack([([0.1, 0.2, 0.3], [0.3, 0.4, 0.5])])
    with pytest.raises(ValueError):
        curves.batch_stats(x, y[:-1], offsets)
    with pytest.raises(ValueError):
        curves.batch_stats(x, y, np.array([0, 2]))  # does not end at len(x)
    with pytest.raises(ValueError):
        curves.batch_stats(x, y, np.array([1, 3]))  # does not start at 0
    with pytest.raises(ValueError):
        curves.batch_stats(x, y, np.array([0, 2, 1, 3]))  # decreasing
    with pytest.raises(ValueError):
        curves.story_stats([0.1, 0.2], [0.3])


# ===========================================================================
# (d) helpers against the reference


@settings(max_examples=400, **HYP)
@given(case=curve_cases(), window=st.sampled_from([1, 3, 5, 7]))
def test_helpers_match_reference(case, window):
    x, y = case
    ys = curves.smooth(np.asarray(y, float), window)
    rys = ref.smooth(y, window)
    assert len(ys) == len(rys)
    for a, b in zip(ys, rys):
        assert_same(a, b, "smooth", rel=1e-13, abs_=1e-15)
    # feed both the same smoothed curve from here on
    ys_list = [float(v) for v in ys]
    assert list(curves.reversals(ys)) == ref.reversals(ys_list)
    if len(x) < 2 or ref.is_flat(ys_list):
        return  # the unit square needs an x range and a y range
    X, Y = curves.unit_square(x, ys)
    rX, rY = ref.unit_square(x, ys_list)
    for a, b in zip(X, rX):
        assert_same(a, b, "X", abs_=1e-12)
    for a, b in zip(Y, rY):
        assert_same(a, b, "Y", rel=1e-9, abs_=1e-9)
    ang = curves.vertex_angles(x, ys)
    rang = ref.vertex_angles(x, ys_list)
    assert math.isnan(ang[0]) and math.isnan(ang[-1])
    # arccos loses precision next to 0 and 180 deg (an error of a few ulps in the
    # cosine is ~1e-6 deg there); elsewhere the angle must agree to 1e-9 deg
    for a, b in zip(ang, rang):
        tol = 1e-9 if 1.0 < b < 179.0 else 1e-5
        assert_same(a, b, "angle", rel=0.0, abs_=tol)


def test_a_vertex_with_a_leg_of_length_zero_has_no_angle_and_counts_in_no_ir():
    """Two positions at one point of the unit square (x a rounding error apart, the same
    ŷ; found by test_helpers_match_reference): that vertex's angle is NaN in the kernel
    and the reference alike, where atan2 of signed zeros made the reference say 180°."""
    x = [0.2122513435300341, 0.25, 0.3125, 0.34375, 0.375, 0.40625, 0.4375, 0.5, 0.625, 0.65625, 0.6875, 0.75,
         0.875, 0.9899999999999999, 0.99]  # hypothesis's case: the last two X are both 1.0
    y = [0.0] * 13 + [0.01, 0.01]
    X, Y = curves.unit_square(np.asarray(x), np.asarray(y))
    assert (X[-2], Y[-2]) == (X[-1], Y[-1]) == (1.0, 1.0)
    ang = curves.vertex_angles(np.asarray(x), curves.smooth(np.asarray(y), 1))
    rang = ref.vertex_angles(x, y)
    assert np.isnan(ang[-2]) and math.isnan(rang[-2])
    assert not np.isnan(ang[-3]) and ang[-3] == pytest.approx(rang[-3], abs=1e-9)
    got, exp = run_both(x, y, window=1)
    assert_stats(got, exp)


def test_helpers_on_empty_and_short():
    assert len(curves.smooth([], 5)) == 0
    assert len(curves.reversals([])) == 0
    assert len(curves.vertex_angles([], [])) == 0
    assert list(curves.reversals([0.3])) == [False]
    assert list(curves.reversals([0.3, 0.9])) == [False, False]
    assert math.isnan(curves.vertex_angles([0.5], [0.3])[0])
    a = curves.vertex_angles([0.2, 0.6], [0.3, 0.9])
    assert len(a) == 2 and all(math.isnan(v) for v in a)


def test_unit_square_by_hand():
    # X = (x - 0.2) / 0.6, Y = (y - 0.2) / 0.6
    X, Y = curves.unit_square([0.2, 0.4, 0.6, 0.8], [0.2, 0.8, 0.4, 0.6])
    assert list(X) == pytest.approx([0, 1 / 3, 2 / 3, 1])
    assert list(Y) == pytest.approx([0, 1, 1 / 3, 2 / 3])


def test_reversals_by_hand():
    # peaks and valleys, a plateau top, a shoulder, and a near tie
    ys = [0.1, 0.5, 0.2, 0.2, 0.6, 0.6 + 1e-13, 0.3, 0.4, 0.4, 0.5, 0.1]
    # signs of (ŷ[j]-ŷ[j-1], ŷ[j+1]-ŷ[j]):
    # j=1 (+,-) peak; j=2 (-,0) no; j=3 (0,+) no; j=4 (+,tie) no; j=5 (tie,-) no;
    # j=6 (-,+) valley; j=7 (+,0) no; j=8 (0,+) no; j=9 (+,-) peak
    assert list(curves.reversals(ys)) == [
        False, True, False, False, False, False, True, False, False, True, False]


# ===========================================================================
# (e) settings validation


@pytest.mark.parametrize("window", [0, 2, 4, 6, -1, -3])
def test_even_or_nonpositive_window_rejected(window):
    with pytest.raises(ValueError):
        CurveSettings(window=window)


@pytest.mark.parametrize("window", [2, 4])
def test_smooth_rejects_even_window(window):
    with pytest.raises(ValueError):
        curves.smooth([0.1, 0.2, 0.3], window)


@pytest.mark.parametrize("thresholds", [(), (0.0,), (-10.0,), (181.0,), (30.0, 200.0)])
def test_bad_thresholds_rejected(thresholds):
    with pytest.raises(ValueError):
        CurveSettings(thresholds=thresholds)


def test_bad_retention_window_rejected():
    with pytest.raises(ValueError):
        CurveSettings(retention_window=0)


def test_defaults_are_the_metrics_page():
    s = CurveSettings()
    assert s.window == 5
    assert tuple(s.thresholds) == (30.0, 60.0, 120.0)
    assert s.late_threshold == 0.8
    assert s.retention_window == 10
    assert curves.TIE_EPS == 1e-12
    for w in (1, 3, 5, 7, 9):
        assert CurveSettings(window=w).window == w
    assert CurveSettings(thresholds=(180.0,)).thresholds == (180.0,)
