"""The study that chose how `tension-run audit report` corrects a group's mean no-rate for the
judge's errors and what interval it gives (docs/metrics.md 1.10, issue 60).

A simulated run: two groups of 30 stories (true mean no-rates 0.55 and 0.85), 20 positions a
story, 20 endings a position; each ending's truth (does it match?) drawn from its position's
no-rate, the judge's verdict from the truth with a constant sensitivity and specificity.
An audit labels m verdicts drawn as `audit sample` draws them (half among the judge's no,
half among its yes, uniformly within each), people's labels being the truth. Each candidate
estimates each group's true mean no-rate with a 95 % interval; over the replications the
study prints bias, RMSE, coverage and mean width, the losers beside the winner:

    delta AC     Rogan–Gladen with the sample weighted to the run; delta-method interval from
                 the variance of the mean over stories and of q1, q0 (the shares people call no
                 among the judge's no and yes items) at Agresti–Coull's (x + 2) / (n + 4): the
                 winner, what core/reports/judge_correction.py `corrected_mean` does
    bootstrap    the same estimate; percentile bootstrap over the stories and the audit's
                 items together (`corrected_mean(method="bootstrap")`)
    delta        the same estimate; delta method with the plain binomial variances of q1, q0
    unweighted   Rogan–Gladen with sensitivity and specificity from the sample's table as it
                 is (each judge answer counted as often as the sample holds it); delta interval
    audit fixed  the same estimate as bootstrap; interval of the stories only, the audit's
                 sensitivity and specificity taken as known
    PV           predictive values carried to the group: m·q1 + (1 − m)·q0 (assumes P(people
                 no | judge answer) is the same in every group); bootstrap interval
    uncorrected  the run's own group mean and bootstrap interval

Run from the repository root (≈ 1 minute on 2 cores)::

    python bench/judge_audit.py
    python bench/judge_audit.py --reps 300 --resamples 500 --seed 0
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from tension.core.reports.judge_correction import corrected_mean, rogan_gladen

JUDGES = {"good (0.90, 0.85)": (0.90, 0.85), "middling (0.80, 0.70)": (0.80, 0.70),
          "weak (0.70, 0.65)": (0.70, 0.65)}
SIZES = (40, 100, 400)
GROUP_MEANS = (0.55, 0.85)
STORIES, POSITIONS, ENDINGS = 30, 20, 20
CANDIDATES = ("delta AC", "bootstrap", "delta", "unweighted", "audit fixed", "PV", "uncorrected")
Z = 1.959963984540054


def simulate_run(rng: np.random.Generator, sens: float, spec: float):
    """Per group: the stories' observed mean no-rates; over the run: truth and verdict per ending, group index."""
    truths, verdicts, groups, story_means = [], [], [], []
    for g, mu in enumerate(GROUP_MEANS):
        mu_s = rng.beta(mu * 20, (1 - mu) * 20, size=STORIES)
        p = rng.beta(mu_s[:, None] * 10, (1 - mu_s[:, None]) * 10, size=(STORIES, POSITIONS))
        t = rng.random((STORIES, POSITIONS, ENDINGS)) < p[..., None]  # True: does not match
        u = rng.random(t.shape)
        j = np.where(t, u < sens, u >= spec)  # judge says no
        story_means.append(j.mean(axis=2).mean(axis=1))
        truths.append(t.ravel())
        verdicts.append(j.ravel())
        groups.append(np.full(t.size, g))
    return np.concatenate(truths), np.concatenate(verdicts), np.concatenate(groups), story_means


def draw_audit(rng: np.random.Generator, verdicts: np.ndarray, m: int) -> np.ndarray:
    """Indices of m verdicts: m/2 uniformly among the judge's no and m/2 among its yes."""
    out = []
    for cls in (True, False):
        pool = np.flatnonzero(verdicts == cls)
        out.append(rng.choice(pool, size=min(m // 2, pool.size), replace=False))
    return np.concatenate(out)


def _sens_spec(q1: float, q0: float, a: float) -> tuple[float, float]:
    p = a * q1 + (1 - a) * q0
    return (a * q1 / p if p > 0 else math.nan), ((1 - a) * (1 - q0) / (1 - p) if p < 1 else math.nan)


def delta_interval(values: np.ndarray, f1: np.ndarray, f0: np.ndarray, a: float) -> tuple[float, float, float]:
    q1, q0 = f1.mean(), f0.mean()
    sens, spec = _sens_spec(q1, q0, a)
    m = values.mean()
    c = rogan_gladen(m, sens, spec)
    if c.undefined:
        return math.nan, math.nan, math.nan
    j = sens + spec - 1
    raw = c.raw
    P = a * q1 + (1 - a) * q0
    ds = (a * (1 - a) * q0 / P**2, -a * (1 - a) * q1 / P**2)
    dp_ = (a * (1 - a) * (1 - q0) / (1 - P) ** 2, -a * (1 - a) * (1 - q1) / (1 - P) ** 2)
    grads = [((1 - raw) * dp_[k] - raw * ds[k]) / j for k in range(2)]
    var_q = [f1.var(ddof=1) / f1.size, f0.var(ddof=1) / f0.size]  # plain binomial: 0 when q is 0 or 1
    var = values.var(ddof=1) / values.size / j**2 + grads[0] ** 2 * var_q[0] + grads[1] ** 2 * var_q[1]
    half = Z * math.sqrt(var)
    return c.value, max(0.0, raw - half), min(1.0, raw + half)


def unweighted(values: np.ndarray, f1: np.ndarray, f0: np.ndarray) -> tuple[float, float, float]:
    """sens/spec from the sample's table as it is: a = the sample's own share of judge-no items."""
    a = f1.size / (f1.size + f0.size)
    return delta_interval(values, f1, f0, a)


def audit_fixed(values: np.ndarray, f1, f0, a, rng, resamples) -> tuple[float, float, float]:
    sens, spec = _sens_spec(f1.mean(), f0.mean(), a)
    c = rogan_gladen(values.mean(), sens, spec)
    if c.undefined:
        return math.nan, math.nan, math.nan
    means = values[rng.integers(0, values.size, (resamples, values.size))].mean(1)
    r = np.clip((means + spec - 1) / (sens + spec - 1), 0, 1)
    lo, hi = np.percentile(r, [2.5, 97.5])
    return c.value, float(lo), float(hi)


def predictive(values: np.ndarray, f1, f0, rng, resamples) -> tuple[float, float, float]:
    m = values.mean()
    est = m * f1.mean() + (1 - m) * f0.mean()
    mb = values[rng.integers(0, values.size, (resamples, values.size))].mean(1)
    q1b = f1[rng.integers(0, f1.size, (resamples, f1.size))].mean(1)
    q0b = f0[rng.integers(0, f0.size, (resamples, f0.size))].mean(1)
    lo, hi = np.percentile(mb * q1b + (1 - mb) * q0b, [2.5, 97.5])
    return float(est), float(lo), float(hi)


def one(rng: np.random.Generator, sens: float, spec: float, m: int, resamples: int, seed: int) -> dict:
    truth, verdicts, groups, story_means = simulate_run(rng, sens, spec)
    pick = draw_audit(rng, verdicts, m)
    j, f = verdicts[pick], truth[pick].astype(np.float64)
    f1, f0 = f[j], f[~j]
    pop = (float(verdicts.sum()), float((~verdicts).sum()))
    a = pop[0] / sum(pop)
    out = {}
    for g, values in enumerate(story_means):
        row = {}
        cm = corrected_mean(values, j, f, pop, method="bootstrap", n_resamples=resamples, seed=seed + g)
        row["bootstrap"] = (cm.corrected.value, cm.corrected.lo, cm.corrected.hi)
        row["delta"] = delta_interval(values, f1, f0, a)
        ac = corrected_mean(values, j, f, pop, method="delta", n_resamples=resamples, seed=seed + g)
        row["delta AC"] = (ac.corrected.value, ac.corrected.lo, ac.corrected.hi)
        row["unweighted"] = unweighted(values, f1, f0)
        row["audit fixed"] = audit_fixed(values, f1, f0, a, rng, resamples)
        row["PV"] = predictive(values, f1, f0, rng, resamples)
        row["uncorrected"] = (cm.observed.value, cm.observed.lo, cm.observed.hi)
        out[g] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=300, help="replications of each configuration (default 300)")
    ap.add_argument("--resamples", type=int, default=500, help="bootstrap resamples (default 500)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="audit sizes (default 40,100,400)")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    print(f"# judge audit study: {len(GROUP_MEANS)} groups (true mean NR {', '.join(map(str, GROUP_MEANS))}) of "
          f"{STORIES} stories × {POSITIONS} positions × {ENDINGS} endings; reps {a.reps}, resamples {a.resamples}, "
          f"seed {a.seed}")
    print()
    print("| judge (sens, spec) | m | candidate | bias G1 | bias G2 | RMSE | coverage | width | undefined |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    t0 = time.perf_counter()
    for name, (sens, spec) in JUDGES.items():
        for m in sizes:
            rng = np.random.default_rng([a.seed, m, int(sens * 100), int(spec * 100)])
            res = [one(rng, sens, spec, m, a.resamples, a.seed + r) for r in range(a.reps)]
            for cand in CANDIDATES:
                err = {0: [], 1: []}
                cover, width, undefined = [], [], 0
                for r in res:
                    for g in (0, 1):
                        est, lo, hi = r[g][cand]
                        if not (math.isfinite(est) and math.isfinite(lo) and math.isfinite(hi)):
                            undefined += 1
                            continue
                        err[g].append(est - GROUP_MEANS[g])
                        cover.append(lo <= GROUP_MEANS[g] <= hi)
                        width.append(hi - lo)
                allerr = np.array(err[0] + err[1])
                print(f"| {name} | {m} | {cand} | {np.mean(err[0]):+.3f} | {np.mean(err[1]):+.3f} | "
                      f"{math.sqrt(np.mean(allerr ** 2)):.3f} | {100 * np.mean(cover):.1f} % | {np.mean(width):.3f} | "
                      f"{100 * undefined / (2 * len(res)):.1f} % |")
    print()
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
