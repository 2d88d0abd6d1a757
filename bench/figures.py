"""The report's figures, client CPU (user + sys of this process) side by side in one
run, interleaved so that the machine's load falls on both alike:

- curves: a new matplotlib figure per story (`curve_figure`, as `view` and a single
  figure use it) against one reused frame (`CurvePlot`, as the report draws its up
  to 50 curves), on the same synthetic curves of 10–40 positions;
- group bars: the way they were drawn before issue 39 (a pyplot figure,
  `fig.tight_layout()`, `savefig`: tight_layout leaves a layout engine on the figure,
  so savefig laid it out in a draw of its own before the draw it wrote) against
  `bars_figure` now (a figure outside pyplot, laid out once, drawn once), the
  report's three bar figures of 4 groups; the PNGs' pixels compared;
- group bars drawn again from the same numbers (a report drawn again): drawn anew
  against written from the bytes the process kept at the first drawing (`bars_figure`);
  the files' bytes compared;
- a report's curves: a new frame per report (before) against the frame the process
  keeps for its next report (`report_curves`, now), `--reports` reports of
  `--report-curves` curves each, interleaved; the PNGs' pixels compared;
- the import a process pays for `tension.core.reports.figures` (the view imports it
  for `sharp_reversals`): before, with pyplot, its backend and PIL at import, against
  now (matplotlib imported at the first figure), each in a fresh interpreter.

    python bench/figures.py [--curves 30] [--reports 10] [--report-curves 3] [--imports 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import numpy as np

from tension.core.reports import figure_cache
from tension.core.reports.figure_cache import bars_figure, report_curves
from tension.core.reports.figures import BARS_SIZE, PNG_COMPRESSION, CurvePlot, curve_figure, draw_bars, pyplot
from tension.core.reports.report import group_bars
from tension.kernels.curves import CurveSettings
from tension.kernels.groups import describe

# the module's imports before issue 39, then the module (a fresh interpreter each)
IMPORT_BEFORE = ("import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot, matplotlib.legend, PIL.Image; "
                 "from matplotlib.backends.backend_agg import FigureCanvasAgg; import tension.core.reports.figures")
IMPORT_NOW = "import tension.core.reports.figures"


def bars_before(path: Path, groups, b) -> None:
    """bars_figure as it was: pyplot's figure, tight_layout, savefig, close."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=BARS_SIZE, dpi=110)
    try:
        draw_bars(ax, groups, b.stats, b.labels, b.title, b.ylabel, top=b.top)
        fig.tight_layout()
        fig.savefig(path, pil_kwargs={"compress_level": PNG_COMPRESSION})
    finally:
        plt.close(fig)


def cpu_of_child(code: str) -> float:
    """User + sys seconds of a fresh interpreter that runs `code`."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--curves", type=int, default=30)
    ap.add_argument("--reports", type=int, default=10, help="reports' bar figures (3 each) drawn each way")
    ap.add_argument("--report-curves", type=int, default=3, help="curves of each report (a small run's report)")
    ap.add_argument("--imports", type=int, default=5, help="fresh interpreters each way")
    args = ap.parse_args()
    n = args.curves
    rng = np.random.default_rng(0)
    curves = [(np.linspace(0.1, 0.99, k), rng.random(k)) for k in rng.integers(10, 40, n)]
    bars = group_bars(CurveSettings())
    stats = sorted({st for b in bars.values() for st in b.stats})
    groups = {st: {g: describe(rng.random(12), 200) for g in ("human", "GPT-4o vanilla baseline", "ablation", "x")}
              for st in stats}
    with tempfile.TemporaryDirectory(prefix="figures-") as tmp:
        d = Path(tmp)
        curve_figure(d / "warm.png", "warm", *curves[0])  # imports and font caches, outside the timing
        bars_before(d / "warm-a.png", groups, bars["nr"])
        bars_figure(d / "warm-b.png", groups, bars["nr"].stats, bars["nr"].labels, bars["nr"].title,
                    bars["nr"].ylabel, top=bars["nr"].top)
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

        before = now = 0.0
        for r in range(args.reports):  # interleaved, the order alternating
            for way in ((0, 1) if r % 2 == 0 else (1, 0)):
                c = time.process_time()
                for name, b in bars.items():
                    if way == 0:
                        bars_before(d / f"before-{name}.png", groups, b)
                    else:  # drawn, not written from an earlier drawing (the row below times that)
                        figure_cache._kept.clear()
                        bars_figure(d / f"now-{name}.png", groups, b.stats, b.labels, b.title, b.ylabel, top=b.top)
                spent = time.process_time() - c
                before, now = (before + spent, now) if way == 0 else (before, now + spent)
        from PIL import Image

        same = all(np.array_equal(np.asarray(Image.open(d / f"before-{k}.png")), np.asarray(Image.open(d / f"now-{k}.png")))
                   for k in bars)
        k = 3 * args.reports
        print(f"{k} group-bar figures: before {1000 * before / k:.0f} ms/figure; now {1000 * now / k:.0f} ms/figure "
              f"({before / now:.2f}x); the same pixels: {same}")

        # the same figures again in this process (a report drawn again): drawn anew each time
        # (the kept bytes forgotten first) against written from the bytes kept at the first drawing
        for name, b in bars.items():  # the first drawing, kept: not timed
            bars_figure(d / f"first-{name}.png", groups, b.stats, b.labels, b.title, b.ylabel, top=b.top)
        before = now = 0.0
        for r in range(args.reports):
            for way in ((0, 1) if r % 2 == 0 else (1, 0)):
                kept = figure_cache._kept.copy()
                c = time.process_time()
                for name, b in bars.items():
                    if way == 0:
                        figure_cache._kept.clear()
                    bars_figure(d / f"{('anew', 'kept')[way]}-{name}.png", groups, b.stats, b.labels, b.title,
                                b.ylabel, top=b.top)
                spent = time.process_time() - c
                figure_cache._kept.clear()
                figure_cache._kept.update(kept)
                before, now = (before + spent, now) if way == 0 else (before, now + spent)
        same = all((d / f"anew-{k}.png").read_bytes() == (d / f"kept-{k}.png").read_bytes() for k in bars)
        print(f"{k} group-bar figures drawn again from the same numbers: drawn anew {1000 * before / k:.0f} ms/figure; "
              f"written from the kept drawing {1000 * now / k:.2f} ms/figure ({before / now:.0f}x); "
              f"the same bytes: {same}")

        before = now = 0.0
        settings = CurveSettings()
        with report_curves(settings) as plot:  # the process's first report draws the frame; not timed
            plot.draw(d / "warm-c.png", "warm", *curves[0])
        for r in range(args.reports):
            for way in ((0, 1) if r % 2 == 0 else (1, 0)):
                c = time.process_time()
                with (closing(CurvePlot(settings)) if way == 0 else report_curves(settings)) as plot:
                    for i, (x, y) in enumerate(curves[: args.report_curves]):
                        plot.draw(d / f"{('before', 'now')[way]}-c{i}.png", f"story-{i}", x, y)
                spent = time.process_time() - c
                before, now = (before + spent, now) if way == 0 else (before, now + spent)
        same = all(np.array_equal(np.asarray(Image.open(d / f"before-c{i}.png")), np.asarray(Image.open(d / f"now-c{i}.png")))
                   for i in range(min(args.report_curves, n)))
        print(f"{args.reports} reports' curves ({args.report_curves} each): a new frame per report "
              f"{1000 * before / args.reports:.0f} ms/report; the process's kept frame {1000 * now / args.reports:.0f} "
              f"ms/report ({before / now:.2f}x); the same pixels: {same}")

    imp_before = imp_now = 0.0
    for r in range(args.imports):
        for way in ((0, 1) if r % 2 == 0 else (1, 0)):
            spent = cpu_of_child(IMPORT_BEFORE if way == 0 else IMPORT_NOW)
            imp_before, imp_now = (imp_before + spent, imp_now) if way == 0 else (imp_before, imp_now + spent)
    print(f"importing tension.core.reports.figures in a fresh interpreter: before {1000 * imp_before / args.imports:.0f}"
          f" ms; now {1000 * imp_now / args.imports:.0f} ms ({imp_before / imp_now:.2f}x)")


if __name__ == "__main__":
    main()
