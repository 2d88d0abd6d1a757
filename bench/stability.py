"""The paper's stability study (000, App. C.7, Table 7) reproduced: the same corpus
scored several times with different seeds, and the spread of each group's mean across
the repeats set beside the spread two predictions give from one run alone:

- the per-story intervals: a story's sd ≈ its 95 % interval's width / 3.92, the group
  mean's sd ≈ √(Σ sdᵢ²) / S;
- subsampling (`tension-run subsample`, docs/metrics.md 1.8): the random subsets of
  k = n/2 endings of repeat 1 spread around its mean by σ·√(1/k − 1/n) = σ/√n, the sd
  of one run of n around the truth, which is what the repeats' sd estimates.

Two modes:

1. ``loopback`` (default): the test server with a realistic noise model: each story
   has its own no-rate level (uniform in [0.35, 0.95], from a hash of its text), each
   position its own around it (± 0.15), and each ending's verdict is a Bernoulli draw
   at that no-rate from a hash of the ending, so another seed draws other endings and
   other verdicts, as a model at T = 1.2 does.
2. ``server``: any running server, e.g. the embedded one (``tension-run serve
   --embedded``; ``--base-url http://127.0.0.1:8791``) with its small settings.

Run from the repository root::

    python bench/stability.py                               # 4 repeats, 16 stories, 20 endings
    python bench/stability.py --repeats 4 --stories 32 --endings 100
    python bench/stability.py server --base-url http://127.0.0.1:8791 --endings 8
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from tension.testing.bench import add_server_flags, loadavg, parse_with_banner

STATS = ("mean_nr", "late_nr", "ir60", "retain")
BANNER = 72


def _u(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "big") / 2**64


def realistic_judge(messages, n, seed):
    """A judge whose no-rate is the story's level plus the position's jitter (module docstring)."""
    from tension.testing.openai_server import classify, judge_blocks

    if classify(messages) != "judge":
        return None
    cont, pred = judge_blocks(messages)
    level = 0.35 + 0.6 * _u("story\x00" + cont[-200:])  # the continuation ends where the story does
    p = min(0.99, max(0.01, level + 0.3 * (_u("position\x00" + cont) - 0.5)))
    return "N" if _u("ending\x00" + cont + "\x00" + pred) < p else "Y"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _float(v: str) -> float:
    return float(v) if v not in ("", None) else math.nan


def repeats(args, base_url: str, model: str | None, corpus: Path, work: Path, extra: dict | None = None) -> dict:
    import tension

    runs = []
    # repeat r's seed: seed + r · 100003, so that no two repeats share a choice's seed (a
    # server seeds choice i with seed + i: consecutive seeds would share n − 1 endings)
    seeds = [args.seed + r * 100_003 for r in range(args.repeats)]
    for r, seed in enumerate(seeds):
        out = work / f"rep{r + 1}"
        t0 = time.perf_counter()
        kw = {"base_url": base_url, "endings": args.endings, "seed": seed, "progress": False,
              "cache": str(work / "cache"), "report": False, **(extra or {})}
        if model:
            kw["model"] = model
        tension.score(corpus, out=out, **kw)
        runs.append(out)
        print(f"  repeat {r + 1}: seed {seed}, {time.perf_counter() - t0:.1f} s")
    measured: dict[str, dict[str, list[float]]] = {}
    for out in runs:
        for g in _rows(out / "groups.csv"):
            if g["statistic"] in STATS:
                measured.setdefault(g["group"], {}).setdefault(g["statistic"], []).append(_float(g["mean"]))
    # predicted from repeat 1's per-story intervals
    from_intervals: dict[str, dict[str, float]] = {}
    by_group: dict[str, list[dict[str, str]]] = {}
    for row in _rows(runs[0] / "stories.csv"):
        by_group.setdefault(row["group"], []).append(row)
    for g, rows in by_group.items():
        for st in STATS:
            sds = [(_float(r[f"{st}_hi"]) - _float(r[f"{st}_lo"])) / 3.92 for r in rows if r[f"{st}_lo"] != ""]
            n = sum(r[st] != "" for r in rows)
            from_intervals.setdefault(g, {})[st] = math.sqrt(sum(s * s for s in sds)) / n if n else math.nan
    # predicted from repeat 1's subsampling at k = n/2
    from tension.core.pipelines.subsample import run_subsample

    half = max(1, args.endings // 2)
    sub = run_subsample(runs[0], ks=(half,), draws=args.draws, seed=args.seed).result
    from_subsets = {r.group: {} for r in sub.rows}
    for r in sub.rows:
        if r.k == half and r.stat in STATS:
            from_subsets[r.group][r.stat] = r.spread
    table = {}
    for g, per in measured.items():
        for st in STATS:
            v = np.array(per.get(st, []), dtype=float)
            ok = v[np.isfinite(v)]
            table.setdefault(g, {})[st] = {
                "repeats": v.tolist(), "mean": float(ok.mean()) if len(ok) else math.nan,
                "sd": float(ok.std(ddof=1)) if len(ok) >= 2 else math.nan,
                "predicted_intervals": from_intervals.get(g, {}).get(st, math.nan),
                "predicted_subsets": from_subsets.get(g, {}).get(st, math.nan)}
    return table


def print_table(table: dict, args) -> None:
    print(f"-- table (docs/cost.md): {args.repeats} repeats, {args.endings} endings a position; each group's mean "
          "± its sd across the repeats, and the sd predicted by repeat 1's per-story intervals / its subsets at n/2")
    print("| group | statistic | repeats | mean ± sd (measured) | sd predicted: intervals | sd predicted: subsets |")
    print("|---|---|---|---|---:|---:|")
    for g, per in table.items():
        for st, d in per.items():
            reps = " / ".join("—" if not math.isfinite(x) else f"{x:.3f}" for x in d["repeats"])
            print(f"| {g} | {st} | {reps} | {d['mean']:.4f} ± {d['sd']:.4f} | {d['predicted_intervals']:.4f} | "
                  f"{d['predicted_subsets']:.4f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", nargs="?", default="loopback", choices=["loopback", "server"])
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--stories", type=int, default=16, help="loopback: the corpus (two groups)")
    p.add_argument("--endings", type=int, default=20)
    p.add_argument("--draws", type=int, default=20, help="random subsets of the subsampling prediction")
    p.add_argument("--seed", type=int, default=1, help="repeat r uses seed + r · 100003")
    add_server_flags(p)
    p.add_argument("--json", metavar="FILE")
    args = parse_with_banner(p, "stability across repeats (000 Table 7; docs/cost.md)", BANNER)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.mode == "loopback":
            from tension.testing.corpus import make_corpus
            from tension.testing.openai_server import LoopbackServer

            with LoopbackServer() as srv:
                srv.respond(realistic_judge)
                corpus = make_corpus(work / "c.jsonl", args.stories, seed=args.seed)
                table = repeats(args, srv.base_url, "test-model", corpus, work)
        else:
            from importlib.resources import files

            from tension.core.serving.profiles import DEMO_SCORE_SETTINGS

            corpus = Path(args.corpus or str(files("tension.core").joinpath("data/demo_story.jsonl")))
            # the embedded profile's settings (its judge answers by Y-vs-N logprobs), without its n and seed
            extra = {k: v for k, v in DEMO_SCORE_SETTINGS.items() if k not in ("endings", "seed")}
            table = repeats(args, args.base_url, args.model, corpus, work, extra)
    print_table(table, args)
    print(f"load at the end: {loadavg()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "table": table}, f, indent=1)


if __name__ == "__main__":
    main()
