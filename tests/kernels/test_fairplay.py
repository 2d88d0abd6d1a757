"""Fair-play kernels (docs/fairplay.md): tension.kernels.fairplay against
hand-worked cases and against the plain-Python reference in
``tests/fairplay_reference.py`` on random distributions."""

from __future__ import annotations

import math

import fairplay_reference as ref  # tests/ is on sys.path (pyproject's pythonpath)
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tension.kernels import fairplay as fp
from tension.kernels.fairplay import FairPlaySettings

HYP = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = fp.READERS
LOG4 = math.log(4)


def run(stories, s: FairPlaySettings = FairPlaySettings()):
    """Pack reference-style story dicts and run the kernel."""
    L = np.array([x["L"] for x in stories], dtype=np.int64)
    K = np.array([x["K"] for x in stories], dtype=np.int64)
    probs = np.full((4, int((L * K).sum())), np.nan)
    a = 0
    for x in stories:
        for r, name in enumerate(NAMES):
            rows = x["readers"].get(name)
            for i in range(x["L"]):
                if rows is not None and rows[i] is not None:
                    probs[r, a + i * x["K"]: a + (i + 1) * x["K"]] = rows[i]
        a += x["L"] * x["K"]
    culprit = np.array([x["culprit"] for x in stories], dtype=np.int64)
    distractor = np.array([-1 if x["distractor"] is None else x["distractor"] for x in stories], dtype=np.int64)
    return fp.batch_fairplay(probs, L, K, culprit, distractor, s)


def story(readers, K=4, culprit=1, distractor=2, L=None):
    L = L if L is not None else len(next(iter(readers.values())))
    return {"K": K, "L": L, "culprit": culprit, "distractor": distractor, "readers": readers}


def col(steps, name, reader, s=0, soff=None):
    arr = getattr(steps, name)[NAMES.index(reader)]
    return arr if soff is None else arr[soff[s]:soff[s + 1]]


def same(a, b, tol=1e-12):
    if a is None:
        return math.isnan(b)
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


ONE_HOT = [0.0, 1.0, 0.0, 0.0]  # the culprit (index 1) for sure
UNIFORM = [0.25] * 4


# ===========================================================================
# (a) hand-worked cases


class TestUninformedness:
    def test_uniform_reader_is_log_K_whatever_M_star_says(self):
        # −Σ M*_y log(1/4) = log 4 · Σ M*_y = log 4, for any M*.
        star = [[0.1, 0.6, 0.2, 0.1], ONE_HOT, [0.0, 0.0, 0.5, 0.5]]
        steps, sc, _ = run([story({"gullible": [UNIFORM] * 3, "know_it_all": star})])
        assert np.allclose(col(steps, "U", "gullible"), LOG4, rtol=0, atol=1e-12)
        assert np.allclose(col(steps, "dcoh", "gullible"), 0.0, atol=1e-12)
        assert np.allclose(col(steps, "seff", "gullible"), 0.0, atol=1e-12)
        # weak surprise holds (U >= log4 − 0.1), strong does not (U < log4 + 0.1)
        assert list(col(steps, "weak", "gullible")) == [1.0, 1.0, 1.0]
        assert list(col(steps, "strong", "gullible")) == [0.0, 0.0, 0.0]
        # all four tie at 0.25: the hit is split four ways, so S = 3/4 (1 with --ties miss)
        assert sc.S[0] == 0.75 and sc.S_pw[0] == pytest.approx(0.75)
        _, sc, _ = run([story({"gullible": [UNIFORM] * 3})], FairPlaySettings(ties="miss"))
        assert sc.S[0] == 1.0

    def test_perfect_reader(self):
        steps, sc, _ = run([story({"gullible": [ONE_HOT] * 3, "know_it_all": [ONE_HOT] * 3})])
        assert np.allclose(col(steps, "U", "gullible"), 0.0, atol=1e-15)
        assert np.allclose(col(steps, "dcoh", "gullible"), LOG4)
        # the whole drop from log 4 happens at the first step
        assert col(steps, "seff", "gullible") == pytest.approx([LOG4, 0.0, 0.0])
        assert np.allclose(col(steps, "dintel", "gullible"), 0.0, atol=1e-15)
        assert sc.S[0] == 0.0 and sc.C[0, fp.KNOW_IT_ALL] == 1.0
        assert sc.FP[0, fp.KNOW_IT_ALL] == 0.0  # C_UB − (1 − S) = 1 − 1
        assert sc.insufficient_gap[0] == 1.0  # 0 < 1/3

    def test_misled_reader_is_worse_than_uniform(self):
        misled = [0.02, 0.02, 0.94, 0.02]  # sure of the distractor
        steps, sc, _ = run([story({"gullible": [misled] * 2, "know_it_all": [ONE_HOT] * 2})])
        u = col(steps, "U", "gullible")
        assert u == pytest.approx([-math.log(0.02)] * 2)
        assert (u > LOG4).all()
        assert list(col(steps, "strong", "gullible")) == [1.0, 1.0]
        assert col(steps, "dintel", "gullible") == pytest.approx([-math.log(0.02)] * 2)  # H(M*) = 0
        assert col(steps, "p_distractor", "gullible") == pytest.approx([0.94, 0.94])
        assert sc.S[0] == 1.0

    def test_eps_clips_a_zero_probability(self):
        zero = [0.5, 0.0, 0.5, 0.0]
        steps, _, _ = run([story({"gullible": [zero], "know_it_all": [ONE_HOT]})])
        assert col(steps, "U", "gullible")[0] == pytest.approx(-math.log(1e-6))
        steps, _, _ = run([story({"gullible": [zero], "know_it_all": [ONE_HOT]})], FairPlaySettings(eps=1e-3))
        assert col(steps, "U", "gullible")[0] == pytest.approx(-math.log(1e-3))

    def test_rows_are_normalised(self):
        steps, sc, _ = run([story({"gullible": [[1, 3, 0, 0]], "know_it_all": [[0, 2, 0, 0]]})])
        assert col(steps, "p_true", "gullible")[0] == pytest.approx(0.75)
        assert col(steps, "U", "gullible")[0] == pytest.approx(-math.log(0.75))


class TestHits:
    # the culprit is suspect 1; (split, miss) hits
    @pytest.mark.parametrize("row, split, miss", [
        ([0.1, 0.4, 0.4, 0.1], 0.5, 0.0),  # 2-way tie with the culprit in it
        ([0.1, 0.4 + 1e-13, 0.4, 0.1], 0.5, 0.0),  # within 1e-12 counts as a tie
        ([0.1, 0.4 + 1e-9, 0.4, 0.1], 1.0, 1.0),
        ([0.0, 1.0, 0.0, 0.0], 1.0, 1.0),
        ([0.3, 0.3, 0.3, 0.1], 1 / 3, 0.0),  # 3-way tie, culprit in
        ([0.25, 0.25, 0.25, 0.25], 0.25, 0.0),  # 4-way tie (the authors' all-zero row too)
        ([0.3, 0.2, 0.3, 0.2], 0.0, 0.0),  # 2-way tie of others, culprit out
        ([0.3, 0.1, 0.3, 0.3], 0.0, 0.0),  # 3-way tie of others, culprit out
        ([0.0, 0.2, 0.8, 0.0], 0.0, 0.0),
    ])
    def test_ties_split_or_miss(self, row, split, miss):
        steps, _, _ = run([story({"gullible": [row]})])
        assert col(steps, "hit", "gullible")[0] == pytest.approx(split, abs=1e-15)
        steps, _, _ = run([story({"gullible": [row]})], FairPlaySettings(ties="miss"))
        assert col(steps, "hit", "gullible")[0] == miss

    def test_split_ties_enter_S_C_FP(self):
        # gullible: a 4-way tie then a 2-way tie with the culprit, then a hit: S = 1 − (1/4 + 1/2 + 1)/3
        g = [UNIFORM, [0.1, 0.4, 0.4, 0.1], ONE_HOT]
        k = [[0.0, 0.4, 0.4, 0.2], ONE_HOT, ONE_HOT]  # 1/2, 1, 1
        _, sc, _ = run([story({"gullible": g, "know_it_all": k})])
        assert sc.S[0] == pytest.approx(1 - 1.75 / 3)
        assert sc.C[0, fp.KNOW_IT_ALL] == pytest.approx(2.5 / 3)
        assert sc.FP[0, fp.KNOW_IT_ALL] == pytest.approx(0.75 / 3)
        _, sc, _ = run([story({"gullible": g, "know_it_all": k})], FairPlaySettings(ties="miss"))
        assert sc.S[0] == pytest.approx(2 / 3) and sc.C[0, fp.KNOW_IT_ALL] == pytest.approx(2 / 3)


class TestScores:
    def test_S_C_FP_by_hand(self):
        # gullible hits at 4 and 1/4 at 1 (a 4-way tie): S = 1 − 1.25/4; know-it-all
        # 1/4, 1, 1, 1: C_UB = 3.25/4, FP_UB = 2/4 >= 1/L = 1/4.
        g = [UNIFORM, [0.1, 0.2, 0.6, 0.1], [0.1, 0.2, 0.6, 0.1], ONE_HOT]
        k = [UNIFORM, [0.1, 0.6, 0.2, 0.1], ONE_HOT, ONE_HOT]
        e = [[0.1, 0.5, 0.3, 0.1], UNIFORM, ONE_HOT, ONE_HOT]  # hits 1, 3, 4 -> C_ER 3/4
        _, sc, _ = run([story({"gullible": g, "know_it_all": k, "experienced": e})])
        assert sc.S[0] == 1 - 1.25 / 4
        assert sc.C[0, fp.KNOW_IT_ALL] == 3.25 / 4 and sc.FP[0, fp.KNOW_IT_ALL] == 0.5
        # experienced: 1, 1/4, 1, 1
        assert sc.C[0, fp.EXPERIENCED] == 3.25 / 4 and sc.FP[0, fp.EXPERIENCED] == 0.5
        assert math.isnan(sc.C[0, fp.ACTUAL]) and math.isnan(sc.FP[0, fp.ACTUAL])
        assert sc.insufficient_gap[0] == 0.0
        # probability-weighted: S_pw = 1 − mean(.25, .2, .2, 1) = 0.5875,
        # C_UB_pw = mean(.25, .6, 1, 1) = 0.7125, FP_UB_pw = 0.7125 − 0.4125 = 0.3
        assert sc.S_pw[0] == pytest.approx(0.5875)
        assert sc.C_pw[0, fp.KNOW_IT_ALL] == pytest.approx(0.7125)
        assert sc.FP_pw[0, fp.KNOW_IT_ALL] == pytest.approx(0.3)
        # early convergence: M*(1)_y* = .25 (no), M*(3) = 1 (yes), no paragraph 5
        assert sc.early[0, 0] == 0.0 and sc.early[0, 1] == 1.0 and math.isnan(sc.early[0, 2])

    def test_insufficient_gap_boundary(self):
        # L = 4: FP_UB = 1/4 exactly is not < 1/L (the authors' L·FP <= 1 would say yes)
        misled = [0.1, 0.1, 0.7, 0.1]
        g = [misled, misled, misled, ONE_HOT]
        k = [misled, misled, ONE_HOT, ONE_HOT]
        _, sc, _ = run([story({"gullible": g, "know_it_all": k})])
        assert sc.FP[0, fp.KNOW_IT_ALL] == pytest.approx(0.25)
        assert sc.insufficient_gap[0] == 0.0
        _, sc, _ = run([story({"gullible": g, "know_it_all": [misled, misled, misled, ONE_HOT]})])
        assert sc.insufficient_gap[0] == 1.0

    def test_null_steps_are_left_out_of_averages(self):
        # know-it-all at checkpoints 2 and 4 only; gullible misses paragraph 3 (a parse failure)
        g = [UNIFORM, [0.1, 0.7, 0.1, 0.1], None, ONE_HOT]
        k = [None, ONE_HOT, None, ONE_HOT]
        steps, sc, soff = run([story({"gullible": g, "know_it_all": k})])
        assert sc.n_steps[0, fp.GULLIBLE] == 3 and sc.n_steps[0, fp.KNOW_IT_ALL] == 2
        assert sc.S[0] == pytest.approx(1 - 2.25 / 3)  # 1/4 at 1, hits at 2 and 4: 3 recorded steps
        assert sc.C[0, fp.KNOW_IT_ALL] == 1.0
        u = col(steps, "U", "gullible")
        assert math.isnan(u[0]) and math.isnan(u[2])  # U needs both M* and M
        assert u[1] == pytest.approx(-math.log(0.7)) and u[3] == pytest.approx(0.0, abs=1e-15)
        # SEff at a recorded step is the drop since the previous recorded one
        # (log 4 before the first), so the SEffs add up to Δcoh.
        seff = col(steps, "seff", "gullible")
        assert seff[1] == pytest.approx(LOG4 + math.log(0.7)) and seff[3] == pytest.approx(-math.log(0.7))
        assert np.nansum(seff) == pytest.approx(col(steps, "dcoh", "gullible")[3])
        assert math.isnan(col(steps, "hit", "gullible")[2])
        # FP_UB averages hit_M* − hit_M0 over the paragraphs both have (2 and 4, hits
        # for both): 0, not C_UB − (1 − S) over each reader's own paragraphs
        assert sc.FP[0, fp.KNOW_IT_ALL] == 0.0 and math.isnan(sc.FP[0, fp.GULLIBLE])

    def test_one_paragraph(self):
        _, sc, _ = run([story({"gullible": [[0.2, 0.5, 0.2, 0.1]], "know_it_all": [ONE_HOT]})])
        assert sc.S[0] == 0.0 and sc.C[0, fp.KNOW_IT_ALL] == 1.0 and sc.FP[0, fp.KNOW_IT_ALL] == 0.0
        assert sc.insufficient_gap[0] == 1.0  # 0 < 1/1
        assert sc.early[0, 0] == 1.0 and np.isnan(sc.early[0, 1:]).all()

    def test_absent_readers_give_nan_not_zero(self):
        _, sc, _ = run([story({"know_it_all": [ONE_HOT, ONE_HOT]})])
        assert math.isnan(sc.S[0]) and math.isnan(sc.FP[0, fp.KNOW_IT_ALL])
        assert math.isnan(sc.insufficient_gap[0])
        assert sc.C[0, fp.KNOW_IT_ALL] == 1.0
        assert sc.n_steps[0].tolist() == [0, 0, 2, 0]

    def test_no_distractor(self):
        steps, _, _ = run([story({"gullible": [UNIFORM]}, distractor=None)])
        assert math.isnan(col(steps, "p_distractor", "gullible")[0])


class TestLayout:
    def test_empty_batch(self):
        steps, sc, soff = run([])
        assert steps.U.shape == (4, 0) and sc.S.shape == (0,) and soff.tolist() == [0]

    @pytest.mark.parametrize("bad", [
        dict(K=[1]),  # one suspect
        dict(L=[0]),
        dict(culprit=[4]),
        dict(distractor=[-2]),
    ])
    def test_bad_layout_is_rejected(self, bad):
        args = dict(L=[1], K=[4], culprit=[1], distractor=[-1])
        args.update(bad)
        L = np.array(args["L"])
        K = np.array(args["K"])
        probs = np.full((4, int((L * K).sum())), 0.25)
        with pytest.raises(ValueError):
            fp.batch_fairplay(probs, L, K, np.array(args["culprit"]), np.array(args["distractor"]))

    def test_probs_of_the_wrong_width(self):
        with pytest.raises(ValueError, match="columns"):
            fp.batch_fairplay(np.zeros((4, 5)), np.array([1]), np.array([4]), np.array([0]), np.array([-1]))

    @pytest.mark.parametrize("kw", [dict(eps=0.0), dict(eps=float("nan")), dict(bins=0), dict(early_steps=(0,)),
                                    dict(confidence=1.0), dict(eps_surprise=-1.0)])
    def test_bad_settings(self, kw):
        with pytest.raises(ValueError):
            FairPlaySettings(**kw)


# ===========================================================================
# (b) against the plain-Python reference on random distributions


@st.composite
def stories(draw):
    K = draw(st.integers(2, 6))
    L = draw(st.integers(1, 9))
    culprit = draw(st.integers(0, K - 1))
    distractor = draw(st.one_of(st.none(), st.integers(0, K - 1).filter(lambda d: d != culprit)))
    # Rounded values make exact ties and zeros common; all-zero rows are skipped.
    value = st.one_of(st.just(0.0), st.sampled_from([0.25, 0.5, 1.0]), st.floats(0.0, 1.0))
    row = st.lists(value, min_size=K, max_size=K).filter(lambda r: sum(r) > 0)
    readers = {}
    for name in NAMES:
        if draw(st.booleans()):
            readers[name] = draw(st.lists(st.one_of(st.none(), row, row), min_size=L, max_size=L))
    return {"K": K, "L": L, "culprit": culprit, "distractor": distractor, "readers": readers}


def assert_story(steps, sc, soff, j, x, settings):
    exp = ref.story_scores(x, settings.early_steps, settings.eps, settings.eps_surprise, settings.delta_surprise,
                           settings.ties)
    for r, name in enumerate(NAMES):
        for i, e in enumerate(exp["steps"][name]):
            for field in ("U", "seff", "dcoh", "dintel", "weak", "strong", "hit", "p_true", "p_distractor"):
                got = getattr(steps, field)[r, soff[j] + i]
                assert same(e[field], got, 1e-9), f"story {j} {name} step {i + 1} {field}: {got} vs {e[field]}"
        assert sc.n_steps[j, r] == exp["n_steps"][name]
    pairs = [("S", sc.S[j]), ("S_pw", sc.S_pw[j]), ("insufficient_gap", sc.insufficient_gap[j])]
    for r, tag in ((fp.KNOW_IT_ALL, "UB"), (fp.EXPERIENCED, "ER"), (fp.ACTUAL, "AR")):
        pairs += [(f"C_{tag}", sc.C[j, r]), (f"FP_{tag}", sc.FP[j, r]),
                  (f"C_{tag}_pw", sc.C_pw[j, r]), (f"FP_{tag}_pw", sc.FP_pw[j, r])]
    pairs += [("weak_share", sc.weak_share[j, fp.GULLIBLE]), ("strong_share", sc.strong_share[j, fp.GULLIBLE])]
    for name, got in pairs:
        assert same(exp[name], got, 1e-9), f"story {j} {name}: {got} vs {exp[name]}"
    for e, got in zip(exp["early"], sc.early[j]):
        assert same(e, got)


@settings(max_examples=100, **HYP)
@given(st.lists(stories(), min_size=1, max_size=5), st.sampled_from([1e-6, 1e-3]),
       st.sampled_from([0.1, 0.3]), st.sampled_from(["split", "miss"]))
def test_batch_matches_reference(batch, eps, surprise, ties):
    s = FairPlaySettings(eps=eps, eps_surprise=surprise, delta_surprise=surprise / 2, ties=ties)
    steps, sc, soff = run(batch, s)
    for j, x in enumerate(batch):
        assert_story(steps, sc, soff, j, x, s)


@settings(max_examples=40, **HYP)
@given(st.lists(stories(), min_size=1, max_size=6), st.integers(1, 12), st.sampled_from(["split", "miss"]))
def test_pooled_curves_match_reference(batch, bins, ties):
    s = FairPlaySettings(bins=bins, ties=ties)
    steps, _, soff = run(batch, s)
    pc = fp.pooled_curves(steps, soff, [x["L"] for x in batch], settings=s)
    table = ref.pooled(batch, bins, ties)
    for r, name in enumerate(NAMES):
        for b in range(bins):
            n, hits, psum, nu, su, ss, sc, si = table[name][b]
            assert pc.n[r, b] == n and pc.hits[r, b] == pytest.approx(hits, abs=1e-9) and pc.n_U[r, b] == nu
            if nu:
                for got, total in ((pc.U_mean, su), (pc.seff_mean, ss), (pc.dcoh_mean, sc), (pc.dintel_mean, si)):
                    assert got[r, b] == pytest.approx(total / nu, rel=1e-9, abs=1e-12)
            else:
                assert math.isnan(pc.U_mean[r, b])
            if n:
                assert pc.hit_rate[r, b] == pytest.approx(hits / n)
                assert pc.p_true_mean[r, b] == pytest.approx(psum / n)
                lo, hi = cp_reference(hits, n)
                assert pc.cp_lo[r, b] == pytest.approx(lo, abs=1e-9)
                assert pc.cp_hi[r, b] == pytest.approx(hi, abs=1e-9)
            else:
                assert math.isnan(pc.hit_rate[r, b]) and math.isnan(pc.cp_lo[r, b])


def cp_reference(k, n):
    """The exact interval: scipy's binomial test for a whole count; for a fractional
    one (split ties) the same beta quantiles, written out."""
    from scipy.stats import beta as beta_dist  # scipy.stats at use: ≈ 0.7 s of every worker's collection
    from scipy.stats import binomtest

    if abs(k - round(k)) < 1e-9:
        ci = binomtest(round(k), n).proportion_ci(confidence_level=0.95, method="exact")
        return ci.low, ci.high
    return beta_dist.ppf(0.025, k, n - k + 1), beta_dist.ppf(0.975, k + 1, n - k)


def test_fractional_hits_give_an_interval_between_the_whole_counts():
    lo, hi = fp.clopper_pearson([2.0, 2.5, 3.0], [10, 10, 10])
    assert lo[0] < lo[1] < lo[2] and hi[0] < hi[1] < hi[2]


def test_pooled_subset_and_relative_positions():
    # L = 2 and L = 4 with 4 bins: step 1 of the short story pools with step 2 of the long one.
    a = story({"gullible": [ONE_HOT, UNIFORM]})
    b = story({"gullible": [UNIFORM, ONE_HOT, ONE_HOT, UNIFORM]})
    steps, _, soff = run([a, b])
    pc = fp.pooled_curves(steps, soff, [2, 4], settings=FairPlaySettings(bins=4))
    g = fp.GULLIBLE
    assert pc.n[g].tolist() == [1, 2, 1, 2] and pc.hits[g].tolist() == [0.25, 2, 1, 0.5]
    only_b = fp.pooled_curves(steps, soff, [2, 4], stories=[1], settings=FairPlaySettings(bins=4))
    assert only_b.n[g].tolist() == [1, 1, 1, 1] and only_b.hits[g].tolist() == [0.25, 1, 1, 0.25]


def test_clopper_pearson_edges():
    from scipy.stats import binomtest

    lo, hi = fp.clopper_pearson([0, 10, 3, 0], [10, 10, 10, 0])
    assert lo[0] == 0.0 and hi[1] == 1.0
    assert lo[1] == pytest.approx(0.025 ** (1 / 10)) and hi[0] == pytest.approx(1 - 0.025 ** (1 / 10))
    ci = binomtest(3, 10).proportion_ci(method="exact")
    assert (lo[2], hi[2]) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert math.isnan(lo[3]) and math.isnan(hi[3])


def test_clopper_pearson_is_scipy_stats_beta_ppf_bit_for_bit():
    """The kernel takes the beta quantiles from scipy.special (scipy.stats costs ≈ 0.8 s of
    CPU to import at every start): the same numbers as beta.ppf, to the last bit, on whole
    and fractional counts, so the fair-play figures that match the authors' do not move."""
    from scipy.stats import beta as beta_dist

    rng = np.random.default_rng(7)
    n = rng.integers(1, 3000, 20000).astype(np.float64)
    k = rng.random(20000) * n
    k[::3] = np.round(k[::3])
    k[::11] = 0.0
    k[::13] = n[::13]
    lo, hi = fp.clopper_pearson(k, n)
    a = (1.0 - 0.95) / 2.0  # 0.025000000000000022, as the kernel has it from its level
    ref_lo = np.where(k > 0, beta_dist.ppf(a, np.maximum(k, 1e-300), n - k + 1), 0.0)
    ref_hi = np.where(k < n, beta_dist.ppf(1.0 - a, k + 1, np.maximum(n - k, 1e-300)), 1.0)
    assert np.array_equal(lo, ref_lo) and np.array_equal(hi, ref_hi)
