"""The study that chose the comparable second-order statistics (docs/metrics.md 1.9,
issue 57): every candidate estimator of Retain and the IRs held to bias, ordering,
significance the wrong way, false positives at equal truth and interval coverage, on
simulated groups of 30 stories from seven curve families (tension.testing.second_order)
at 60 and 120 positions and 10, 20, 50 and 100 endings. Prints the markdown tables
docs/metrics.md holds. Run from the repository root (≈ 1 minute on 2 cores)::

    python bench/second_order.py
    python bench/second_order.py --stories 300 --reps 200 --seed 0 --json out.json
"""

from __future__ import annotations

import argparse
import json

import msgspec

from tension.testing.second_order import CONFIGS, MS, bank, format_rows, study

STATISTICS = {"ir60": 3, "ir30": 2, "ir120": 4, "retain": 0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stories", type=int, default=300, help="stories a config's bank (default 300)")
    ap.add_argument("--reps", type=int, default=200, help="replications of each pair (default 200)")
    ap.add_argument("--positions", default=",".join(map(str, MS)), help="story lengths (default 60,120)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="FILE", help="also write every row as JSON")
    a = ap.parse_args(argv)
    banks = [bank(c, int(m), a.stories, a.seed) for m in a.positions.split(",") for c in CONFIGS]
    rows = [r for name, col in STATISTICS.items() for r in study(banks, a.reps, a.seed + 1, col, name)]
    print(format_rows(rows))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(msgspec.to_builtins(rows), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
