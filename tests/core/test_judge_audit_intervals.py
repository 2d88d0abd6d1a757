"""Agreement's, κ's and J's 95 % intervals (core/reports/judge_audit.py; docs/metrics.md 1.10,
chosen by bench/audit_intervals.py): never a point at 0 disagreements (the bootstrap's
[1, 1]), each end equal to a reference worked here from the printed formulas (not from the
module's code: the MOVER ends of closed forms of the statistics in q1, q0), and the edges
(all one class, a handful of items, κ undefined at p_e = 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from tension.core.reports import judge_audit as ja
from tension.testing.wilson_reference import wilson_textbook

Z = norm.ppf(0.975)


wilson_ref = wilson_textbook


def items(nn: int, ny: int, yn: int, yy: int) -> tuple[np.ndarray, np.ndarray]:
    """Per item: the judge said no; people's share of no (judge's answer first in the cell names)."""
    return (np.array([True] * (nn + ny) + [False] * (yn + yy)),
            np.array([1.0] * nn + [0.0] * ny + [1.0] * yn + [0.0] * yy))


def reference(nn: int, ny: int, yn: int, yy: int, population: tuple[float, float] | None) -> dict:
    """The three intervals by hand. With a the run's share of judge no and q1, q0 the shares people
    call no among the judge's no and yes items:
      agreement = a·q1 + (1 − a)(1 − q0): Newcombe/Zou's MOVER for a weighted sum of two shares,
        lo = p − √(a²(q1 − l1)² + (1 − a)²(u0 − q0)²),  hi = p + √(a²(u1 − q1)² + (1 − a)²(q0 − l0)²);
      J = a(1 − a)(q1 − q0) / (P(1 − P)), P = a·q1 + (1 − a)·q0, rising in q1 and falling in q0:
        lo = J − √((J − J(l1, q0))² + (J − J(q1, u0))²),  hi = J + √((J(u1, q0) − J)² + (J(q1, l0) − J)²);
      κ = (p_o − p_e)/(1 − p_e) from the weighted table's margins, which is 2a(1 − a)(q1 − q0) /
        (a(1 − P) + (1 − a)P), rising in q1 and falling in q0: its ends as J's."""
    n1, n0 = nn + ny, yn + yy
    a = population[0] / sum(population) if population else n1 / (n1 + n0)
    q1, q0 = nn / n1, yn / n0
    (l1, u1), (l0, u0) = wilson_ref(nn, n1), wilson_ref(yn, n0)
    p = a * q1 + (1 - a) * (1 - q0)
    agreement = (p, max(0.0, p - math.sqrt(a * a * (q1 - l1) ** 2 + (1 - a) ** 2 * (u0 - q0) ** 2)),
                 min(1.0, p + math.sqrt(a * a * (u1 - q1) ** 2 + (1 - a) ** 2 * (q0 - l0) ** 2)))

    def youden(x1, x0):
        big_p = a * x1 + (1 - a) * x0
        return a * (1 - a) * (x1 - x0) / (big_p * (1 - big_p))

    j = youden(q1, q0)
    lo_j = j - math.hypot(j - youden(l1, q0), j - youden(q1, u0))
    hi_j = j + math.hypot(youden(u1, q0) - j, youden(q1, l0) - j)
    # κ from the weighted table's margins (the items weighted N_answer / n_answer), then as a function of q1, q0
    w1, w0 = (population[0] / n1, population[1] / n0) if population else (1.0, 1.0)
    t = np.array([w1 * nn, w1 * ny, w0 * yn, w0 * yy])
    t /= t.sum()
    po = t[0] + t[3]
    pe = (t[0] + t[1]) * (t[0] + t[2]) + (t[2] + t[3]) * (t[1] + t[3])

    def kappa(x1, x0):
        big_p = a * x1 + (1 - a) * x0
        return 2 * a * (1 - a) * (x1 - x0) / (a * (1 - big_p) + (1 - a) * big_p)

    k = kappa(q1, q0)
    assert k == pytest.approx((po - pe) / (1 - pe), abs=1e-12)  # the closed form is Cohen's κ
    kappa_iv = (k, max(-1.0, k - math.hypot(k - kappa(l1, q0), k - kappa(q1, u0))),
                min(1.0, k + math.hypot(kappa(u1, q0) - k, kappa(q1, l0) - k)))
    return {"agreement": agreement, "kappa": kappa_iv, "youden": (j, max(-1.0, lo_j), min(1.0, hi_j))}


POPULATIONS = [(600.0, 400.0), (900.0, 100.0), None]


@pytest.mark.parametrize("population", POPULATIONS, ids=["600-400", "mostly-no", "unweighted"])
def test_no_disagreement_is_not_a_point_and_holds_the_estimate(population):
    """30 of 30 agree: the bootstrap said agreement = κ = J = 1.00 [1.00, 1.00]; now each interval is
    [lo, 1] with lo below 1 by what 15 + 15 items leave open (and not the whole range either)."""
    got = ja.judge_agreement(*items(15, 0, 0, 15), population)
    want = reference(15, 0, 0, 15, population)
    for stat in ("agreement", "kappa", "youden"):
        iv = getattr(got, stat)
        assert iv.value == 1.0 and iv.hi == 1.0, stat
        assert 0.3 < iv.lo < 0.97, (stat, iv)
        assert iv.lo <= iv.value <= iv.hi
        assert (iv.value, iv.lo, iv.hi) == pytest.approx(want[stat], abs=1e-12), stat


@pytest.mark.parametrize("population", POPULATIONS, ids=["600-400", "mostly-no", "unweighted"])
@pytest.mark.parametrize("table", [(37, 6, 9, 28), (14, 1, 0, 15), (3, 2, 1, 4), (40, 10, 2, 48)],
                         ids=["errors", "one-error", "tiny", "larger"])
def test_each_interval_equals_the_hand_reference(table, population):
    got = ja.judge_agreement(*items(*table), population)
    want = reference(*table, population)
    for stat in ("agreement", "kappa", "youden"):
        iv = getattr(got, stat)
        assert (iv.value, iv.lo, iv.hi) == pytest.approx(want[stat], abs=1e-9), stat
        assert iv.lo < iv.value < iv.hi or iv.value == iv.hi == 1.0, (stat, iv)
    # nothing is resampled: the seed and the resamples change nothing
    assert ja.judge_agreement(*items(*table), population, n_resamples=7, seed=99) == got


def test_people_who_always_agree_get_an_interval_below_1():
    """Two annotators agreeing on all 30 items (18 no, 12 match): agreement and κ are 1 with an
    interval [lo, 1], lo < 1. Agreement's reference: MOVER over q1, q0 and a's share (the pair's
    table is a sample of items, so a, A's share of no, is a share like the others)."""
    labels = {f"k{i}": dict.fromkeys(("ann", "bo"), ja.NO_MATCH if i < 18 else ja.MATCHES) for i in range(30)}
    (pair,) = ja.people_agreement(labels)
    for iv in (pair.agreement, pair.kappa):
        assert iv.value == 1.0 and iv.hi == 1.0 and 0.5 < iv.lo < 1.0
    (l1, _), (_, u0), (la, ua) = wilson_ref(18, 18), wilson_ref(0, 12), wilson_ref(18, 30)
    a = 18 / 30  # p_o = a·q1 + (1 − a)(1 − q0) at q1 = 1, q0 = 0 is 1 for every a: a moves it not at all
    assert pair.agreement.lo == pytest.approx(1 - math.hypot(a * (1 - l1), (1 - a) * u0), abs=1e-12)
    def kappa(x1, x0, aa):
        big_p = aa * x1 + (1 - aa) * x0
        return 2 * aa * (1 - aa) * (x1 - x0) / (aa * (1 - big_p) + (1 - aa) * big_p)

    assert kappa(1, 0, la) == kappa(1, 0, ua) == 1.0  # κ is 1 at q1 = 1, q0 = 0 for every a: a moves it not
    assert pair.kappa.lo == pytest.approx(1 - math.hypot(1 - kappa(l1, 0, a), 1 - kappa(1, u0, a)), abs=1e-12)
    # with one disagreement a's share moves agreement too: wider than with a held
    labels["k0"] = {"ann": ja.NO_MATCH, "bo": ja.MATCHES}
    (pair,) = ja.people_agreement(labels)
    held = ja.judge_agreement(*items(17, 1, 0, 12), None)
    assert pair.agreement.value == held.agreement.value and pair.agreement.lo < held.agreement.lo


def test_one_class_a_handful_and_undefined_kappa():
    # the judge said only no: nothing of the judge's yes is known, every figure undefined (NaN, not a number)
    only_no = ja.judge_agreement(*items(10, 3, 0, 0), (600.0, 400.0))
    for stat in ("agreement", "kappa", "youden"):
        iv = getattr(only_no, stat)
        assert math.isnan(iv.value) and math.isnan(iv.lo) and math.isnan(iv.hi), stat
    # people called everything no: κ is 0 (p_e = a < 1) with an interval about it; J is undefined (no match to find)
    all_no = ja.judge_agreement(*items(10, 0, 10, 0), (600.0, 400.0))
    assert all_no.kappa.value == pytest.approx(0.0, abs=1e-12)
    assert -1.0 <= all_no.kappa.lo < 0.0 < all_no.kappa.hi <= 1.0
    assert all(math.isnan(v) for v in (all_no.youden.value, all_no.youden.lo, all_no.youden.hi))
    # one item of each answer, both agreeing: defined, inside the range, far from a point
    tiny = ja.judge_agreement(*items(1, 0, 0, 1), None)
    for stat, bottom in (("agreement", 0.0), ("kappa", -1.0), ("youden", -1.0)):
        iv = getattr(tiny, stat)
        assert iv.value == 1.0 and iv.hi == 1.0 and bottom <= iv.lo < 0.5, (stat, iv)
    # p_e = 1: both annotators said no to every item; κ is undefined, with no ends, never a number
    both_no = {f"k{i}": dict.fromkeys(("ann", "bo"), ja.NO_MATCH) for i in range(6)}
    (pair,) = ja.people_agreement(both_no)
    assert math.isnan(pair.kappa.value) and math.isnan(pair.kappa.lo) and math.isnan(pair.kappa.hi)
    # agreement is defined: a said one answer only, so p_o is the one share of agreeing items, 6 of 6
    assert (pair.agreement.value, pair.agreement.lo, pair.agreement.hi) == pytest.approx((1.0, *wilson_ref(6, 6)))
    assert pair.agreement.lo < 1.0
    # a judge-only sample of one answer, unweighted: p_e = 1, κ undefined
    one = ja.judge_agreement(*items(5, 0, 0, 0), None)
    assert math.isnan(one.kappa.value) and math.isnan(one.kappa.lo)


def test_the_study_runs_and_prints_every_candidate(capsys):
    """bench/audit_intervals.py (docs/metrics.md 1.10's table), in a few replications."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "audit_intervals.py"
    spec = importlib.util.spec_from_file_location("audit_intervals_study", path)
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    assert study.main(["--families", "tune", "--reps", "5", "--resamples", "20", "--sizes", "20,50"]) == 0
    out = capsys.readouterr().out
    assert "| statistic | family | m | truth | candidate | coverage | width | collapsed | undefined |" in out
    for stat, cands in study.CANDIDATES.items():
        for cand in cands:
            assert f"| {stat} | {cand} |" in out, (stat, cand)
    assert "choice for kappa:" in out
