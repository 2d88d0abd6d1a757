"""The study that chose the 95 % intervals of the judge's sensitivity and specificity in
`tension-run audit report` (docs/metrics.md 1.10, issue 60).

An audit's sample is drawn by the judge's answer (m/2 items among its no, m/2 among its yes);
people's label is the truth. With the run's no-rate (prevalence) and the judge's sensitivity
and specificity, the run's share of judge no is a = prev·sens + (1 − prev)(1 − spec), and an
item's chance to be a true no is q1 = prev·sens / a among judge-no items, q0 = prev(1 − sens) /
(1 − a) among judge-yes items. Each candidate gives sensitivity's and specificity's interval
from the labelled items weighted to the run (core/reports/judge_audit.py); over the
replications the study prints each one's coverage of the true rates and mean width:

    Wilson-MOVER   MOVER-R (Zou & Donner 2008) of q1/q0 and (1 − q1)/(1 − q0) from the Wilson
                   intervals of the shares, with Brown, Cai & DasGupta's ends near 0 and n,
                   mapped to the rates: the choice, what `judge_agreement` does
    Wilson-MOVER*  the same from Wilson's plain intervals
    bootstrap      percentile bootstrap of the items within each judge answer (what it did:
                   [1, 1] at 0 errors)
    delta AC       the delta method with q1's and q0's variances at Agresti–Coull's (x + 2)/(n + 4)
                   (as the corrected group mean's interval), clipped to [0, 1]
    Wilson Kish    Wilson at Kish's effective n, (Σw)² / Σw², of the weighted items people call
                   no (for sensitivity) or a match (for specificity)

m = 14 is a part or a group of a small audit (7 items an answer). Run from the repository root::

    python bench/audit_rates.py
    python bench/audit_rates.py --reps 2000 --resamples 500 --seed 0
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from tension.core.reports.judge_audit import Z95, judge_agreement, ratio_interval

JUDGES = {"near-perfect (0.98, 0.97)": (0.98, 0.97), "good (0.90, 0.85)": (0.90, 0.85),
          "middling (0.80, 0.70)": (0.80, 0.70), "weak (0.70, 0.65)": (0.70, 0.65)}
PREVALENCES = (0.5, 0.8)
SIZES = (14, 40, 100, 400)
CANDIDATES = ("Wilson-MOVER", "Wilson-MOVER*", "bootstrap", "delta AC", "Wilson Kish")
NAN2 = (math.nan, math.nan)


def plain_wilson(x: float, n: float) -> tuple[float, float]:
    z2 = Z95 * Z95
    p = x / n
    centre, half = p + z2 / (2 * n), Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - half) / (1 + z2 / n)), min(1.0, (centre + half) / (1 + z2 / n))


def plain_mover(x1: float, n1: int, x2: float, n2: int) -> tuple[float, float]:
    """`ratio_interval` from Wilson's plain intervals."""
    t1, t2 = x1 / n1, x2 / n2
    (l1, u1), (l2, u2) = plain_wilson(x1, n1), plain_wilson(x2, n2)
    both, a = t1 * t2, l1 * (2 * t1 - l1)
    lo = a / (both + math.sqrt(max(both * both - a * u2 * (2 * t2 - u2), 0.0))) if a > 0 else 0.0
    e = l2 * (2 * t2 - l2)
    hi = (both + math.sqrt(max(both * both - u1 * (2 * t1 - u1) * e, 0.0))) / e if e > 0 else math.inf
    return lo, hi


def rates(q1, q0, a):
    """Sensitivity and specificity at (arrays of) q1, q0 and the run's judge-no share a."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return a * q1 / (a * q1 + (1 - a) * q0), (1 - a) * (1 - q0) / (a * (1 - q1) + (1 - a) * (1 - q0))


def mover(f1: np.ndarray, f0: np.ndarray, a: float, ratio=ratio_interval):
    odds = a / (1 - a)
    s1, s0, n1, n0 = f1.sum(), f0.sum(), f1.size, f0.size
    sens, spec = NAN2, NAN2
    if s1 + s0 > 0:
        lo, hi = ratio(s1, n1, s0, n0)
        sens = odds * lo / (1 + odds * lo), (1.0 if math.isinf(hi) else odds * hi / (1 + odds * hi))
    if n1 - s1 + n0 - s0 > 0:
        lo, hi = ratio(n1 - s1, n1, n0 - s0, n0)
        spec = (0.0 if math.isinf(hi) else 1 / (1 + odds * hi)), 1 / (1 + odds * lo)
    return sens, spec


def bootstrap(f1: np.ndarray, f0: np.ndarray, a: float, rng: np.random.Generator, resamples: int):
    b1 = f1[rng.integers(0, f1.size, (resamples, f1.size))].mean(1)
    b0 = f0[rng.integers(0, f0.size, (resamples, f0.size))].mean(1)
    out = []
    for v in rates(b1, b0, a):
        v = v[np.isfinite(v)]
        out.append(tuple(np.percentile(v, [2.5, 97.5])) if v.size else NAN2)
    return out[0], out[1]


def delta_ac(f1: np.ndarray, f0: np.ndarray, a: float):
    q1, q0 = f1.mean(), f0.mean()
    p = a * q1 + (1 - a) * q0
    ab = a * (1 - a)

    def var(f):
        q = (f.sum() + 2) / (f.size + 4)
        return q * (1 - q) / (f.size + 4)

    sens, spec = rates(q1, q0, a)
    out = []
    for value, d in ((sens, (ab * q0 / p**2, -ab * q1 / p**2) if p > 0 else NAN2),
                     (spec, (ab * (1 - q0) / (1 - p) ** 2, -ab * (1 - q1) / (1 - p) ** 2) if p < 1 else NAN2)):
        half = Z95 * math.sqrt(d[0] ** 2 * var(f1) + d[1] ** 2 * var(f0))
        out.append((max(0.0, value - half), min(1.0, value + half)) if math.isfinite(value) else NAN2)
    return out[0], out[1]


def kish(f1: np.ndarray, f0: np.ndarray, a: float):
    sens, spec = rates(f1.mean(), f0.mean(), a)
    w1, w0 = a / f1.size, (1 - a) / f0.size
    out = []
    weights = (np.concatenate([w1 * f1, w0 * f0]), np.concatenate([w1 * (1 - f1), w0 * (1 - f0)]))
    for value, u in zip((sens, spec), weights):
        u = u[u > 0]
        n = float(u.sum() ** 2 / (u**2).sum()) if u.size else 0.0
        out.append(plain_wilson(value * n, n) if n > 0 else NAN2)
    return out[0], out[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=1000, help="replications of each configuration (default 1000)")
    ap.add_argument("--resamples", type=int, default=500, help="bootstrap resamples (default 500)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="audit sizes (default 14,40,100,400)")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    print(f"# the judge's sensitivity and specificity intervals: reps {a.reps}, resamples {a.resamples}, "
          f"seed {a.seed}")
    print()
    print("| judge (sens, spec) | prevalence | m | candidate | coverage sens | coverage spec | width sens | "
          "width spec | undefined |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    t0 = time.perf_counter()
    for name, (sens, spec) in JUDGES.items():
        for prev in PREVALENCES:
            share = prev * sens + (1 - prev) * (1 - spec)
            q1, q0 = prev * sens / share, prev * (1 - sens) / (1 - share)
            pop = (share, 1 - share)
            for m in sizes:
                rng = np.random.default_rng([a.seed, m, int(prev * 100), int(sens * 100), int(spec * 100)])
                got: dict[str, list] = {c: [] for c in CANDIDATES}
                for _ in range(a.reps):
                    f1 = (rng.random(m // 2) < q1).astype(np.float64)
                    f0 = (rng.random(m // 2) < q0).astype(np.float64)
                    ours = judge_agreement(np.r_[np.ones(f1.size, bool), np.zeros(f0.size, bool)], np.r_[f1, f0],
                                           pop, n_resamples=100)
                    got["Wilson-MOVER"].append(((ours.sensitivity.lo, ours.sensitivity.hi),
                                                (ours.specificity.lo, ours.specificity.hi)))
                    got["Wilson-MOVER*"].append(mover(f1, f0, share, plain_mover))
                    got["bootstrap"].append(bootstrap(f1, f0, share, rng, a.resamples))
                    got["delta AC"].append(delta_ac(f1, f0, share))
                    got["Wilson Kish"].append(kish(f1, f0, share))
                for cand, ivs in got.items():
                    cells, undefined = [], 0
                    for k, truth in enumerate((sens, spec)):
                        ok = [iv[k] for iv in ivs if math.isfinite(iv[k][0])]
                        undefined += len(ivs) - len(ok)
                        cells.append((100 * np.mean([lo - 1e-12 <= truth <= hi + 1e-12 for lo, hi in ok]),
                                      np.mean([hi - lo for lo, hi in ok])))
                    print(f"| {name} | {prev} | {m} | {cand} | {cells[0][0]:.1f} % | {cells[1][0]:.1f} % | "
                          f"{cells[0][1]:.3f} | {cells[1][1]:.3f} | {100 * undefined / (2 * len(ivs)):.1f} % |")
    print()
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
