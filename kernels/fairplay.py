"""Fair-play reader metrics (docs/fairplay.md, paper 003) as numba kernels.

Many stories are processed in one call. A story ``s`` has ``L[s]`` paragraphs and
``K[s]`` suspects; every reader gives one distribution over the suspects after
each paragraph ``i = 1 … L`` (``M(0)`` is uniform and not stored). The readers'
distributions are packed CSR-style into one ``(R, Σ L·K)`` array ``probs``:
story ``s`` of reader ``r`` is ``probs[r, poff[s]:poff[s+1]]`` read as an
``L[s] × K[s]`` matrix. A row of NaN is a step where that reader has no value
(know-it-all off its checkpoints, a parse failure); an absent reader is all NaN.
Per-step outputs are packed the same way by paragraph: ``soff[s] = Σ L`` before
``s``.

Conventions the definitions leave open (docs/fairplay.md says why):

* rows are divided by their sum before use; probabilities are clipped at
  ``eps`` only inside the logarithm, ``U = −Σ M*_y log max(M_y, eps)``;
* ``U`` is defined where both ``M*(i)`` and ``M(i)`` have a value; step
  effectiveness at a recorded step is the drop since the previous recorded step
  (``U(0) = log K``), so ``Σ SEff = Δcoh`` over the recorded steps;
* the argmax set ``T_M(i)`` holds every suspect within ``tie_eps`` of the row's
  maximum; with ``ties = "split"`` (the authors' rule, the default) a hit is
  ``1/|T|`` when the culprit is in ``T``, with ``ties = "miss"`` it is 1 only for
  a culprit alone in ``T`` (a tie is a miss);
* S and C average over the steps where that reader has a value;
  ``FP = mean_i (hit_M(i) − hit_M0(i))`` over the steps where both readers have
  one (the authors' form; it equals ``C − (1 − S)`` when their steps are the same);
  the probability-weighted versions likewise.

Rows ``R >= 4``: the four of ``READERS`` first, then any further reader (e.g. more
experienced readers, one per setting) in rows 4, 5, …; every row but the
know-it-all's is compared with the gullible reader and scored against ``M*``.
"""

from __future__ import annotations

import math

import msgspec
import numba
import numpy as np

# betaincinv(a, b, q) is scipy.stats.beta.ppf(q, a, b) bit for bit (the same Boost inverse),
# without importing scipy.stats (≈ 0.8 s of CPU at each start of the view and of fairplay)
from scipy.special import betaincinv

from tension.kernels.settings import FairPlaySettings

__all__ = [
    "READERS",
    "GULLIBLE",
    "EXPERIENCED",
    "KNOW_IT_ALL",
    "ACTUAL",
    "FairPlaySettings",
    "StepArrays",
    "StoryScores",
    "batch_fairplay",
    "pooled_curves",
    "PooledCurves",
    "clopper_pearson",
]

# Reader order of the packed arrays.
READERS = ("gullible", "experienced", "know_it_all", "actual")
GULLIBLE, EXPERIENCED, KNOW_IT_ALL, ACTUAL = range(4)


class StepArrays(msgspec.Struct, frozen=True, kw_only=True):
    """Per reader and paragraph, packed by ``soff`` (shape ``(R, Σ L)``).
    NaN where undefined; ``weak`` and ``strong`` are 1.0 / 0.0 / NaN, ``hit`` is
    in [0, 1] (a split tie gives a fraction) or NaN."""

    U: np.ndarray  # uninformedness H(M*(i); M(i))
    seff: np.ndarray  # step effectiveness since the previous recorded step
    dcoh: np.ndarray  # clue effectiveness log|Y| − U
    dintel: np.ndarray  # intelligence gap Δcoh_{M*} − Δcoh_M (M1 approximated by M*)
    weak: np.ndarray
    strong: np.ndarray
    hit: np.ndarray
    p_true: np.ndarray  # M(i)_{y*}
    p_distractor: np.ndarray  # M(i)_{distractor}; NaN without a distractor


class StoryScores(msgspec.Struct, frozen=True, kw_only=True):
    """Per story (length n; per-reader arrays are ``(n, R)``)."""

    n_steps: np.ndarray  # (n, R) steps with a value
    hit_rate: np.ndarray  # (n, R) mean hit over them
    p_true_mean: np.ndarray  # (n, R) mean M(i)_{y*} (probability-weighted)
    S: np.ndarray
    C: np.ndarray  # (n, R): C_UB at KNOW_IT_ALL, C_ER, C_AR; the gullible column is 1 − S
    FP: np.ndarray  # (n, R): mean of hit_M − hit_M0 over the steps both have; NaN at GULLIBLE
    S_pw: np.ndarray
    C_pw: np.ndarray
    FP_pw: np.ndarray
    insufficient_gap: np.ndarray  # FP_UB < 1/L: 1.0 / 0.0 / NaN
    early: np.ndarray  # (n, len(early_steps)) M*(i)_{y*} > threshold: 1.0 / 0.0 / NaN
    weak_share: np.ndarray  # (n, R) share of defined-U steps with weak surprise
    strong_share: np.ndarray  # (n, R) … with strong surprise


# ----------------------------------------------------------------------------
# Kernels


@numba.njit(cache=True, nogil=True)
def _row_sum(probs, r, a, k):
    """Sum of a row, or 0 when it holds a NaN (no value) or anything non-finite."""
    s = 0.0
    for y in range(k):
        v = probs[r, a + y]
        if not math.isfinite(v):
            return 0.0
        s += v
    return s


@numba.njit(cache=True, nogil=True)
def _story_scores(s, L, tie_eps, nst, nh, npt, nu, nw, nstr, nsh, dsh, dpw, n_steps, hit_rate, ptm,
                  weak_share, strong_share, S, C, FP, S_pw, C_pw, FP_pw, insufficient):
    """Story s's scores from its readers' running totals (see `_batch`)."""
    R = nst.shape[0]
    for r in range(R):
        n_steps[s, r] = nst[r]
        hit_rate[s, r] = nh[r] / nst[r] if nst[r] > 0 else np.nan
        ptm[s, r] = npt[r] / nst[r] if nst[r] > 0 else np.nan
        weak_share[s, r] = nw[r] / nu[r] if nu[r] > 0 else np.nan
        strong_share[s, r] = nstr[r] / nu[r] if nu[r] > 0 else np.nan
        C[s, r] = hit_rate[s, r]
        C_pw[s, r] = ptm[s, r]
        # The mean of per-step differences over the steps both readers have.
        shared = r != GULLIBLE and nsh[r] > 0
        FP[s, r] = dsh[r] / nsh[r] if shared else np.nan
        FP_pw[s, r] = dpw[r] / nsh[r] if shared else np.nan
    S[s] = 1.0 - hit_rate[s, GULLIBLE]
    S_pw[s] = 1.0 - ptm[s, GULLIBLE]
    fp = FP[s, KNOW_IT_ALL]
    insufficient[s] = np.nan if math.isnan(fp) else (1.0 if fp < 1.0 / L - tie_eps else 0.0)


@numba.njit(cache=True, nogil=True)
def _early(probs, poff, k, L, ys, i, threshold):
    """Early convergence at paragraph i: M*(i)_culprit > threshold (1.0 / 0.0), NaN
    when the story is shorter or M* has no value there."""
    if i > L:
        return np.nan
    a = poff + (i - 1) * k
    ktot = _row_sum(probs, KNOW_IT_ALL, a, k)
    if not ktot > 0.0:
        return np.nan
    return 1.0 if probs[KNOW_IT_ALL, a + ys] / ktot > threshold else 0.0


@numba.njit(cache=True, nogil=True)
def _entropy(probs, a, k, ktot, eps):
    """H(M*(i)) of the know-it-all's row (0 when it has no value)."""
    h = 0.0
    if ktot > 0.0:
        for y in range(k):
            w = probs[KNOW_IT_ALL, a + y] / ktot
            if w > 0.0:
                h -= w * math.log(max(w, eps))
    return h


@numba.njit(cache=True, nogil=True)
def _hit(probs, r, a, k, tot, ys, tie_eps, split):
    """hit_M(i): 1/|T| (split) or 1 if |T| = 1 (miss) when the culprit is in the
    argmax set T (every suspect within tie_eps of the maximum), else 0."""
    mx = -1.0
    for y in range(k):
        mx = max(mx, probs[r, a + y] / tot)
    n = 0
    for y in range(k):
        if probs[r, a + y] / tot >= mx - tie_eps:
            n += 1
    if probs[r, a + ys] / tot < mx - tie_eps:
        return 0.0
    if split:
        return 1.0 / n
    return 1.0 if n == 1 else 0.0


@numba.njit(cache=True, nogil=True)
def _batch(probs, poff, soff, L, K, culprit, distractor, eps, eps_s, delta_s, tie_eps, split,
           early_steps, early_threshold,
           U, seff, dcoh, dintel, weak, strong, hit, p_true, p_dist,
           n_steps, hit_rate, ptm, S, C, FP, S_pw, C_pw, FP_pw, insufficient, early,
           weak_share, strong_share):
    R = probs.shape[0]
    n = L.shape[0]
    # Per-reader running state of one story: prev = U of the previous step (log k before
    # the first); nst = steps with a value, nh = their hits, npt = their M(i)_culprit sum;
    # nu = steps with a U, nw / nstr = weak / strong surprises among them; nsh = steps where
    # the gullible reader has a value too, dsh / dpw = the sums of hit − gullible hit and
    # M(i)_culprit − M0(i)_culprit over them.
    prev, nh, npt, dsh, dpw = np.empty(R), np.empty(R), np.empty(R), np.empty(R), np.empty(R)
    nst, nu, nw = np.empty(R, dtype=np.int64), np.empty(R, dtype=np.int64), np.empty(R, dtype=np.int64)
    nstr, nsh = np.empty(R, dtype=np.int64), np.empty(R, dtype=np.int64)
    for s in range(n):
        k = K[s]
        logk = math.log(k)
        ys = culprit[s]
        d = distractor[s]
        # NaN until set: a reader without a value at a paragraph keeps it.
        for arr in (U, seff, dcoh, dintel, weak, strong, hit, p_true, p_dist):
            arr[:, soff[s]:soff[s + 1]] = np.nan
        prev[:] = logk
        for acc in (nst, nu, nw, nstr, nsh):
            acc[:] = 0
        for acc in (nh, npt, dsh, dpw):
            acc[:] = 0.0
        for i in range(L[s]):
            a = poff[s] + i * k
            o = soff[s] + i
            # M*(i) is shared by every reader's U at this paragraph.
            ktot = _row_sum(probs, KNOW_IT_ALL, a, k)
            hstar = _entropy(probs, a, k, ktot, eps)
            for r in range(R):
                tot = _row_sum(probs, r, a, k)
                if not tot > 0.0:
                    continue
                pt = probs[r, a + ys] / tot
                h = _hit(probs, r, a, k, tot, ys, tie_eps, split)
                hit[r, o] = h
                p_true[r, o] = pt
                if d >= 0:
                    p_dist[r, o] = probs[r, a + d] / tot
                nst[r] += 1
                nh[r] += h
                npt[r] += pt
                hg = hit[GULLIBLE, o]  # the gullible reader comes first (r = 0)
                if r != GULLIBLE and not math.isnan(hg):
                    nsh[r] += 1
                    dsh[r] += h - hg
                    dpw[r] += pt - p_true[GULLIBLE, o]
                if not ktot > 0.0:
                    continue
                u = 0.0
                for y in range(k):
                    w = probs[KNOW_IT_ALL, a + y] / ktot
                    if w > 0.0:
                        u -= w * math.log(max(probs[r, a + y] / tot, eps))
                U[r, o] = u
                seff[r, o] = prev[r] - u
                prev[r] = u
                dcoh[r, o] = logk - u
                dintel[r, o] = u - hstar
                wk = u >= logk - eps_s
                sg = u >= logk + delta_s
                weak[r, o] = 1.0 if wk else 0.0
                strong[r, o] = 1.0 if sg else 0.0
                nu[r] += 1
                nw[r] += 1 if wk else 0
                nstr[r] += 1 if sg else 0
        _story_scores(s, L[s], tie_eps, nst, nh, npt, nu, nw, nstr, nsh, dsh, dpw, n_steps, hit_rate, ptm,
                      weak_share, strong_share, S, C, FP, S_pw, C_pw, FP_pw, insufficient)
        for e in range(early_steps.shape[0]):
            early[s, e] = _early(probs, poff[s], k, L[s], ys, early_steps[e], early_threshold)


def _check_layout(probs, poff, soff, L, K, culprit, distractor):
    n = len(L)
    if probs.ndim != 2 or probs.shape[0] < len(READERS):
        raise ValueError(f"probs: expected shape (R >= {len(READERS)}, N), got {probs.shape}")
    for name, arr, m in (("poff", poff, n + 1), ("soff", soff, n + 1), ("K", K, n), ("culprit", culprit, n),
                         ("distractor", distractor, n)):
        if arr.shape != (m,):
            raise ValueError(f"{name}: expected {m} values, got shape {arr.shape}")
    if n and (np.any(L < 1) or np.any(K < 2)):
        raise ValueError("every story needs L >= 1 paragraphs and K >= 2 suspects")
    if poff[0] != 0 or soff[0] != 0 or np.any(np.diff(poff) != L * K) or np.any(np.diff(soff) != L):
        raise ValueError("offsets do not match L and K (poff steps L·K, soff steps L, both from 0)")
    if poff[-1] != probs.shape[1]:
        raise ValueError(f"probs has {probs.shape[1]} columns, offsets need {poff[-1]}")
    if np.any((culprit < 0) | (culprit >= K)) or np.any((distractor < -1) | (distractor >= K)):
        raise ValueError("culprit/distractor index out of range of the story's suspects")


def batch_fairplay(probs, L, K, culprit, distractor, settings: FairPlaySettings = FairPlaySettings()
                   ) -> tuple[StepArrays, StoryScores, np.ndarray]:
    """Every story's per-step quantities and scores (see the module docstring).
    ``distractor`` is −1 for a story without one. Returns (steps, scores, soff)."""
    probs = np.ascontiguousarray(probs, dtype=np.float64)
    L = np.ascontiguousarray(L, dtype=np.int64)
    K = np.ascontiguousarray(K, dtype=np.int64)
    culprit = np.ascontiguousarray(culprit, dtype=np.int64)
    distractor = np.ascontiguousarray(distractor, dtype=np.int64)
    n = len(L)
    poff = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(L * K, out=poff[1:])
    soff = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(L, out=soff[1:])
    _check_layout(probs, poff, soff, L, K, culprit, distractor)
    R = probs.shape[0]
    T = int(soff[-1])
    step = {name: np.empty((R, T)) for name in StepArrays.__struct_fields__}
    early_steps = np.asarray(settings.early_steps, dtype=np.int64)
    per = {name: np.empty((n, R)) for name in ("n_steps", "hit_rate", "p_true_mean", "C", "FP", "C_pw", "FP_pw",
                                                "weak_share", "strong_share")}
    flat = {name: np.empty(n) for name in ("S", "S_pw", "insufficient_gap")}
    early = np.empty((n, len(early_steps)))
    _batch(probs, poff, soff, L, K, culprit, distractor, float(settings.eps), float(settings.eps_surprise),
           float(settings.delta_surprise), float(settings.tie_eps), settings.ties == "split", early_steps,
           float(settings.early_threshold),
           step["U"], step["seff"], step["dcoh"], step["dintel"], step["weak"], step["strong"], step["hit"],
           step["p_true"], step["p_distractor"],
           per["n_steps"], per["hit_rate"], per["p_true_mean"], flat["S"], per["C"], per["FP"], flat["S_pw"],
           per["C_pw"], per["FP_pw"], flat["insufficient_gap"], early, per["weak_share"], per["strong_share"])
    per["n_steps"] = per["n_steps"].astype(np.int64)
    scores = StoryScores(early=early, **per, **flat)
    return StepArrays(**step), scores, soff


# ----------------------------------------------------------------------------
# Pooled reading curves


class PooledCurves(msgspec.Struct, frozen=True, kw_only=True):
    """Per reader (R) and relative-position bin (B). Bin b holds the steps i of
    every story with ``ceil(i·B/L) = b + 1``, i.e. ``i/L`` in ``(b/B, (b+1)/B]``."""

    n: np.ndarray  # (R, B) steps pooled
    hits: np.ndarray  # (R, B) hits among them (float: a split tie adds a fraction)
    hit_rate: np.ndarray
    cp_lo: np.ndarray  # Clopper–Pearson interval of hit_rate
    cp_hi: np.ndarray
    p_true_mean: np.ndarray  # probability-weighted: mean M(i)_{y*}
    p_distractor_mean: np.ndarray  # mean M(i)_{distractor} over steps whose story has one
    n_distractor: np.ndarray
    # Group means of the information quantities (their expectation over stories,
    # docs/fairplay.md) over the steps with a U.
    n_U: np.ndarray
    U_mean: np.ndarray
    seff_mean: np.ndarray
    dcoh_mean: np.ndarray
    dintel_mean: np.ndarray


@numba.njit(cache=True, nogil=True)
def _pool(hit, p_true, p_dist, U, seff, dcoh, dintel, soff, L, stories, B, n, hits, pt, pd, nd, nu, su, ss, sc,
          si):
    R = hit.shape[0]
    for s in stories:
        for i in range(1, L[s] + 1):
            b = (i * B + L[s] - 1) // L[s] - 1
            o = soff[s] + i - 1
            for r in range(R):
                h = hit[r, o]
                if math.isnan(h):
                    continue
                n[r, b] += 1
                hits[r, b] += h
                pt[r, b] += p_true[r, o]
                v = p_dist[r, o]
                if not math.isnan(v):
                    nd[r, b] += 1
                    pd[r, b] += v
                u = U[r, o]
                if not math.isnan(u):
                    nu[r, b] += 1
                    su[r, b] += u
                    ss[r, b] += seff[r, o]
                    sc[r, b] += dcoh[r, o]
                    si[r, b] += dintel[r, o]


def clopper_pearson(k, n, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Exact binomial interval (beta quantiles); NaN where n = 0. A fractional
    ``k`` (split ties) enters the same beta quantiles, which are continuous in k."""
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    a = (1.0 - level) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(k > 0, betaincinv(np.maximum(k, 1e-300), n - k + 1, a), 0.0)
        hi = np.where(k < n, betaincinv(k + 1, np.maximum(n - k, 1e-300), 1.0 - a), 1.0)
    empty = n <= 0
    return np.where(empty, np.nan, lo), np.where(empty, np.nan, hi)


def pooled_curves(steps: StepArrays, soff, L, stories=None,
                  settings: FairPlaySettings = FairPlaySettings()) -> PooledCurves:
    """Hits and probabilities pooled across ``stories`` (indices; default all)
    at each relative position, with Clopper–Pearson intervals."""
    L = np.ascontiguousarray(L, dtype=np.int64)
    soff = np.ascontiguousarray(soff, dtype=np.int64)
    idx = np.arange(len(L), dtype=np.int64) if stories is None else np.asarray(stories, dtype=np.int64)
    R = steps.hit.shape[0]
    B = int(settings.bins)
    n, hits, pt, pd, nd, nu, su, ss, sc, si = (np.zeros((R, B)) for _ in range(10))
    _pool(steps.hit, steps.p_true, steps.p_distractor, steps.U, steps.seff, steps.dcoh, steps.dintel, soff, L, idx,
          B, n, hits, pt, pd, nd, nu, su, ss, sc, si)
    lo, hi = clopper_pearson(hits, n, settings.confidence)
    with np.errstate(invalid="ignore", divide="ignore"):
        return PooledCurves(n=n.astype(np.int64), hits=hits, hit_rate=hits / n, cp_lo=lo,
                            cp_hi=hi, p_true_mean=pt / n, p_distractor_mean=pd / nd,
                            n_distractor=nd.astype(np.int64), n_U=nu.astype(np.int64), U_mean=su / nu,
                            seff_mean=ss / nu, dcoh_mean=sc / nu, dintel_mean=si / nu)
