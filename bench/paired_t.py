"""The paired t-test of `compare` and the view, in a fresh interpreter each time: through
scipy.stats (`ttest_rel`, as before) against `paired_t` (core/reports/comparison.py,
the same numbers bit for bit from scipy.special), child CPU (user + sys) side by side,
interleaved so that the machine's load falls on both alike. What a process pays is
the import: the test itself takes microseconds.

    python bench/paired_t.py [--runs 7]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys

DATA = "import numpy as np; a = np.linspace(0.1, 0.9, 30); b = a + np.sin(np.arange(30)) / 10"
BEFORE = f"{DATA}; from scipy import stats; r = stats.ttest_rel(b, a); print(r.statistic, r.pvalue)"
NOW = f"{DATA}; from tension.core.reports.comparison import paired_t; print(*paired_t(b, a))"


def cpu_of_child(code: str) -> tuple[float, str]:
    """User + sys seconds of a fresh interpreter that runs `code`, and what it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="fresh interpreters each way")
    args = ap.parse_args()
    spent = [0.0, 0.0]
    printed: list[set[str]] = [set(), set()]
    for r in range(args.runs):
        for way in ((0, 1) if r % 2 == 0 else (1, 0)):
            cpu, out = cpu_of_child((BEFORE, NOW)[way])
            spent[way] += cpu
            printed[way].add(out)
    before, now = (1000 * s / args.runs for s in spent)
    print(f"the paired t-test in a fresh interpreter: scipy.stats.ttest_rel {before:.0f} ms; paired_t {now:.0f} ms "
          f"({before / now:.2f}x); the same numbers: {printed[0] == printed[1]}")


if __name__ == "__main__":
    main()
