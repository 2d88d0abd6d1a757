"""The judge against people (issue 60; docs/metrics.md 1.10): pure functions on a
confusion table and on the labelled items of an audit, no file and no LLM.

The event of interest is the no-rate's: an ending that does **not** match what
happens. A table's cells are named by two letters, the judge's answer first and
the people's second (`ny`: the judge said no, people said it matches):

    sensitivity  = nn / (nn + yn)   of the endings people say do not match, the share the judge calls no
    specificity  = yy / (ny + yy)   of the endings people say match, the share the judge calls a match
    J (Youden)   = sensitivity + specificity − 1

An audit's sample is drawn stratified by the judge's answer (core/pipelines/audit_sample.py:
within each answer every verdict of the run has the same chance), so each answer's
labelled items stand for that answer's share of the run. With `a` the run's share of
judge-no verdicts, q1 the share people call no among labelled judge-no items and q0
among judge-yes items, the run's table in proportions is
    nn = a·q1, ny = a·(1 − q1), yn = (1 − a)·q0, yy = (1 − a)·(1 − q0),
which is the table of the labelled items weighted by N_answer / n_answer (an unweighted
table would count the rarer answer as often as the common one). An item labelled by
several people counts once: its `person_no` is the share of its decisive labels
(matches / does-not-match; can't-tell is left out) that say it does not match.

Agreement, κ and J are functions θ(q1, q0) of the two independent shares at the run's constant
`a`, each rising with q1 and falling with q0 (κ = 2a(1 − a)(q1 − q0) / (a(1 − P) + (1 − a)P),
J = a(1 − a)(q1 − q0) / (P(1 − P)), P = a·q1 + (1 − a)·q0). Each gets MOVER's interval (Zou &
Donner; Newcombe's for a sum) over the shares' Wilson intervals (`share_intervals`): θ's distance
to θ at each share's far Wilson end, the other held, in quadrature. At 0 disagreements it is
[θ − d, θ], d > 0, where the bootstrap said [1, 1] (bench/audit_intervals.py chose it over the
bootstrap, the delta method, Kish's n and Fleiss–Cohen–Everitt; docs/metrics.md 1.10).
Sensitivity and specificity get an interval of the same Wilson ends: each is a monotone map
of a ratio of two independent shares of the stratified sample (the run's odds of judge no,
a / (1 − a), are a constant),

    sens / (1 − sens) = a/(1 − a) · q1 / q0           spec / (1 − spec) = (1 − a)/a · (1 − q0) / (1 − q1)

so the ratio gets MOVER-R's interval (Zou & Donner 2008) from the Wilson intervals of its two
shares (Brown, Cai & DasGupta's modification near 0 and n: `wilson`), each at its own judge
answer's labelled items (`ratio_interval`): the weights are constant within an answer, so no
effective n is estimated (docs/metrics.md 1.10 has the study). The no-rates corrected with the
judge's sensitivity and specificity (Rogan–Gladen) are core/reports/judge_correction.py's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import msgspec
import numpy as np

from tension.kernels.stopping import wilson_half_width

__all__ = ["LABELS", "MATCHES", "NO_MATCH", "CANT_TELL", "Confusion", "agreement", "kappa", "sensitivity",
           "specificity", "youden", "Interval", "JudgeAgreement", "judge_agreement", "table_of", "PeopleAgreement",
           "people_agreement", "WARN_KAPPA", "WARN_YOUDEN", "agreement_warnings", "N_RESAMPLES", "LEVEL", "Z95",
           "wilson", "ratio_interval", "share_stats", "share_intervals", "percentile_interval",
           "resampled_means"]

MATCHES, NO_MATCH, CANT_TELL = LABELS = ("matches", "does-not-match", "cant-tell")
N_RESAMPLES = 2000
Z95 = 1.959963984540054
LEVEL = 0.95
# Below these the corrected numbers cannot mean what the paper's do (docs/metrics.md 1.10):
# the correction divides by J, so its variance grows as 1/J²: at J = 0.5 a no-rate's
# interval is already twice as wide as uncorrected, and as J → 0 it has no bound. κ < 0.4
# is "fair" agreement or worse on the usual reading (Landis & Koch 1977): the judge and
# people then disagree on what a match is, which no constant error rate describes.
WARN_YOUDEN = 0.5
WARN_KAPPA = 0.4


class Confusion(msgspec.Struct, frozen=True):
    """Judge × people, in counts or weights (the judge's answer first: `ny` is judge no,
    people yes). No is the no-rate's event: the ending does not match."""

    nn: float
    ny: float
    yn: float
    yy: float

    @property
    def total(self) -> float:
        return self.nn + self.ny + self.yn + self.yy


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


def agreement(t: Confusion) -> float:
    """The share of items on which judge and people agree (NaN for an empty table)."""
    return _ratio(t.nn + t.yy, t.total)


def kappa(t: Confusion) -> float:
    """Cohen's κ = (p_o − p_e) / (1 − p_e), with p_e from the margins; NaN when the
    table is empty or chance agreement is 1 (both sides all one answer: κ is undefined)."""
    n = t.total
    if not n > 0:
        return math.nan
    po = (t.nn + t.yy) / n
    pe = ((t.nn + t.ny) * (t.nn + t.yn) + (t.yn + t.yy) * (t.ny + t.yy)) / (n * n)
    return _ratio(po - pe, 1.0 - pe) if pe < 1.0 else math.nan


def sensitivity(t: Confusion) -> float:
    """P(judge no | people no); NaN when people called nothing no."""
    return _ratio(t.nn, t.nn + t.yn)


def specificity(t: Confusion) -> float:
    """P(judge yes | people yes); NaN when people called nothing a match."""
    return _ratio(t.yy, t.ny + t.yy)


def youden(sens: float, spec: float) -> float:
    """J = sens + spec − 1: 1 for a perfect judge, 0 for one no better than chance."""
    return sens + spec - 1.0


# -- an audit's labelled items -----------------------------------------------------------


def table_of(judge_no: Sequence[bool] | np.ndarray, person_no: Sequence[float] | np.ndarray,
             population: tuple[float, float] | None = None) -> Confusion:
    """The run's table from labelled items: `judge_no` per item, `person_no` the share of
    its decisive labels saying no (1, 0, or between for people who disagree). `population`
    = (judge-no verdicts, judge-yes verdicts) of the run: each answer's items are weighted
    to its share (module docstring); None: the items as they are, unweighted."""
    j = np.asarray(judge_no, dtype=bool)
    f = np.asarray(person_no, dtype=np.float64)
    if j.shape != f.shape:
        raise ValueError(f"{j.size} judge answers but {f.size} labels")
    n1, n0 = int(j.sum()), int((~j).sum())
    s1, s0 = float(f[j].sum()), float(f[~j].sum())
    w1 = w0 = 1.0
    if population is not None:
        w1 = population[0] / n1 if n1 else 0.0
        w0 = population[1] / n0 if n0 else 0.0
    return Confusion(nn=w1 * s1, ny=w1 * (n1 - s1), yn=w0 * s0, yy=w0 * (n0 - s0))


class Interval(msgspec.Struct, frozen=True):
    """A value with its 95 % interval (NaN where undefined)."""

    value: float
    lo: float
    hi: float


class JudgeAgreement(msgspec.Struct, frozen=True, kw_only=True):
    """The judge against people on some labelled items, weighted to the run."""

    items: int  # labelled items (with a decisive label)
    judge_no_items: int
    judge_yes_items: int
    table: Confusion  # weighted to the run (proportions when `population` was given)
    agreement: Interval
    kappa: Interval
    sensitivity: Interval
    specificity: Interval
    youden: Interval
    undefined_resamples: int = 0  # kept for the record's keys: no interval resamples now (always 0)


def share_stats(q1: np.ndarray, q0: np.ndarray, a: float) -> dict[str, np.ndarray]:
    """Agreement, κ, sensitivity, specificity and J for (arrays of) q1, q0 at judge-no share a."""
    with np.errstate(divide="ignore", invalid="ignore"):
        nn, ny, yn, yy = a * q1, a * (1 - q1), (1 - a) * q0, (1 - a) * (1 - q0)
        po = nn + yy
        pe = (nn + ny) * (nn + yn) + (yn + yy) * (ny + yy)
        kap = np.where(pe < 1.0, (po - pe) / (1.0 - pe), np.nan)
        sens = nn / (nn + yn)
        spec = yy / (ny + yy)
    return {"agreement": po, "kappa": kap, "sensitivity": sens, "specificity": spec, "youden": sens + spec - 1.0}


def percentile_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The percentile interval of a bootstrap's `values` at `level`, NaN ones left out (NaN when none is left)."""
    ok = values[np.isfinite(values)]
    if ok.size == 0:
        return math.nan, math.nan
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(ok, [tail, 100.0 - tail])
    return float(lo), float(hi)


def resampled_means(values: np.ndarray, rng: np.random.Generator, n_resamples: int) -> np.ndarray:
    """The mean of each of `n_resamples` resamples (with replacement) of `values`; NaN when empty."""
    if values.size == 0:
        return np.full(n_resamples, np.nan)
    idx = rng.integers(0, values.size, size=(n_resamples, values.size))
    return values[idx].mean(axis=1)


def wilson(x: float, n: float) -> tuple[float, float]:
    """The 95 % interval of the share x / n (NaN for n = 0): Wilson's, as Brown, Cai & DasGupta
    (2001, Stat Sci 16:101, 4.1.1) modify it near 0 and n, where its coverage dips: for
    0 < x ≤ x* the lower end is the Poisson one, ½χ²(2x; 0.05) / n, and for n − x* ≤ x < n
    the upper end likewise; x* = 2 up to n = 50, 3 up to 100, none above. `x` may be fractional
    (an item two people split counts ½: its variance is below a Bernoulli's, so the interval
    errs wide). Never [p, p]: at x = n its lower end is n / (n + z²)."""
    if n <= 0:
        return math.nan, math.nan
    z2 = Z95 * Z95
    centre = (x / n + z2 / (2.0 * n)) / (1.0 + z2 / n)
    half = float(wilson_half_width(n, x))
    lo, hi = max(0.0, centre - half), min(1.0, centre + half)
    near = 2 if n <= 50 else 3 if n <= 100 else 0
    if 0 < x <= near or 0 < n - x <= near:
        from scipy.special import gammaincinv  # ½χ²(2x; p) = the inverse of the regularised gamma P(x, ·)

        if 0 < x <= near:
            lo = float(gammaincinv(x, 1.0 - LEVEL)) / n
        if 0 < n - x <= near:
            hi = 1.0 - float(gammaincinv(n - x, 1.0 - LEVEL)) / n
    return lo, hi


def ratio_interval(x1: float, n1: float, x2: float, n2: float) -> tuple[float, float]:
    """The 95 % interval of the ratio (x1/n1) / (x2/n2) of two independent shares: MOVER-R
    (Zou & Donner 2008, Stat Med 27:1693) from the two Wilson intervals, in its rationalised
    form (no 0/0 where a Wilson end is twice its share). The upper end is inf when x2 = 0;
    NaN when a share has no items or both are 0."""
    if n1 <= 0 or n2 <= 0 or (x1 <= 0 and x2 <= 0):
        return math.nan, math.nan
    t1, t2 = x1 / n1, x2 / n2
    (l1, u1), (l2, u2) = wilson(x1, n1), wilson(x2, n2)
    both = t1 * t2
    a = l1 * (2.0 * t1 - l1)  # ≥ 0: a Wilson interval holds its share
    lo = a / (both + math.sqrt(max(both * both - a * u2 * (2.0 * t2 - u2), 0.0))) if a > 0 else 0.0
    e = l2 * (2.0 * t2 - l2)
    hi = (both + math.sqrt(max(both * both - u1 * (2.0 * t1 - u1) * e, 0.0))) / e if e > 0 else math.inf
    return lo, hi


_SPANS = {"agreement": (0.0, 1.0), "kappa": (-1.0, 1.0), "youden": (-1.0, 1.0)}


def share_intervals(f1: np.ndarray, f0: np.ndarray, a: float, a_items: int = 0,
                    ends: Callable[[float, float], tuple[float, float]] = wilson) -> dict[str, tuple[float, float]]:
    """Agreement's, κ's and J's 95 % intervals (module docstring): MOVER over the shares q1, q0,
    each moved to its `ends` (Wilson, Brown–Cai–DasGupta) with the others held: θ − √(Σ dlo²),
    θ + √(Σ dhi²), in each statistic's range. `a_items` > 0: `a` is itself a share of that many
    items (two people's table, not a run's), and moves as a third. NaN where θ is."""
    nan = (math.nan, math.nan)
    if f1.size == 0 or f0.size == 0 or not 0.0 < a < 1.0:
        return dict.fromkeys(_SPANS, nan)
    shares = [(float(f1.mean()), ends(float(f1.sum()), f1.size)), (float(f0.mean()), ends(float(f0.sum()), f0.size))]
    if a_items > 0:
        shares.append((a, ends(a * a_items, a_items)))
    base = [v for v, _ in shares] + [a]
    moved = np.array([[e if i == k else base[i] for i in range(3)] for k in range(len(shares)) for e in shares[k][1]])
    point = share_stats(np.array(base[0]), np.array(base[1]), base[2])
    at = share_stats(*moved.T)
    # an end where θ is 0/0 (P = 0 or 1 there) stands for its limit: the end moved in by 1e-12
    near = share_stats(*np.clip(moved, 1e-12, 1.0 - 1e-12).T)
    out = dict.fromkeys(_SPANS, nan)
    for k, (bottom, top) in _SPANS.items():
        if math.isfinite(v := float(point[k])):
            t = np.where(np.isfinite(at[k]), at[k], near[k]).reshape(-1, 2)  # a row per share moved
            down, up = np.maximum(v - t.min(axis=1), 0.0), np.maximum(t.max(axis=1) - v, 0.0)
            out[k] = (max(bottom, v - math.sqrt(float((down**2).sum()))), min(top, v + math.sqrt(float((up**2).sum()))))
    return out


def _sens_spec_intervals(f1: np.ndarray, f0: np.ndarray, a: float) -> tuple[tuple[float, float],
                                                                           tuple[float, float]]:
    """Sensitivity's and specificity's 95 % intervals (module docstring): the Wilson–MOVER
    interval of q1 / q0 (of (1 − q1) / (1 − q0)) through the monotone map to the rate."""
    nan = (math.nan, math.nan)
    if not 0.0 < a < 1.0:
        return nan, nan
    odds = a / (1.0 - a)
    s1, s0 = float(f1.sum()), float(f0.sum())
    lo, hi = ratio_interval(s1, f1.size, s0, f0.size)
    sens = nan if math.isnan(lo) else (odds * lo / (1.0 + odds * lo),
                                       1.0 if math.isinf(hi) else odds * hi / (1.0 + odds * hi))
    lo, hi = ratio_interval(f1.size - s1, f1.size, f0.size - s0, f0.size)
    spec = nan if math.isnan(lo) else (0.0 if math.isinf(hi) else 1.0 / (1.0 + odds * hi), 1.0 / (1.0 + odds * lo))
    return sens, spec


def judge_agreement(judge_no: Sequence[bool] | np.ndarray, person_no: Sequence[float] | np.ndarray,
                    population: tuple[float, float] | None = None, *, n_resamples: int = N_RESAMPLES,
                    seed: int = 0) -> JudgeAgreement:
    """Agreement, κ, sensitivity, specificity and J of the judge against people, each with a 95 % interval
    from the shares' Wilson intervals (module docstring), none [1, 1] at 0 errors. `population`: the run's
    (judge-no, judge-yes) verdict counts the sample was drawn from. `n_resamples`, `seed`: unused now."""
    j = np.asarray(judge_no, dtype=bool)
    f = np.asarray(person_no, dtype=np.float64)
    if j.shape != f.shape:
        raise ValueError(f"{j.size} judge answers but {f.size} labels")
    keep = np.isfinite(f)  # an item without a decisive label carries nothing
    j, f = j[keep], f[keep]
    f1, f0 = f[j], f[~j]
    n1, n0 = f1.size, f0.size
    a = (population[0] / (population[0] + population[1]) if population is not None and sum(population) > 0
         else (n1 / (n1 + n0) if n1 + n0 else math.nan))
    iv = _intervals(f1, f0, a, 0)
    table = table_of(j, f, population)
    if population is not None and table.total > 0:  # proportions: the run's table
        s = table.total
        table = Confusion(table.nn / s, table.ny / s, table.yn / s, table.yy / s)
    return JudgeAgreement(items=int(n1 + n0), judge_no_items=int(n1), judge_yes_items=int(n0), table=table,
                          agreement=iv["agreement"], kappa=iv["kappa"], sensitivity=iv["sensitivity"],
                          specificity=iv["specificity"], youden=iv["youden"])


def _intervals(f1: np.ndarray, f0: np.ndarray, a: float, a_items: int) -> dict[str, Interval]:
    """Each statistic at the shares of `f1`, `f0` with its 95 % interval: agreement, κ and J
    `share_intervals`, sensitivity and specificity Wilson–MOVER-R."""
    q1 = float(f1.mean()) if f1.size else math.nan
    q0 = float(f0.mean()) if f0.size else math.nan
    point = {k: float(v) for k, v in share_stats(np.array(q1), np.array(q0), a).items()}
    ends: dict[str, tuple[float, float]] = share_intervals(f1, f0, a, a_items=a_items)
    ends.update(zip(("sensitivity", "specificity"), _sens_spec_intervals(f1, f0, a)))
    return {k: Interval(v, *ends[k]) if math.isfinite(v) else Interval(math.nan, math.nan, math.nan)
            for k, v in point.items()}


# -- people against people -------------------------------------------------------------------


class PeopleAgreement(msgspec.Struct, frozen=True, kw_only=True):
    """Two annotators on the items both labelled decisively."""

    a: str
    b: str
    items: int  # items both labelled decisively
    cant_tell: int  # items both labelled, one or both saying can't tell
    table: Confusion  # a's answer first
    agreement: Interval
    kappa: Interval


def people_agreement(labels: Mapping[str, Mapping[str, str]], *, n_resamples: int = N_RESAMPLES,
                     seed: int = 0) -> list[PeopleAgreement]:
    """Raw agreement and Cohen's κ with their 95 % intervals for every pair of annotators who
    labelled items in common: the judge's intervals with a's answer in the judge's place, its
    share of no (`a`) a share of the items like the others (`share_intervals`' `a_items`).
    `labels`: item key -> annotator -> label. `n_resamples`, `seed`: kept for callers, unused."""
    names = sorted({who for by in labels.values() for who in by})
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pairs, cant = [], 0
            for by in labels.values():
                if a in by and b in by:
                    if CANT_TELL in (by[a], by[b]):
                        cant += 1
                    else:
                        pairs.append((by[a] == NO_MATCH, by[b] == NO_MATCH))
            if not pairs and not cant:
                continue
            x = np.array([p[0] for p in pairs], dtype=bool)
            y = np.array([p[1] for p in pairs], dtype=np.float64)
            t = table_of(x, y)  # a's answer in the judge's place
            iv = _intervals(y[x], y[~x], float(x.mean()) if x.size else math.nan, int(x.size))
            ends = iv["agreement"].lo, iv["agreement"].hi
            if x.size and x.all() == x.any():  # a said one answer only: p_o is one share, its Wilson
                ends = wilson(t.nn + t.yy, x.size)
            out.append(PeopleAgreement(a=a, b=b, items=int(x.size), cant_tell=cant, table=t,
                                       agreement=Interval(agreement(t), *ends),
                                       kappa=Interval(kappa(t), iv["kappa"].lo, iv["kappa"].hi)))
    return out


def agreement_warnings(j: JudgeAgreement) -> list[str]:
    """The plain warnings when agreement is too low for the numbers to mean what the paper
    says (the thresholds WARN_KAPPA and WARN_YOUDEN, docs/metrics.md 1.10)."""
    out = []
    if j.items == 0:
        return ["no item has a decisive label yet: nothing is known of the judge's errors"]
    if j.judge_no_items == 0 or j.judge_yes_items == 0:
        out.append("the labelled items hold only one of the judge's answers: its sensitivity and specificity "
                   "cannot both be measured")
    if math.isfinite(j.kappa.value) and j.kappa.value < WARN_KAPPA:
        out.append(f"κ = {j.kappa.value:.2f} < {WARN_KAPPA}: the judge and people agree little beyond chance; the "
                   "no-rates do not measure what people would call 'did not see it coming'")
    if math.isfinite(j.youden.value) and j.youden.value < WARN_YOUDEN:
        out.append(f"sensitivity + specificity − 1 = {j.youden.value:.2f} < {WARN_YOUDEN}: the run's own share of a "
                   f"corrected no-rate's interval is {1 / max(j.youden.value, 1e-9):.0f}× as wide as the uncorrected "
                   "interval, before the audit's share, and without bound as it nears 0")
    elif math.isfinite(j.youden.lo) and j.youden.lo <= 0:
        out.append("the interval of sensitivity + specificity − 1 reaches 0: the audit cannot rule out a judge no "
                   "better than chance; label more items")
    return out
