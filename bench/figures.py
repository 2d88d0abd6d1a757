"""The report's curve figures: a new matplotlib figure per story (`curve_figure`,
as `view` and a single figure use it) against one reused frame (`CurvePlot`, as the
report draws its up to 50 curves), client CPU per curve, on the same 30 synthetic
curves of 10–40 positions.

    python bench/figures.py [--curves 30]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import closing
from pathlib import Path

import numpy as np

from tension.core.reports.figures import CurvePlot, curve_figure
from tension.kernels.curves import CurveSettings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--curves", type=int, default=30)
    n = ap.parse_args().curves
    rng = np.random.default_rng(0)
    curves = [(np.linspace(0.1, 0.99, k), rng.random(k)) for k in rng.integers(10, 40, n)]
    with tempfile.TemporaryDirectory(prefix="figures-") as tmp:
        d = Path(tmp)
        curve_figure(d / "warm.png", "warm", *curves[0])  # imports and font caches, outside the timing
        c0 = time.process_time()
        for i, (x, y) in enumerate(curves):
            curve_figure(d / f"a{i}.png", f"story-{i}", x, y)
        c1 = time.process_time()
        with closing(CurvePlot(CurveSettings())) as plot:
            for i, (x, y) in enumerate(curves):
                plot.draw(d / f"b{i}.png", f"story-{i}", x, y)
        c2 = time.process_time()
    print(f"{n} curves: a new figure each {1000 * (c1 - c0) / n:.0f} ms/curve; one reused frame "
          f"{1000 * (c2 - c1) / n:.0f} ms/curve ({(c1 - c0) / (c2 - c1):.1f}x)")


if __name__ == "__main__":
    main()
