"""The study that chose the comparable second-order statistics (docs/metrics.md 1.9,
issue 57): every candidate estimator of Retain and the IRs held to bias, ordering,
significance the wrong way, false positives at equal truth and interval coverage, on
simulated groups of 30 stories from seven curve families (tension.testing.curve_families)
at 60 and 120 positions and 10, 20, 50 and 100 endings. Prints the markdown tables
docs/metrics.md holds. Run from the repository root (≈ 1 minute on 2 cores)::

    python bench/second_order.py
    python bench/second_order.py --stories 300 --reps 200 --seed 0 --json out.json
    python bench/second_order.py --story-intervals   # stories.csv's intervals instead (≈ 2 min)
"""

from __future__ import annotations

import argparse
import json

import msgspec

from tension.testing.curve_families import CONFIGS
from tension.testing.second_order import MS, bank, format_rows, story_interval_coverage, study

STATISTICS = {"ir60": 3, "ir30": 2, "ir120": 4, "retain": 0}
STATISTICS_ORDER = ("ir30", "ir60", "ir120", "retain")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stories", type=int, default=300, help="stories a config's bank (default 300)")
    ap.add_argument("--reps", type=int, default=200, help="replications of each pair (default 200)")
    ap.add_argument("--positions", default=",".join(map(str, MS)), help="story lengths (default 60,120)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--families", help="only these families, separated by ';' (default: all seven)")
    ap.add_argument("--json", metavar="FILE", help="also write every row as JSON")
    ap.add_argument("--story-intervals", action="store_true",
                    help="measure instead the coverage of stories.csv's per-story intervals of the comparable "
                         "statistics (15 stories a config, 300 resamples)")
    a = ap.parse_args(argv)
    if a.story_intervals:
        print("| m | n | " + " | ".join(STATISTICS_ORDER) + " |")
        print("|---:|---:|" + "---:|" * len(STATISTICS_ORDER))
        for m in a.positions.split(","):
            for n in (20, 100):
                cov = story_interval_coverage(int(m), n, 15, 300, a.seed)
                print(f"| {m} | {n} | " + " | ".join(f"{100 * cov[s]:.0f} %" for s in STATISTICS_ORDER) + " |")
        return 0
    configs = [c for c in CONFIGS if a.families is None or c[0] in a.families.split(";")]
    if not configs:
        ap.error(f"--families: none of {a.families!r} is a family ({'; '.join(dict.fromkeys(c[0] for c in CONFIGS))})")
    banks = [bank(c, int(m), a.stories, a.seed) for m in a.positions.split(",") for c in configs]
    rows = [r for name, col in STATISTICS.items() for r in study(banks, a.reps, a.seed + 1, col, name)]
    print(format_rows(rows))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(msgspec.to_builtins(rows), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
