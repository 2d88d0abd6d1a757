"""The audit's statistics (core/reports/judge_audit.py) against an independent calculation:
each reference is written here by hand from the formulas of docs/metrics.md 1.10, on a
known confusion table, to 1e-9; then the edge cases (empty, one class, can't tell, NaN,
a judge no better than chance)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tension.core.reports import judge_audit as ja
from tension.core.reports import judge_correction as jc
from tension.testing.wilson_reference import wilson_textbook

# judge no & people no, judge no & people yes, judge yes & people no, judge yes & people yes
NN, NY, YN, YY = 37, 6, 9, 28


def items(nn=NN, ny=NY, yn=YN, yy=YY):
    """Per item: the judge said no, the share of people who said no (1 or 0)."""
    judge = [True] * (nn + ny) + [False] * (yn + yy)
    people = [1.0] * nn + [0.0] * ny + [1.0] * yn + [0.0] * yy
    return np.array(judge), np.array(people)


def test_known_table_to_1e9():
    t = ja.Confusion(NN, NY, YN, YY)
    n = 80
    po = (37 + 28) / n
    pe = (43 / n) * (46 / n) + (37 / n) * (34 / n)  # judge no × people no + judge yes × people yes
    assert ja.agreement(t) == pytest.approx(po, abs=1e-12)
    assert ja.kappa(t) == pytest.approx((po - pe) / (1 - pe), abs=1e-12)
    sens, spec = 37 / 46, 28 / 34
    assert ja.sensitivity(t) == pytest.approx(sens, abs=1e-12)
    assert ja.specificity(t) == pytest.approx(spec, abs=1e-12)
    c = jc.rogan_gladen(0.7, sens, spec)
    assert abs(c.value - (0.7 + 28 / 34 - 1) / (37 / 46 + 28 / 34 - 1)) < 1e-9
    assert not c.clipped and c.undefined is None


def test_the_corrected_prevalence_of_a_known_table_equals_the_hand_calculation():
    """The Done-when check: the corrected group mean, from labelled items and a run's
    verdict counts, equals the formula worked by hand to 1e-9."""
    judge, people = items()
    population = (600.0, 400.0)  # the run: 600 judge-no verdicts, 400 judge-yes
    values = np.array([0.52, 0.61, 0.70, 0.66, 0.58, float("nan")])  # stories' mean NR (one undefined)
    got = jc.corrected_mean(values, judge, people, population, n_resamples=200)
    # by hand: each judge answer's items stand for its share of the run
    w_no, w_yes = 600 / 43, 400 / 37
    nn, ny, yn, yy = w_no * 37, w_no * 6, w_yes * 9, w_yes * 28
    sens, spec = nn / (nn + yn), yy / (ny + yy)
    m = (0.52 + 0.61 + 0.70 + 0.66 + 0.58) / 5
    want = (m + spec - 1) / (sens + spec - 1)
    assert 0 < want < 1
    assert abs(got.corrected.value - want) < 1e-9
    assert abs(got.observed.value - m) < 1e-12
    assert got.n == 5
    assert got.corrected.lo < got.corrected.value < got.corrected.hi


def test_the_weighted_table_and_the_agreement_figures():
    judge, people = items()
    pop = (600.0, 400.0)
    t = ja.table_of(judge, people, pop)
    w_no, w_yes = 600 / 43, 400 / 37
    assert (t.nn, t.ny, t.yn, t.yy) == pytest.approx((w_no * 37, w_no * 6, w_yes * 9, w_yes * 28), abs=1e-9)
    got = ja.judge_agreement(judge, people, pop, n_resamples=500, seed=3)
    n = t.total
    po = (t.nn + t.yy) / n
    pe = ((t.nn + t.ny) / n) * ((t.nn + t.yn) / n) + ((t.yn + t.yy) / n) * ((t.ny + t.yy) / n)
    assert abs(got.agreement.value - po) < 1e-9
    assert abs(got.kappa.value - (po - pe) / (1 - pe)) < 1e-9
    assert abs(got.sensitivity.value - t.nn / (t.nn + t.yn)) < 1e-9
    assert abs(got.specificity.value - t.yy / (t.ny + t.yy)) < 1e-9
    assert got.table.total == pytest.approx(1.0)
    for iv in (got.agreement, got.kappa, got.sensitivity, got.specificity):
        assert iv.lo <= iv.value <= iv.hi
    assert ja.judge_agreement(judge, people, pop, n_resamples=500, seed=3) == got  # seeded
    # unweighted: the sample's own table
    plain = ja.judge_agreement(judge, people, n_resamples=100)
    assert abs(plain.kappa.value - ja.kappa(ja.Confusion(NN, NY, YN, YY))) < 1e-9


def test_the_delta_interval_against_a_numerical_derivative():
    """The interval's variance, recomputed with central differences of the correction
    (an independent route to the same delta method) and Agresti–Coull's variances."""
    judge, people = items()
    pop = (600.0, 400.0)
    values = np.array([0.52, 0.61, 0.70, 0.66, 0.58, 0.49, 0.73])
    got = jc.corrected_mean(values, judge, people, pop)
    a = 0.6

    def corrected(m, q1, q0):
        p = a * q1 + (1 - a) * q0
        sens, spec = a * q1 / p, (1 - a) * (1 - q0) / (1 - p)
        return (m + spec - 1) / (sens + spec - 1)

    m, q1, q0 = values.mean(), 37 / 43, 9 / 37
    h = 1e-6
    d = [(corrected(m + h, q1, q0) - corrected(m - h, q1, q0)) / (2 * h),
         (corrected(m, q1 + h, q0) - corrected(m, q1 - h, q0)) / (2 * h),
         (corrected(m, q1, q0 + h) - corrected(m, q1, q0 - h)) / (2 * h)]
    ac1, ac0 = (37 + 2) / (43 + 4), (9 + 2) / (37 + 4)
    var = d[0] ** 2 * values.var(ddof=1) / 7 + d[1] ** 2 * ac1 * (1 - ac1) / 47 + d[2] ** 2 * ac0 * (1 - ac0) / 41
    raw = corrected(m, q1, q0)
    assert got.corrected.lo == pytest.approx(raw - 1.959963984540054 * math.sqrt(var), abs=1e-7)
    assert got.corrected.hi == pytest.approx(raw + 1.959963984540054 * math.sqrt(var), abs=1e-7)


# -- sensitivity's and specificity's intervals: Wilson through MOVER-R, never [1, 1] ----------------------

_wilson_textbook = wilson_textbook


def _mover_textbook(x1, n1, x2, n2):
    """MOVER-R of (x1/n1) / (x2/n2) as Zou & Donner (2008) print it (not rationalised), from the
    textbook Wilson intervals; the upper end inf when its denominator is 0."""
    t1, t2 = x1 / n1, x2 / n2
    (l1, u1), (l2, u2) = _wilson_textbook(x1, n1), _wilson_textbook(x2, n2)
    lo = (t1 * t2 - math.sqrt((t1 * t2) ** 2 - l1 * u2 * (2 * t1 - l1) * (2 * t2 - u2))) / (u2 * (2 * t2 - u2))
    den = l2 * (2 * t2 - l2)
    hi = (t1 * t2 + math.sqrt((t1 * t2) ** 2 - u1 * l2 * (2 * t1 - u1) * (2 * t2 - l2))) / den if den else math.inf
    return lo, hi


@pytest.mark.parametrize("population", [(600.0, 400.0), None], ids=["weighted", "unweighted"])
def test_a_table_without_errors_has_intervals_below_1(population):
    """0 errors (20 items the judge and people call no, 15 both call a match): the bootstrap had
    nothing to resample and said [1, 1]; the interval is the Wilson–MOVER one, worked here from
    the printed formulas. Sensitivity's odds are a/(1 − a)·q1/q0 with q1 = 20/20, q0 = 0/15."""
    judge, people = items(nn=20, ny=0, yn=0, yy=15)
    got = ja.judge_agreement(judge, people, population, n_resamples=300)
    odds = 600 / 400 if population else 20 / 15  # unweighted: the sample's own share of judge no
    assert got.sensitivity.value == 1.0 and got.specificity.value == 1.0
    ratio_lo, ratio_hi = _mover_textbook(20, 20, 0, 15)  # q1 / q0: no upper bound at q0 = 0
    assert ratio_hi == math.inf
    sens_lo = odds * ratio_lo / (1 + odds * ratio_lo)
    # the same in closed form: at q1 = 1, q0 = 0 the lower end of q1 / q0 is √(l1(2 − l1)) / u2
    z2 = 1.959963984540054 ** 2
    l1, u2 = 20 / (20 + z2), z2 / (15 + z2)
    assert ratio_lo == pytest.approx(math.sqrt(l1 * (2 - l1)) / u2, rel=1e-12)
    assert abs(got.sensitivity.lo - sens_lo) < 1e-12 and got.sensitivity.hi == 1.0
    phi_lo, phi_hi = _mover_textbook(0, 20, 15, 15)  # (1 − q1) / (1 − q0): 0 of 20, 15 of 15
    assert phi_lo == 0.0
    assert abs(got.specificity.lo - 1 / (1 + odds * phi_hi)) < 1e-12 and got.specificity.hi == 1.0
    for iv in (got.sensitivity, got.specificity):
        assert 0.5 < iv.lo < 0.95  # not [1, 1], and not the whole of [0, 1] either
    # the same table, a group of 5 + 4 items (a part of the story): wider, still not [1, 1]
    small = ja.judge_agreement(*items(nn=5, ny=0, yn=0, yy=4), population, n_resamples=300)
    assert small.sensitivity.lo < got.sensitivity.lo and small.specificity.lo < got.specificity.lo < 1.0


def test_sensitivity_and_specificity_intervals_of_a_known_table():
    """With errors on both sides, weighted to the run: each end the printed formulas' (to
    1e-12), the point inside, and no bootstrap in them (the seed changes nothing)."""
    judge, people = items()
    got = ja.judge_agreement(judge, people, (600.0, 400.0), n_resamples=300, seed=1)
    odds = 600 / 400
    lo, hi = _mover_textbook(37, 43, 9, 37)  # q1 / q0
    assert abs(got.sensitivity.lo - odds * lo / (1 + odds * lo)) < 1e-12
    assert abs(got.sensitivity.hi - odds * hi / (1 + odds * hi)) < 1e-12
    lo, hi = _mover_textbook(6, 43, 28, 37)  # (1 − q1) / (1 − q0)
    assert abs(got.specificity.lo - 1 / (1 + odds * hi)) < 1e-12
    assert abs(got.specificity.hi - 1 / (1 + odds * lo)) < 1e-12
    for iv in (got.sensitivity, got.specificity):
        assert iv.lo < iv.value < iv.hi
    other = ja.judge_agreement(judge, people, (600.0, 400.0), n_resamples=300, seed=2)
    assert (other.sensitivity, other.specificity) == (got.sensitivity, got.specificity)
    # two people splitting an item count it ½: the shares may be fractional
    half = ja.judge_agreement([True, True, False, False], [1.0, 0.5, 0.0, 0.5], None, n_resamples=50)
    lo, hi = _mover_textbook(1.5, 2, 0.5, 2)
    assert abs(half.sensitivity.lo - lo / (1 + lo)) < 1e-12 and abs(half.sensitivity.hi - hi / (1 + hi)) < 1e-12


def test_wilson_and_the_ratio_at_their_edges():
    assert ja.wilson(0, 10) == pytest.approx(_wilson_textbook(0, 10), abs=1e-15)
    assert ja.wilson(10, 10)[0] == pytest.approx(10 / (10 + 1.959963984540054 ** 2), rel=1e-12)
    # Brown, Cai & DasGupta's ends: one success in 20 (χ² of 2 degrees of freedom: ½χ²(2; α) = −ln(1 − α))
    assert ja.wilson(1, 20)[0] == pytest.approx(-math.log(0.95) / 20, rel=1e-12)
    assert ja.wilson(19, 20)[1] == pytest.approx(1 + math.log(0.95) / 20, rel=1e-12)
    for x, n in ((2, 20), (3, 80), (1, 120), (7, 20), (0.5, 2), (1.5, 2), (60, 80)):  # (1, 120): Wilson's own
        assert ja.wilson(x, n) == pytest.approx(_wilson_textbook(x, n), rel=1e-12), (x, n)
    assert all(math.isnan(v) for v in ja.wilson(0, 0))
    assert ja.ratio_interval(0, 10, 3, 10)[0] == 0.0  # no successes above: the ratio's lower end is 0
    assert all(math.isnan(v) for v in ja.ratio_interval(0, 10, 0, 10))  # 0 / 0: undefined
    assert all(math.isnan(v) for v in ja.ratio_interval(3, 0, 3, 10))
    # the denominator's Wilson end beyond twice its share (2·t2 − u2 < 0): the rationalised form is the printed one
    assert ja.ratio_interval(1, 2, 1, 40) == pytest.approx(_mover_textbook(1, 2, 1, 40), rel=1e-12)


def test_clipped_and_undefined():
    c = jc.rogan_gladen(0.02, 0.8, 0.9)  # fewer no than the judge's false no alone would give
    assert c.value == 0.0 and c.clipped and c.raw < 0
    c = jc.rogan_gladen(0.99, 0.8, 0.9)
    assert c.value == 1.0 and c.clipped
    c = jc.rogan_gladen(0.5, 0.5, 0.5)
    assert math.isnan(c.value) and "no better than chance" in c.undefined
    c = jc.rogan_gladen(0.5, 0.4, 0.55)
    assert math.isnan(c.value) and "≤ 1" in c.undefined
    c = jc.rogan_gladen(float("nan"), 0.8, 0.9)
    assert math.isnan(c.value) and c.undefined


def test_empty_one_class_and_cant_tell():
    empty = ja.Confusion(0, 0, 0, 0)
    assert all(math.isnan(f(empty)) for f in (ja.agreement, ja.kappa, ja.sensitivity, ja.specificity))
    # every item people call a match: κ undefined (chance agreement 1 on one side), sensitivity undefined
    one = ja.Confusion(0, 5, 0, 20)
    assert math.isnan(ja.kappa(ja.Confusion(0, 0, 0, 20)))
    assert math.isnan(ja.sensitivity(one)) and ja.specificity(one) == 0.8
    got = ja.judge_agreement([True, False], [0.0, 0.0], (10, 10), n_resamples=50)
    assert math.isnan(got.sensitivity.value) and got.kappa.value == 0.0  # p_e < 1: κ is 0, not undefined
    assert "labels of one kind" in jc.corrected_mean([0.5, 0.6], [True, False], [0.0, 0.0], (10, 10)).undefined
    # an item with only "can't tell" (NaN share) carries nothing; the others are as without it
    judge, people = items()
    with_nan = ja.judge_agreement(np.append(judge, True), np.append(people, np.nan), (600, 400), n_resamples=100)
    assert with_nan.items == 80
    assert with_nan.kappa.value == ja.judge_agreement(judge, people, (600, 400), n_resamples=100).kappa.value
    nothing = ja.judge_agreement([], [], None, n_resamples=10)
    assert nothing.items == 0 and math.isnan(nothing.kappa.value)
    assert ja.agreement_warnings(nothing) == ["no item has a decisive label yet: nothing is known of the judge's "
                                              "errors"]


def test_warnings_at_the_thresholds():
    judge, people = items()
    good = ja.judge_agreement(judge, people, (600, 400), n_resamples=200)
    assert good.kappa.value > ja.WARN_KAPPA and good.youden.value > ja.WARN_YOUDEN
    assert ja.agreement_warnings(good) == []
    # a weak judge: 20 of 40 right on each side
    weak_j, weak_p = items(nn=12, ny=8, yn=8, yy=12)
    weak = ja.judge_agreement(weak_j, weak_p, None, n_resamples=200)
    said = " ".join(ja.agreement_warnings(weak))
    assert "κ = 0.20 < 0.4" in said and "sensitivity + specificity − 1 = 0.20 < 0.5" in said


def test_people_agree_on_shared_items():
    labels = {
        "k1": {"ann": ja.NO_MATCH, "bo": ja.NO_MATCH},
        "k2": {"ann": ja.MATCHES, "bo": ja.MATCHES},
        "k3": {"ann": ja.NO_MATCH, "bo": ja.MATCHES},
        "k4": {"ann": ja.CANT_TELL, "bo": ja.MATCHES},
        "k5": {"ann": ja.NO_MATCH, "bo": ja.NO_MATCH},
        "k6": {"ann": ja.MATCHES},
    }
    (pair,) = ja.people_agreement(labels, n_resamples=300)
    assert (pair.a, pair.b, pair.items, pair.cant_tell) == ("ann", "bo", 4, 1)
    assert pair.table == ja.Confusion(2, 1, 0, 1)
    po, pe = 3 / 4, (3 / 4) * (2 / 4) + (1 / 4) * (2 / 4)
    assert abs(pair.agreement.value - po) < 1e-12
    assert abs(pair.kappa.value - (po - pe) / (1 - pe)) < 1e-12
    assert ja.people_agreement({"k": {"ann": ja.MATCHES}}) == []


def test_the_study_runs_and_prints_every_candidate(capsys):
    """bench/judge_audit.py (docs/metrics.md 1.10's table), in a few replications."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "judge_audit.py"
    spec = importlib.util.spec_from_file_location("judge_audit_study", path)
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    assert study.main(["--reps", "3", "--resamples", "50", "--sizes", "40"]) == 0
    out = capsys.readouterr().out
    assert "| judge (sens, spec) | m | candidate | bias G1 | bias G2 | RMSE | coverage | width | undefined |" in out
    for cand in study.CANDIDATES:
        assert f"| {cand} |" in out
