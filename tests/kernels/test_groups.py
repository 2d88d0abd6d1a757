"""Group statistics (docs/metrics.md 1.5): tension.kernels.groups against hand-worked
values, the plain-Python reference, numpy and scipy."""

from __future__ import annotations

import math

import curve_reference as ref  # tests/ is on sys.path (pyproject's pythonpath)
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tension.kernels import groups

NAN = float("nan")
HYP = dict(deadline=None, database=None)


def same(a, b, rel=1e-12, abs_=1e-12) -> bool:
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def assert_stat(got: groups.GroupStat, exp: dict, ctx=""):
    assert got.n == exp["n"], ctx
    assert got.n_nan == exp["n_nan"], ctx
    for f in ("mean", "sd", "ci95"):
        assert same(getattr(got, f), exp[f]), f"{f} {ctx}: got {getattr(got, f)!r}, expected {exp[f]!r}"


# ---------------------------------------------------------------------------
# hand-worked


def test_describe_by_hand():
    # values 1, 2, 3, 4: mean 2.5; squared deviations 2.25+0.25+0.25+2.25 = 5;
    # sd = sqrt(5/3) = 1.2909944; ci95 = 1.96 * sd / 2 = 1.2651745
    g = groups.describe([1.0, 2.0, 3.0, 4.0])
    assert g.mean == pytest.approx(2.5)
    assert g.sd == pytest.approx(math.sqrt(5 / 3))
    assert g.ci95 == pytest.approx(1.96 * math.sqrt(5 / 3) / 2)
    assert g.ci95 == pytest.approx(1.2651745, abs=1e-7)
    assert (g.n, g.n_nan) == (4, 0)


def test_describe_two_values():
    # 0.2, 0.6: mean 0.4, sd = |0.6-0.2|/sqrt(2) = 0.28284271, ci95 = 1.96*0.2 = 0.392
    g = groups.describe([0.2, 0.6])
    assert g.mean == pytest.approx(0.4)
    assert g.sd == pytest.approx(0.4 / math.sqrt(2))
    assert g.ci95 == pytest.approx(0.392)


def test_describe_nan_excluded_and_counted():
    # NaNs (e.g. late NR of a story without late positions) are left out and counted
    g = groups.describe([1.0, NAN, 2.0, 3.0, NAN, 4.0])
    assert g.mean == pytest.approx(2.5)
    assert g.sd == pytest.approx(math.sqrt(5 / 3))
    assert g.ci95 == pytest.approx(1.96 * math.sqrt(5 / 3) / 2)
    assert (g.n, g.n_nan) == (4, 2)


def test_describe_empty():
    g = groups.describe([])
    assert math.isnan(g.mean) and math.isnan(g.sd) and math.isnan(g.ci95)
    assert (g.n, g.n_nan) == (0, 0)


def test_describe_all_nan():
    g = groups.describe([NAN, NAN, NAN])
    assert math.isnan(g.mean) and math.isnan(g.sd) and math.isnan(g.ci95)
    assert (g.n, g.n_nan) == (0, 3)


def test_describe_single_value():
    # n = 1: the mean is the value; the sample sd (ddof=1) is undefined
    g = groups.describe([0.7, NAN])
    assert g.mean == pytest.approx(0.7)
    assert math.isnan(g.sd) and math.isnan(g.ci95)
    assert (g.n, g.n_nan) == (1, 1)


def test_describe_constant():
    g = groups.describe([0.3] * 5)
    assert g.mean == pytest.approx(0.3)
    assert g.sd == pytest.approx(0.0, abs=1e-15)
    assert g.ci95 == pytest.approx(0.0, abs=1e-15)


def test_group_stats_order_of_first_appearance():
    values = [1.0, 10.0, 2.0, NAN, 20.0, 100.0, 3.0]
    labels = ["b", "a", "b", "c", "a", "z", "b"]
    out = groups.group_stats(values, labels)
    assert list(out) == ["b", "a", "c", "z"]
    assert out["b"].mean == pytest.approx(2.0) and out["b"].n == 3
    assert out["a"].mean == pytest.approx(15.0) and out["a"].n == 2
    # a group of only NaN is kept, with its NaN counted
    assert out["c"].n == 0 and out["c"].n_nan == 1 and math.isnan(out["c"].mean)
    assert out["z"].n == 1 and math.isnan(out["z"].sd)
    # 10, 20: sd = 10/sqrt(2), ci = 1.96 * sd / sqrt(2) = 9.8
    assert out["a"].ci95 == pytest.approx(9.8)


def test_group_stats_empty_and_mismatch():
    assert groups.group_stats([], []) == {}
    with pytest.raises(ValueError):
        groups.group_stats([1.0, 2.0], ["a"])


def test_group_stats_does_not_mix_groups():
    out = groups.group_stats([0.0, 1.0] * 5, ["even", "odd"] * 5)
    assert out["even"].mean == 0.0 and out["odd"].mean == 1.0
    assert out["even"].sd == 0.0 and out["odd"].sd == 0.0


# ---------------------------------------------------------------------------
# against the reference, numpy and scipy

values_st = st.lists(
    st.one_of(st.floats(-1e3, 1e3), st.just(NAN), st.sampled_from([0.0, 0.25, 1.0])),
    min_size=0, max_size=40,
)


@settings(max_examples=200, **HYP)
@given(values=values_st)
def test_describe_matches_reference(values):
    assert_stat(groups.describe(values), ref.describe(values), f"{values}")


@settings(max_examples=200, **HYP)
@given(data=st.lists(st.tuples(st.one_of(st.floats(0, 1), st.just(NAN)),
                               st.sampled_from(["vanilla", "pipeline", "beats", "title", "x"])),
                     max_size=60))
def test_group_stats_matches_reference(data):
    values = [v for v, _ in data]
    labels = [g for _, g in data]
    got = groups.group_stats(values, labels)
    exp = ref.group_stats(values, labels)
    assert list(got) == list(exp)
    for g in exp:
        assert_stat(got[g], exp[g], g)
    assert sum(s.n + s.n_nan for s in got.values()) == len(values)


def test_describe_matches_numpy_and_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    for n in range(2, 60):
        v = rng.uniform(0, 1, size=n)
        v[rng.random(n) < 0.2] = np.nan
        ok = v[~np.isnan(v)]
        g = groups.describe(v)
        assert g.n == ok.size and g.n_nan == n - ok.size
        if ok.size == 0:
            continue
        assert same(g.mean, np.mean(ok))
        assert same(g.mean, np.nanmean(v))
        if ok.size < 2:
            assert math.isnan(g.sd)
            continue
        assert same(g.sd, np.std(ok, ddof=1))
        assert same(g.sd, stats.tstd(ok))
        # scipy's standard error of the mean uses ddof=1 as well
        assert same(g.ci95, 1.96 * stats.sem(ok))
        lo, hi = stats.norm.interval(0.95, loc=np.mean(ok), scale=stats.sem(ok))
        # 1.96 is the rounded normal quantile 1.959964...
        assert same(g.ci95, (hi - lo) / 2, rel=1e-4)
