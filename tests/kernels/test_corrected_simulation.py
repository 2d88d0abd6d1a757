"""The bar of the corrected second-order statistics (issue 37, docs/metrics.md 1.8): on
simulated stories of the documented shapes with known noise-free curves, the corrected
Retain, convergence and IRs at 20 and at 100 endings are closer to the noise-free value
than the raw ones, and closer to each other; where the noise-free curve has no peak
(Retain undefined), the corrected Retain is defined in no more stories than the raw."""

from __future__ import annotations

import math

import pytest

from tension.testing.corrected import corrected_table, format_table


@pytest.mark.parametrize("seed", [0, 1])
def test_corrected_beats_raw_at_20_and_100_endings(seed):
    cells = corrected_table(stories=16, m=150, seed=seed)
    table = format_table(cells)
    for c in cells:
        if math.isfinite(c.truth):
            for n in (20, 100):
                assert c.error("corrected", n) < c.error("raw", n), (c.shape, c.stat, n, table)
            assert c.gap("corrected", 20, 100) < c.gap("raw", 20, 100), (c.shape, c.stat, table)
        else:
            for n in (20, 100):
                assert c.corrected_defined[n] <= c.raw_defined[n], (c.shape, c.stat, n, table)
    # every IR of every shape, and Retain and convergence of the spiky shape, have a noise-free value
    assert sum(math.isfinite(c.truth) for c in cells) == 4 * 3 + 2


def test_the_bench_prints_the_table(capsys):
    import runpy
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench" / "corrected.py"
    mod = runpy.run_path(str(bench))
    assert mod["main"](["--stories", "4", "--positions", "40"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| shape | statistic | noise-free |") and "spiky" in out
