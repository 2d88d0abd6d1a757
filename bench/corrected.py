"""The corrected second-order statistics against the raw ones (docs/metrics.md 1.8):
``--stories`` simulated stories of ``--positions`` positions per shape (the shapes of
``tension.testing.precision``, verdicts drawn from known noise-free curves, each story's
level shifted as ``simulated_verdicts`` does), the first 20 and all 100 endings a
position, and per shape and statistic the group mean of the noise-free curves' values,
the raw values and the corrected ones (kernels/denoise.py) at both numbers of endings.
Prints the markdown table docs/metrics.md holds. Run from the repository root::

    python bench/corrected.py
    python bench/corrected.py --stories 64 --seed 1 --json out.json
"""

from __future__ import annotations

import argparse
import json

import msgspec

from tension.testing.corrected import corrected_table, format_table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stories", type=int, default=32, help="stories per shape (default 32, the paper's Table 7)")
    ap.add_argument("--positions", type=int, default=150, help="positions a story (default 150)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="FILE", help="also write every cell as JSON")
    a = ap.parse_args(argv)
    cells = corrected_table(a.stories, a.positions, a.seed)
    print(format_table(cells))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(msgspec.to_builtins(cells), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
