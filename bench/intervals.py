"""Cost and coverage of the per-story intervals (docs/metrics.md 1.6).

1. cost: a paper-scale corpus (``--stories`` 261 stories × ``--positions`` 150
   positions × 100 endings, verdict counts drawn from seeded random curves) through
   the point statistics (``kernels.curves.batch_stats``, what the metrics step did
   before) and through ``kernels.intervals.story_intervals`` at ``--resamples``
   (default 1,000, the default of ``--interval-resamples``); milliseconds per story
   side by side, medians of ``--repeats``;
2. coverage: ``--sim-stories`` simulated stories per shape (the four documented shapes
   of ``tension.testing.precision`` and a near-certain curve, 0.995), 100 endings a
   position, and how often the interval holds what its statistic estimates, for three
   ways of making it: the plain percentile bootstrap (binomial draws, the
   percentiles as they are), the binomial draws moved onto the observed value, and
   the project's rule (moved, and an all-match or no-match position drawn at
   (k + ½)/(n + 1)).

Single-threaded, like the kernels. Run from the repository root::

    python bench/intervals.py
    python bench/intervals.py --sim-stories 200 --json out.json
    python bench/intervals.py --sim-stories 0        # the cost only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from tension.kernels import curves, intervals
from tension.kernels.curves import CurveSettings
from tension.kernels.intervals import Draw
from tension.testing import precision
from tension.testing.bench import cpu_model, loadavg

BANNER = 60
NAMES = ["mean_nr", "late_nr", "retain", "convergence", "ir30", "ir60", "ir120"]


def corpus(stories: int, m: int, n: int, seed: int):
    """Packed x, counts and offsets of `stories` random-walk curves of m positions."""
    rng = np.random.default_rng(seed)
    x = np.tile(np.linspace(0.1, 0.99, m), stories)
    walk = np.clip(0.85 + np.cumsum(rng.normal(0, 0.03, (stories, m)), axis=1), 0.02, 1.0)
    k = rng.binomial(n, 1.0 - walk).ravel()
    return x, np.full(len(k), n, dtype=np.int64), k, np.arange(stories + 1, dtype=np.int64) * m


def cost(args) -> dict:
    s = CurveSettings()
    x, n, k, off = corpus(args.stories, args.positions, 100, args.seed)
    ids = [f"s{i}" for i in range(args.stories)]
    y = 1.0 - k / n

    def points():
        b = curves.batch_stats(x, y, off, s)
        return np.column_stack([b.mean_nr, b.late_nr, b.retain, b.convergence, b.ir])

    pts = points()
    intervals.story_intervals(ids[:2], x[:2 * args.positions], n[:2 * args.positions], k[:2 * args.positions],
                              off[:3], pts[:2], s, n_resamples=5)  # load the kernels
    seeds = intervals.story_seeds(ids, 0)
    t_pts, t_iv, t_draw = [], [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        points()
        t_pts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        intervals.story_intervals(ids, x, n, k, off, pts, s, n_resamples=args.resamples, seed=0)
        t_iv.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for c in range(0, args.stories, 64):  # the draws alone, in the chunks story_intervals uses
            e = min(args.stories, c + 64)
            a_, b_ = off[c], off[e]
            intervals.resample_curves(x[a_:b_], n[a_:b_], k[a_:b_], off[c:e + 1] - a_, seeds[c:e], args.resamples)
        t_draw.append(time.perf_counter() - t0)
    a, b, d = statistics.median(t_pts), statistics.median(t_iv), statistics.median(t_draw)
    print(f"{'point statistics (batch_stats)':44s} {1e3 * a / args.stories:9.3f} ms/story   1.0x")
    print(f"{f'intervals, {args.resamples} resamples':44s} {1e3 * b / args.stories:9.3f} ms/story "
          f"{b / a:6.0f}x")
    print(f"{'  of which drawing the verdicts (about)':44s} {1e3 * d / args.stories:9.3f} ms/story")
    print(f"{'whole corpus, intervals':44s} {b:9.2f} s")
    return {"point_s": a, "intervals_s": b, "draws_s": d, "per_story_ms": 1e3 * b / args.stories}


def _moved_or_plain(name: str, args, draw: Draw, moved: bool) -> np.ndarray:
    s = CurveSettings()
    if moved:
        sim = precision.simulate(name, args.sim_stories, args.positions_sim, 100, s, args.sim_resamples,
                                 seed=args.seed, reruns=args.reruns, draw=draw)
        c, h = precision.coverage(sim)
        return c / np.maximum(h, 1)
    rng = np.random.default_rng(args.seed)
    x, p = precision.shape(name, args.positions_sim)
    target = precision.expected_stats(x, p, 100, s, args.reruns, rng)
    kk = rng.binomial(100, 1 - p, size=(args.sim_stories, len(x))).ravel()
    xs, off = np.tile(x, args.sim_stories), np.arange(args.sim_stories + 1) * len(x)
    v = intervals.resample_stats(xs, np.full(len(kk), 100), kk, off,
                                 intervals.story_seeds([str(i) for i in range(args.sim_stories)], args.seed), s,
                                 args.sim_resamples, draw)
    with np.errstate(all="ignore"):
        lo, hi = np.nanpercentile(v, [2.5, 97.5], axis=1)
    return ((lo <= target + 1e-12) & (target - 1e-12 <= hi)).mean(axis=0)


def coverage(args) -> dict:
    ways = [("plain percentile", Draw.BINOMIAL, False), ("binomial, moved", Draw.BINOMIAL, True),
            ("edge rule, moved (the project's)", Draw.EDGE, True)]
    out: dict = {}
    print(f"{'shape / way':44s} " + " ".join(f"{c:>7s}" for c in NAMES))
    for name in [*precision.SHAPES, *precision.EXTRA_SHAPES]:
        print(name)
        for label, draw, moved in ways:
            cov = _moved_or_plain(name, args, draw, moved)
            out.setdefault(name, {})[label] = [round(float(c), 3) for c in cov]
            print(f"  {label:42s} " + " ".join(f"{c:7.3f}" for c in cov))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stories", type=int, default=261)
    p.add_argument("--positions", type=int, default=150)
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sim-stories", type=int, default=400, help="0: the cost only")
    p.add_argument("--positions-sim", type=int, default=100)
    p.add_argument("--sim-resamples", type=int, default=500)
    p.add_argument("--reruns", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    print("=" * BANNER)
    print("per-story intervals: cost and coverage (docs/metrics.md 1.6)")
    print(f"cpu: {cpu_model()}; load {loadavg()}; pid {os.getpid()}")
    print(f"config: {vars(args)}")
    print("=" * BANNER)
    print("-- cost")
    res = {"config": vars(args), "cost": cost(args)}
    print("-- coverage (share of stories whose 95% interval holds the statistic's target)")
    res["coverage"] = coverage(args) if args.sim_stories else {}
    print(f"load at the end: {loadavg()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
