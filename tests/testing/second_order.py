"""The study that chooses the second-order estimates (docs/metrics.md 1.9, issue 57):
simulated groups of stories from curve families, binomial verdicts, and what each
candidate estimator does to the comparisons a reader draws from groups.csv.

The families and their configs (family, K, level) are tension.testing.curve_families'.

For every config and story length m a *bank* of stories is drawn: the noise-free
curve, and 100 Bernoulli verdicts a position (nested: the first n are the n-ending
run). A replication draws two groups of `GROUP` stories from two configs' banks;
"true" is the statistic of the noise-free curves. Per candidate, n and m:

- **bias**: group-mean estimate / group-mean truth, per config with a truth above
  `MIN_TRUTH` (the median over configs, and the range); for Retain the difference in
  points.
- **order**: over config pairs whose bank truths differ by `RATIO` to `RATIO_MAX` times
  (the larger over the smaller: "differs 2×"), the share of replications whose group means are in the true
  order, and the share Welch-significant (p < 0.05) the wrong way; cross-family pairs
  counted apart.
- **false positives**: over config pairs whose bank truths are within `EQUAL` of each
  other (different levels, families or smoothness), the share Welch-significant.
  Retain's pairs are by points: apart by `RETAIN_APART`, equal within `RETAIN_EQUAL`.
- **coverage**: the share of replications whose group interval (mean ± 1.96 sd/√n,
  groups.csv's ci95) holds the group's noise-free mean.

Apart from the groups, `story_interval_coverage` measures the per-story intervals of
stories.csv against each story's noise-free value (`bench/second_order.py --story-intervals`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import msgspec
import numpy as np

from tension.kernels.curves import CurveSettings, batch_stats
from tension.kernels.denoise import corrected_stats, denoise
from tension.kernels.turns import FLOOR_DRAWS, turn_stats, turn_stats_of_curves
from tension.testing.curve_families import CONFIGS, FAMILIES

__all__ = ["CANDIDATES", "CHOSEN", "Bank", "Row", "bank", "study", "format_rows", "GROUP", "NS", "MS",
           "story_interval_coverage"]

GROUP = 30
NS = (10, 20, 50, 100)
MS = (60, 120)
RATIO = 1.8
RATIO_MAX = 3.0
EQUAL = 0.1
MIN_TRUTH = 0.002
# Retain is a percentage whose truths lie close together: pairs "apart" differ by 5–15
# points, "equal" ones by at most 1
RETAIN_APART = (5.0, 15.0)
RETAIN_EQUAL = 1.0
IR60 = 3  # the column of IR60 in (Retain, convergence, IR30, IR60, IR120)


class Bank(msgspec.Struct, frozen=True):
    """A config's simulated stories at one length: the truth of each estimand and each
    candidate's estimate at each n (stories × (Retain, convergence, IR30, IR60, IR120))."""

    config: tuple[str, int, float]
    m: int
    truth: dict[str, np.ndarray]  # estimand -> stories × 5
    estimate: dict[str, dict[int, np.ndarray]]  # candidate -> n -> stories × 5
    # candidate -> n -> stories × 5: the mean estimate over FLOOR_DRAWS redraws of each
    # position's verdicts at its n (the estimate's own noise floor: how far one more layer
    # of the endings' noise moves it), what the reported interval widens by
    floor: dict[str, dict[int, np.ndarray]]


def _second(b) -> np.ndarray:
    return np.column_stack([b.retain, b.convergence, b.ir])


def _paper_raw(x, n, k, off, s):
    return _second(batch_stats(x, 1.0 - k / n, off, s))


def _paper_denoised(x, n, k, off, s):
    return corrected_stats(x, n, k, off, s)[:, 2:]


def _turns_on_denoised(x, n, k, off, s):
    y, _ = denoise(x, n, k, off)
    return turn_stats_of_curves(x, y, off, s)


def _floor(x, n, k, off, s, p, z, draws=20, seed=0):
    """The mean of the estimate over `draws` binomial redraws of every position at its n
    from the no-rates p (a curve's noise floor)."""
    rng = np.random.default_rng(seed)
    acc = np.zeros((len(off) - 1, 2 + len(s.thresholds)))
    cnt = np.zeros_like(acc)
    for _ in range(draws):
        kb = n - rng.binomial(n, np.clip(p, 0.0, 1.0))
        v = turn_stats(x, n, kb, off, s, z=z, c=0.0)
        ok = np.isfinite(v)
        acc[ok] += v[ok]
        cnt[ok] += 1
    with np.errstate(all="ignore"):
        return np.where(cnt > 0, acc / cnt, np.nan)


def _debiased_raw(z):
    """2·T(y) − mean T(y redrawn at n): the excess a second layer of noise adds, taken as
    the excess the first added."""
    def est(x, n, k, off, s):
        t = turn_stats(x, n, k, off, s, z=z, c=0.0)
        return 2 * t - _floor(x, n, k, off, s, 1.0 - k / n, z)
    return est


def _debiased_fit(z):
    """T(y) − (mean T(f̂ redrawn at n) − T(f̂)), f̂ the de-noised curve: the parametric
    bootstrap's bias correction."""
    def est(x, n, k, off, s):
        f, _ = denoise(x, n, k, off)
        f = np.where(np.isfinite(f), f, 0.5)
        kf = n - np.rint(f * n).astype(np.int64)  # the fit as counts, for its own se
        return turn_stats(x, n, k, off, s, z=z, c=0.0) - (_floor(x, n, k, off, s, f, z)
                                                           - turn_stats(x, n, kf, off, s, z=z, c=0.0))
    return est


# the estimate the reports carry (kernels.denoise.corrected_stats)
CHOSEN = "chosen: corrected_stats"
# candidate -> (estimand, estimator)
Estimator = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, CurveSettings], np.ndarray]
CANDIDATES: dict[str, tuple[str, Estimator]] = {
    "paper, raw": ("paper", _paper_raw),
    "paper, de-noised (discrepancy)": ("paper", _paper_denoised),
    "turns, raw (z = 0)": ("turns", lambda x, n, k, off, s: turn_stats(x, n, k, off, s, z=0.0, c=0.0)),
    "turns, z = 1": ("turns", lambda x, n, k, off, s: turn_stats(x, n, k, off, s, z=1.0, c=0.0)),
    "turns, z = 2": ("turns", lambda x, n, k, off, s: turn_stats(x, n, k, off, s, z=2.0, c=0.0)),
    "turns, on the de-noised curve": ("turns", _turns_on_denoised),
    "turns, z = 1, 2·raw − floor": ("turns", _debiased_raw(1.0)),
    "turns, z = 0, 2·raw − floor": ("turns", _debiased_raw(0.0)),
    "turns, z = 1, bias-corrected from the fit": ("turns", _debiased_fit(1.0)),
    "turns, z = 1, reach + 0.5 se": ("turns", lambda x, n, k, off, s: turn_stats(x, n, k, off, s, z=1.0, c=0.5)),
    "turns, z = 1, reach + 1 se": ("turns", lambda x, n, k, off, s: turn_stats(x, n, k, off, s, z=1.0, c=1.0)),
    "turns, z = 1, reach + 2 se": ("turns", lambda x, n, k, off, s: turn_stats(x, n, k, off, s, z=1.0, c=2.0)),
    "turns, z = 0.5, reach + 1 se": ("turns", lambda x, n, k, off, s: turn_stats(x, n, k, off, s, z=0.5, c=1.0)),
    "turns, z = 0.5, reach + 0.5 se": ("turns", lambda x, n, k, off, s: turn_stats(x, n, k, off, s, z=0.5, c=0.5)),
    "turns, z = 0.75, reach + 0.75 se": ("turns",
                                         lambda x, n, k, off, s: turn_stats(x, n, k, off, s, z=0.75, c=0.75)),
    # what kernels/turns.py's defaults (TURN_Z, TURN_C) compute, by those defaults
    CHOSEN: ("turns", lambda x, n, k, off, s: turn_stats(x, n, k, off, s)),
}


def bank(config: tuple[str, int, float], m: int, stories: int, seed: int,
         candidates: Sequence[str] = tuple(CANDIDATES), ns: Sequence[int] = NS,
         settings: CurveSettings = CurveSettings()) -> Bank:
    family, k_features, level = config
    rng = np.random.default_rng([seed, m, CONFIGS.index(config)])
    x1 = np.linspace(0.1, 0.99, m)
    f = np.clip(np.array([FAMILIES[family](m, k_features, level, rng) for _ in range(stories)]), 0.005, 0.995)
    nomatch = rng.random((stories, m, max(ns))) < f[:, :, None]
    x = np.tile(x1, stories)
    off = np.arange(stories + 1, dtype=np.int64) * m
    truth = {"paper": _second(batch_stats(x, f.ravel(), off, settings)),
             "turns": turn_stats_of_curves(x, f.ravel(), off, settings)}
    est: dict[str, dict[int, np.ndarray]] = {c: {} for c in candidates}
    floor: dict[str, dict[int, np.ndarray]] = {c: {} for c in candidates}
    for n in ns:
        k = (n - nomatch[:, :, :n].sum(axis=2)).ravel().astype(np.int64)
        nn = np.full(len(k), n, dtype=np.int64)
        redraws = [rng.binomial(nn, k / nn) for _ in range(FLOOR_DRAWS)]
        for c in candidates:
            est[c][n] = CANDIDATES[c][1](x, nn, k, off, settings)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                floor[c][n] = np.nanmean([CANDIDATES[c][1](x, nn, kb, off, settings) for kb in redraws], axis=0)
    return Bank(config, m, truth, est, floor)


class Row(msgspec.Struct, frozen=True):
    """One candidate's figures at one n and m, for one statistic."""

    candidate: str
    statistic: str
    m: int
    n: int
    bias_median: float
    bias_lo: float
    bias_hi: float
    order: float  # share of replications in the true order, pairs RATIO apart
    order_cross: float  # the same, cross-family pairs only
    wrong_significant: float
    false_positive: float  # Welch-significant at equal truth
    coverage: float
    coverage_widened: float  # of the interval widened by the group's floor shift (`Bank.floor`)
    pairs: int
    cross_pairs: int
    equal_pairs: int


def _welch(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(difference of means, two-sided Welch p) of each row pair, NaNs left out
    (scipy's ttest_ind(equal_var=False), row by row, without its slow masked path)."""
    from scipy.special import stdtr

    def moments(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cnt = np.isfinite(v).sum(axis=1).astype(float)
        with np.errstate(all="ignore"):
            return np.nanmean(v, axis=1), np.nanvar(v, axis=1, ddof=1) / cnt, cnt

    with np.errstate(all="ignore"):
        ma, va, na = moments(a)
        mb, vb, nb = moments(b)
        t = (mb - ma) / np.sqrt(va + vb)
        df = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
        p = 2 * stdtr(df, -np.abs(t))
    return mb - ma, np.where(np.isfinite(p), p, 1.0)


def _draws(rng: np.random.Generator, size: int, reps: int) -> np.ndarray:
    return np.array([rng.choice(size, GROUP, replace=False) for _ in range(reps)])


def study(banks: Sequence[Bank], reps: int, seed: int, statistic: int = IR60,
          name: str = "ir60") -> list[Row]:
    """Every candidate's figures for one statistic (a column of the banks)."""
    with warnings.catch_warnings():
        # a group no story of which defines a statistic (Retain without a peak): NaN, left out
        warnings.simplefilter("ignore", RuntimeWarning)
        return _study(banks, reps, seed, statistic, name)


def _study(banks: Sequence[Bank], reps: int, seed: int, statistic: int, name: str) -> list[Row]:
    rng = np.random.default_rng(seed)
    rows = []
    for m in sorted({b.m for b in banks}):
        bm = [b for b in banks if b.m == m]
        draws = {b.config: _draws(rng, len(b.truth["paper"]), reps) for b in bm}
        for cand, (estimand, _) in CANDIDATES.items():
            if cand not in bm[0].estimate:
                continue
            true_mean = {b.config: float(np.nanmean(b.truth[estimand][:, statistic])) for b in bm}
            for n in sorted(bm[0].estimate[cand]):
                groups = {b.config: b.estimate[cand][n][draws[b.config], statistic] for b in bm}
                floors = {b.config: b.floor[cand][n][draws[b.config], statistic] for b in bm}
                truths = {b.config: b.truth[estimand][draws[b.config], statistic] for b in bm}
                rows.append(_row(cand, name, m, n, bm, groups, floors, truths, true_mean))
    return rows


def _row(cand, name, m, n, bm, groups, floors, truths, true_mean) -> Row:
    biases = []
    covered = []
    widened = []
    for b in bm:
        g, t = groups[b.config], truths[b.config]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a group no story of which defines it: NaN
            tm = np.nanmean(t, axis=1)
            mean = np.nanmean(g, axis=1)
            half = 1.96 * np.nanstd(g, axis=1, ddof=1) / np.sqrt(np.isfinite(g).sum(axis=1))
            shift = np.abs(np.nanmean(floors[b.config], axis=1) - mean)
        ok = np.isfinite(tm)
        covered.append((np.abs(mean - tm) <= half)[ok])
        widened.append((np.abs(mean - tm) <= half + shift)[ok])
        if name.startswith("retain"):
            if np.isfinite(true_mean[b.config]):
                biases.append(float(np.nanmean(g)) - true_mean[b.config])
        elif true_mean[b.config] > MIN_TRUTH:
            biases.append(float(np.nanmean(g)) / true_mean[b.config])
    retain = name.startswith("retain")
    order, cross, wrong, fp = [], [], [], []
    npairs = ncross = nequal = 0
    for i, a in enumerate(bm):
        for b in bm[i + 1:]:
            ta, tb = true_mean[a.config], true_mean[b.config]
            lo, hi = min(ta, tb), max(ta, tb)
            d, p = _welch(groups[a.config], groups[b.config])
            if retain:
                apart = RETAIN_APART[0] <= hi - lo <= RETAIN_APART[1]
                equal = hi - lo <= RETAIN_EQUAL
            else:
                apart = RATIO * lo <= hi <= RATIO_MAX * lo and hi > MIN_TRUTH
                equal = hi > MIN_TRUTH and hi - lo <= EQUAL * hi
            if apart:
                right = np.sign(d) == np.sign(tb - ta)
                order.append(right)
                wrong.append(~right & (p < 0.05))
                npairs += 1
                if a.config[0] != b.config[0]:
                    cross.append(right)
                    ncross += 1
            elif equal:
                fp.append(p < 0.05)
                nequal += 1

    def share(parts: list[np.ndarray]) -> float:
        return float(np.mean(np.concatenate(parts))) if parts else float("nan")

    bias = np.array(biases) if biases else np.array([np.nan])
    return Row(cand, name, m, n, float(np.nanmedian(bias)), float(np.nanmin(bias)), float(np.nanmax(bias)),
               share(order), share(cross), share(wrong), share(fp), share(covered), share(widened), npairs, ncross,
               nequal)


def format_rows(rows: Sequence[Row]) -> str:
    """The markdown table docs/metrics.md holds."""
    out = ["| statistic | candidate | m | n | bias (median; range) | order | cross-family | wrong way, significant "
           "| false positives | coverage | widened | pairs (cross; equal) |",
           "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]

    def pct(v: float) -> str:
        return "–" if v != v else f"{100 * v:.0f} %"

    for r in rows:
        f = ".1f" if r.statistic.startswith("retain") else ".2f"
        out.append(f"| {r.statistic} | {r.candidate} | {r.m} | {r.n} | {r.bias_median:{f}} ({r.bias_lo:{f}}–"
                   f"{r.bias_hi:{f}}) | {pct(r.order)} | {pct(r.order_cross)} | {pct(r.wrong_significant)} | "
                   f"{pct(r.false_positive)} | {pct(r.coverage)} | {pct(r.coverage_widened)} | {r.pairs} ({r.cross_pairs}; {r.equal_pairs}) |")
    return "\n".join(out)


def story_interval_coverage(m: int, n: int, stories: int, resamples: int, seed: int) -> dict[str, float]:
    """The share of stories whose stories.csv interval of each comparable statistic
    (core/reports/comparable.py `comparable_intervals`) holds the story's noise-free value:
    `stories` stories of every config at m positions and n endings."""
    from tension.core.reports.comparable import comparable_intervals
    from tension.core.reports.metrics import Curve

    settings = CurveSettings(interval_resamples=resamples)
    rng = np.random.default_rng([seed, m, n])
    x = np.linspace(0.1, 0.99, m)
    hits: list[list[bool]] = [[] for _ in range(5)]
    for family, k_features, level in CONFIGS:
        curves, truths = [], []
        for i in range(stories):
            f = np.clip(FAMILIES[family](m, k_features, level, rng), 0.005, 0.995)
            k = n - rng.binomial(n, f)
            curves.append(Curve(id=f"{family} {k_features} {level} {i}", x=x.tolist(), y=(1 - k / n).tolist(),
                                n_endings=[n] * m, n_match=k.tolist()))
            truths.append(turn_stats_of_curves(x, f, [0, m])[0])
        off = np.arange(len(curves) + 1, dtype=np.int64) * m
        est = turn_stats(np.tile(x, len(curves)), np.full(m * len(curves), n),
                         np.concatenate([c.n_match for c in curves]), off)
        lo, hi = comparable_intervals(curves, est, settings)
        t = np.array(truths)
        for j in range(5):
            ok = np.isfinite(t[:, j]) & np.isfinite(lo[:, j])
            hits[j] += list(((lo[:, j] <= t[:, j] + 1e-12) & (t[:, j] <= hi[:, j] + 1e-12))[ok])
    names = ("retain", "convergence", "ir30", "ir60", "ir120")
    return {name: float(np.mean(h)) if h else float("nan") for name, h in zip(names, hits)}
