"""Adaptive endings against fixed-100 (docs/metrics.md 1.7, docs/cost.md).

Four modes:

1. ``sim`` (default): simulated stories on the ground-truth shapes of
   ``tension.testing.precision`` (flat high, steadily falling, a late twist, spiky),
   paired as a seeded server pairs them (the adaptive run's endings are the first k of
   the fixed run's; ``tension.testing.adaptive``). For each target: endings used (share
   of fixed-100); for each story statistic the distribution of |adaptive − fixed-100|
   over the width of the fixed-100 interval (median, 90th percentile, max), the share
   of stories whose adaptive statistic falls inside the fixed-100 interval, its mean
   shift; and the bias of the no-rate (optional stopping), beside the fixed run's.
2. ``loopback``: the real ``score`` (``tension.score``) on the test server
   (LoopbackServer) at several judge Y-rates: fixed-100, then each target, from
   stories.csv's values and intervals.
3. ``server``: the same on any running server, e.g. the embedded one with the demo
   story at small settings (``--max-endings 8 --round-endings 4``).
4. ``newyorker``: endings by the question (issue 37, docs/metrics.md 1.8): a simulated
   corpus the size of the paper's New Yorker one (``--stories`` per shape, 150 positions,
   100 endings), `subsample`'s recommended k for mean and late NR, and the GPU-hours
   of the New Yorker profile (NEW_YORKER below) at that k against 100.

Run from the repository root::

    python bench/precision.py
    python bench/precision.py --stories 200 --targets 0.04 0.05 0.07 0.1 --json out.json
    python bench/precision.py loopback --stories 3
    python bench/precision.py server --base-url http://127.0.0.1:8791 --max-endings 8 --round-endings 4
    python bench/precision.py newyorker --stories 66
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tension.kernels.curves import CurveSettings
from tension.testing import adaptive, precision
from tension.testing.bench import add_server_flags, loadavg, parse_with_banner

BANNER = 72
STATS = adaptive.STATS


def simulation(args) -> dict:
    s = CurveSettings()
    sims = {name: adaptive.draw_stories(name, args.stories, args.positions, args.max_endings, s, args.resamples,
                                        seed=args.seed + i) for i, name in enumerate(precision.SHAPES)}
    out: dict = {}
    table = []
    for w in args.targets:
        print(f"-- target half-width {w:g} (rounds of {args.round_endings}, at most {args.max_endings})")
        rows = {}
        for name, sim in sims.items():
            o = adaptive.at_target(sim, w, args.round_endings, args.max_endings, s)
            rows[name] = o
            print(f"  {name}: endings {o.share_of_fixed:.1%} of fixed; no-rate bias {o.no_rate_bias:+.4f} "
                  f"(fixed run's {o.fixed_no_rate_bias:+.4f})")
            print(f"    {'':12s} {'inside':>7s} {'|d|/w med':>10s} {'p90':>6s} {'max':>6s} {'shift':>8s}")
            for j, stat in enumerate(STATS):
                d = o.dist_over_width[j]
                print(f"    {stat:12s} {o.inside[j]:7.3f} {d[0]:10.3f} {d[1]:6.3f} {d[2]:6.2f} {o.stat_bias[j]:+8.4f}")
        share = float(np.mean([o.share_of_fixed for o in rows.values()]))
        worst = np.min([o.inside for o in rows.values()], axis=0)
        table.append((w, share, {n: o.share_of_fixed for n, o in rows.items()}, worst))
        out[str(w)] = {n: {"share_of_fixed": o.share_of_fixed, "inside": dict(zip(STATS, o.inside.tolist())),
                           "dist_over_width": {st: o.dist_over_width[j].tolist() for j, st in enumerate(STATS)},
                           "stat_bias": dict(zip(STATS, o.stat_bias.tolist())), "no_rate_bias": o.no_rate_bias,
                           "fixed_no_rate_bias": o.fixed_no_rate_bias} for n, o in rows.items()}
    print("-- table (docs/cost.md): target → endings used (share of fixed-100, mean over shapes; per shape) → "
          "share of stories inside the fixed-100 interval, the worst shape per statistic")
    print("| target | endings used | per shape | " + " | ".join(STATS) + " |")
    print("|---|---|---|" + "---|" * len(STATS))
    for w, share, per, worst in table:
        print(f"| {w:g} | {share:.1%} | " + " / ".join(f"{v:.0%}" for v in per.values()) + " | "
              + " | ".join(f"{v:.1%}" for v in worst) + " |")
    return out


def _stories_csv(out: Path) -> dict[str, dict[str, str]]:
    with (out / "stories.csv").open(newline="") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def _compare_runs(fixed: Path, run: Path) -> tuple[np.ndarray, np.ndarray]:
    """Per statistic: stories inside the fixed interval, stories with one."""
    a, f = _stories_csv(run), _stories_csv(fixed)
    inside, has = np.zeros(len(STATS)), np.zeros(len(STATS))
    for sid, row in f.items():
        for j, st in enumerate(STATS):
            try:
                lo, hi, v = float(row[f"{st}_lo"]), float(row[f"{st}_hi"]), float(a[sid][st])
            except (KeyError, ValueError):
                continue
            if np.isfinite(lo) and np.isfinite(v):
                has[j] += 1
                inside[j] += lo - 1e-12 <= v <= hi + 1e-12
    return inside, has


def _endings(run: Path) -> int:
    return sum(json.loads(x)["n_endings"] for x in (run / "positions.jsonl").read_text().splitlines())


def through_score(args, base_url: str, model: str | None, corpus: Path, work: Path, label: str,
                  extra: dict) -> dict:
    """Fixed-M, then each target, through the real `score`, on one cache (the label's)."""
    import tension

    common = {"base_url": base_url, "seed": args.seed, "progress": False, "cache": str(work / f"{label}-cache"),  # a judge changed between labels: its own
              "report": False, **extra}
    if model:
        common["model"] = model
    t0 = time.perf_counter()
    tension.score(corpus, out=work / f"{label}-fixed", endings=args.max_endings, **common)
    fixed_s = time.perf_counter() - t0
    total = _endings(work / f"{label}-fixed")
    res = {"fixed_endings": total, "fixed_seconds": round(fixed_s, 1), "targets": {}}
    print(f"  {label}: fixed-{args.max_endings}: {total:,} endings, {fixed_s:.1f} s")
    for w in args.targets:
        out = work / f"{label}-{w:g}"
        t0 = time.perf_counter()
        tension.score(corpus, out=out, target_half_width=w, round_endings=args.round_endings,
                      max_endings=args.max_endings, **common)
        secs = time.perf_counter() - t0
        inside, has = _compare_runs(work / f"{label}-fixed", out)
        used = _endings(out)
        res["targets"][str(w)] = {"endings": used, "share_of_fixed": used / total, "seconds": round(secs, 1),
                                  # None: no story has the statistic in both runs (NaN in one)
                                  "inside": {st: (i / h if h else None) for st, i, h in zip(STATS, inside, has)}}
        print(f"    target {w:g}: {used:,} endings ({used / total:.1%}), {secs:.1f} s; inside: "
              + " ".join(f"{st} {i:.0f}/{h:.0f}" for st, i, h in zip(STATS, inside, has)))
    return res


def loopback(args) -> dict:
    from tension.testing.corpus import make_corpus
    from tension.testing.openai_server import LoopbackServer

    out = {}
    with tempfile.TemporaryDirectory() as tmp, LoopbackServer() as srv:
        corpus = make_corpus(Path(tmp) / "c.jsonl", args.stories, seed=args.seed)
        for yes in args.yes_rates:
            srv.yes_rate = yes
            out[str(yes)] = through_score(args, srv.base_url, "test-model", corpus, Path(tmp), f"yes{yes:g}", {})
    return out


def server(args) -> dict:
    from importlib.resources import files

    from tension.core.serving.profiles import DEMO_SCORE_SETTINGS

    corpus = Path(args.corpus or str(files("tension.core").joinpath("data/demo_story.jsonl")))
    # the embedded profile's settings (its judge answers by Y-vs-N logprobs), without its n and seed
    extra = {k: v for k, v in DEMO_SCORE_SETTINGS.items() if k not in ("endings", "seed")}
    with tempfile.TemporaryDirectory() as tmp:
        return through_score(args, args.base_url, args.model, corpus, Path(tmp), "server", extra)


# The paper's New Yorker corpus at its defaults (issue 37): 261 stories, ≈ 3.9 M judge
# prompts (39,000 positions × 100 endings), ≈ 313 M generated tokens (E ≈ 80 a ending),
# 6–9 H200-hours. The throughput is calibrated to the midpoint, 7.5 hours, split 60/40
# between generation and judge (an assumption: the cost model is linear in the endings,
# so the ratio at k against 100 does not depend on it).
NEW_YORKER = {"stories": 261, "positions": 39_000, "ending_tokens": 313e6 / 3.9e6, "gpu_hours": (6.0, 9.0)}
_NY_HOURS = 7.5
NEW_YORKER_THROUGHPUT = {"gen_tok_s": 313e6 / (0.6 * _NY_HOURS * 3600), "judge_req_s": 3.9e6 / (0.4 * _NY_HOURS * 3600)}


def newyorker(args) -> dict:
    from tension.core.pipelines.throughput import Throughput, endings_gpu_hours
    from tension.core.reports.subsampling import subsample

    t0 = time.perf_counter()
    v, _ = precision.simulated_verdicts(args.stories, 150, 100, seed=args.seed)
    r = subsample(v, CurveSettings(), ks=(5, 10, 15, 20, 30, 40, 50, 60, 80))
    rec = r.recommendation
    print(f"  simulated corpus: {len(v.ids)} stories ({args.stories} a shape), 150 positions, 100 endings; "
          f"subsampled in {time.perf_counter() - t0:.1f} s")
    for row in r.rows:
        if row.stat in ("mean_nr", "late_nr", "ir60") and row.k in (5, 10, 20, 100):
            print(f"    k {row.k:>3} {row.stat:8s} {row.group[:24]:24s} shift {row.shift:+.4f} rerun sd "
                  f"{row.rerun_spread:.4f} (tolerance {r.shift_tolerance * row.full_ci95:.4f}) width "
                  f"{row.width_ratio:.3f} {'✓' if row.passes else ''}")
    thr = Throughput(**NEW_YORKER_THROUGHPUT)
    e = NEW_YORKER["ending_tokens"]
    out = {"recommended_k": rec.k, "why": rec.why}
    print(f"  recommended endings for mean and late NR: {rec.k} ({rec.why})")
    print("| endings a position | endings (New Yorker, 39,000 positions) | generated tokens | H200-hours "
          "(calibrated to 7.5 at 100) | the paper's 6–9 scaled |")
    print("|---:|---:|---:|---:|---:|")
    for k in ([rec.k] if rec.k else []) + [100]:
        endings = k * NEW_YORKER["positions"]
        hours = endings_gpu_hours(endings, e, thr)
        lo, hi = (h * k / 100 for h in NEW_YORKER["gpu_hours"])
        print(f"| {k} | {endings:,} | {endings * e / 1e6:,.0f} M | {hours:.2f} | {lo:.1f}–{hi:.1f} |")
        out[str(k)] = {"endings": endings, "tokens": endings * e, "gpu_hours": hours}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", nargs="?", default="sim", choices=["sim", "loopback", "server", "newyorker"])
    p.add_argument("--targets", type=float, nargs="+", default=[0.03, 0.04, 0.05, 0.07, 0.1])
    p.add_argument("--round-endings", type=int, default=20)
    p.add_argument("--max-endings", type=int, default=100)
    p.add_argument("--stories", type=int, default=200, help="sim, newyorker: per shape; loopback: the corpus")
    p.add_argument("--positions", type=int, default=60, help="sim: positions a story")
    p.add_argument("--resamples", type=int, default=300, help="sim: of the fixed-100 intervals")
    p.add_argument("--yes-rates", type=float, nargs="+", default=[0.05, 0.3], help="loopback: the judge's Y-rate")
    add_server_flags(p)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", metavar="FILE")
    args = parse_with_banner(p, lambda a: f"adaptive endings against fixed-{a.max_endings} (docs/metrics.md 1.7)",
                             BANNER)
    res = {"config": vars(args), args.mode: {"sim": simulation, "loopback": loopback, "server": server,
                                    "newyorker": newyorker}[args.mode](args)}
    print(f"load at the end: {loadavg()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
