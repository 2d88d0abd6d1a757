"""The paper's figures as PNG files (matplotlib, headless): a story's no-rate curve
with its sharp reversals (000, Fig. 3) and group bars with 95% intervals
(Figs. 8–10).

A file's figure is drawn by Agg outside pyplot and once (`new_figure`, `save_png`);
matplotlib is imported when the first figure is made, pyplot only for the figures a
notebook shows (`pyplot`), so that importing this module (the view does, for
`sharp_reversals`) costs nothing. What a process keeps of the figures it drew for
its next report (the curves' frame, the PNGs) is core/reports/figure_cache.py's."""

from __future__ import annotations

import functools
import math
import sys
import textwrap
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

import numpy as np

from tension.kernels.curves import CurveSettings, reversals, smooth, vertex_angles
from tension.kernels.groups import GroupStat

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["glyphs_quiet", "sharp_reversals", "curve_figure", "curve_plot", "CurvePlot", "bars_plot", "draw_bars",
           "BARS_SIZE", "shown", "new_figure", "save_png", "tight", "pyplot"]

SHARP_ANGLE = 60.0  # the triangles of the paper's Figure 3
# zlib level of the PNGs: 1 writes them ~3x faster than the default 6, ~15% larger
PNG_COMPRESSION = 1


def pyplot():
    """matplotlib.pyplot, imported on first use: only the figures a notebook shows
    (`result.plot()`) are pyplot's; the files are drawn without it (`new_figure`).
    Outside a notebook its backend is Agg (no screen: CI, servers, GPU boxes), set
    once, before pyplot's first import; a notebook keeps its inline backend."""
    if "matplotlib.pyplot" not in sys.modules and "ipykernel" not in sys.modules:
        import matplotlib

        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def new_figure(figsize: tuple[float, float], dpi: float = 110, shown: bool = False) -> Figure:
    """A figure of `figsize` inches drawn by Agg. For a file (`shown` False) it is
    outside pyplot: no backend chosen, nothing to close, and no pyplot imported
    (the view and the CLI import this module); `shown`: pyplot's, for a notebook."""
    if shown:
        return pyplot().figure(figsize=figsize, dpi=dpi)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def tight(fig: Figure) -> None:
    """`fig.tight_layout()`'s margins, with no layout engine left on the figure:
    tight_layout leaves a placeholder engine, and with any engine `savefig` lays the
    figure out in a draw of its own before the draw it writes (two draws a file)."""
    from matplotlib.layout_engine import TightLayoutEngine

    # rect=None as Figure.tight_layout passes it (the stubs say a tuple): the default
    # (0, 0, 1, 1) lays the figure out a second time, to the same margins
    TightLayoutEngine(rect=None).execute(fig)  # type: ignore[arg-type]


def save_png(fig: Figure, path: str | Path | BinaryIO) -> None:
    """`fig` laid out tight and written to `path` (a file name or a binary file) as a PNG, drawn once."""
    tight(fig)
    fig.savefig(path, format="png", pil_kwargs={"compress_level": PNG_COMPRESSION})


def glyphs_quiet(draw: F) -> F:
    """`draw` without matplotlib's "Glyph N (…) missing from font(s)" warnings: an id
    or group in a script the font lacks (CJK) is drawn as boxes, the id itself is in
    the file's name and the tables; a warning per glyph on stderr tells the user nothing."""

    @functools.wraps(draw)
    def quiet(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
            return draw(*args, **kwargs)

    return cast(F, quiet)


def sharp_reversals(x, y, settings: CurveSettings = CurveSettings(), angle: float = SHARP_ANGLE) -> np.ndarray:
    """Indices of reversals of the smoothed curve whose vertex angle is ≤ `angle`."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) < 3:
        return np.zeros(0, dtype=np.int64)
    ys = smooth(y, settings.window)
    ang = vertex_angles(x, ys)
    rev = reversals(ys)
    return np.flatnonzero(rev & (np.nan_to_num(ang, nan=999.0) <= angle + 1e-9))


def curve_figure(path: str | Path, story_id: str, x, y, settings: CurveSettings = CurveSettings(),
                 title: str | None = None) -> np.ndarray:
    """Raw and smoothed no-rate over % revealed, sharp peaks ▲ and valleys ▼.
    Returns the indices that got a triangle."""
    plot = CurvePlot(settings)
    try:
        return plot.draw(path, story_id, x, y, title)
    finally:
        plot.close()


def curve_plot(story_id: str, x, y, settings: CurveSettings = CurveSettings(), title: str | None = None):
    """The figure `curve_figure` saves, as a matplotlib Figure to show (a
    notebook's `result.plot(story)`), left out of pyplot's open figures."""
    plot = CurvePlot(settings, shown=True)
    _sharp, peaks, valleys = plot.place(story_id, x, y, title)
    for a in plot.dynamic:
        a.set_animated(False)
    if len(x):
        handles = plot.handles(bool(peaks), bool(valleys))
        plot.ax.legend(handles, [str(h.get_label()) for h in handles], fontsize=7, loc="lower left", framealpha=1.0)
    return shown(plot.fig)


def shown(fig):
    """`fig` closed to pyplot (a notebook does not show it again at the cell's end), kept drawable."""
    pyplot().close(fig)
    return fig


class CurvePlot:
    """One figure for a report's curves. The frame (axes, ticks, labels, grid) is
    drawn once into a pixel buffer; each story restores it and draws only its own
    artists (the curves, triangles, legend, title) on top, then writes the pixels
    as a PNG. A new figure per story spent most of its time laying out and drawing
    the same frame again (bench/scale.py times the outputs)."""

    def __init__(self, settings: CurveSettings = CurveSettings(), shown: bool = False):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        self.settings = settings
        self.shown = shown
        self.fig = new_figure((8, 3.6), shown=shown)
        self.ax = ax = self.fig.subplots()
        (self.raw,) = ax.plot([], [], color="0.65", lw=0.9, marker="o", ms=2.5, label="no-rate")
        (self.smooth,) = ax.plot([], [], color="C0", lw=2.0, label=f"smoothed (w={settings.window})")
        self.peaks = ax.scatter([], [], marker="^", s=70, color="C3", zorder=3, label=f"peak, angle ≤ {SHARP_ANGLE:g}°")
        self.valleys = ax.scatter([], [], marker="v", s=70, color="C2", zorder=3,
                                  label=f"valley, angle ≤ {SHARP_ANGLE:g}°")
        self.empty = ax.text(0.5, 0.5, "no positions", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlim(0, 100)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("% of story revealed")
        ax.set_ylabel("no-rate")
        ax.grid(alpha=0.3)
        self.title = ax.set_title("Story", fontsize=10)  # a one-line title, for the layout's top margin
        tight(self.fig)
        self.dynamic = [self.raw, self.smooth, self.peaks, self.valleys, self.empty, self.title]
        for a in self.dynamic:
            a.set_animated(True)  # left out of the frame; drawn per story
        self.legends: dict[tuple[bool, bool], object] = {}  # -> the legend's pixels (a canvas region)
        self.canvas = cast(FigureCanvasAgg, self.fig.canvas)  # Agg: new_figure's own, or pyplot's (`pyplot`)
        self.canvas.draw()
        self.frame = self.canvas.copy_from_bbox(self.fig.bbox)

    @glyphs_quiet
    def draw(self, path: str | Path, story_id: str, x, y, title: str | None = None) -> np.ndarray:
        from PIL import Image  # matplotlib's own PNG writer

        sharp, peaks, valleys = self.place(story_id, x, y, title)
        legend = self._legend(bool(peaks), bool(valleys)) if len(x) else None  # before the story is drawn
        self.canvas.restore_region(self.frame)
        for a in self.dynamic:
            self.ax.draw_artist(a)
        if legend is not None:
            self.canvas.restore_region(legend)
        Image.frombuffer("RGBA", self.canvas.get_width_height(), self.canvas.buffer_rgba(), "raw", "RGBA", 0, 1
                         ).save(path, format="png", compress_level=PNG_COMPRESSION)
        return np.asarray(sharp, dtype=np.int64)

    def place(self, story_id: str, x, y, title: str | None = None) -> tuple[np.ndarray, list[int], list[int]]:
        """The story's artists set (curves, triangles, title); returns the indices
        of its sharp reversals, and of those the peaks and the valleys."""
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        sharp = np.zeros(0, dtype=np.int64)
        ys = smooth(y, self.settings.window) if len(x) else y
        if len(x):
            sharp = sharp_reversals(x, y, self.settings)
        peaks = [j for j in sharp if ys[j] > ys[j - 1]]
        valleys = [j for j in sharp if ys[j] < ys[j - 1]]
        self.raw.set_data(100 * x, y)
        self.smooth.set_data(100 * x, ys)
        self.peaks.set_offsets(np.column_stack([100 * x[peaks], ys[peaks]]) if peaks else np.empty((0, 2)))
        self.valleys.set_offsets(np.column_stack([100 * x[valleys], ys[valleys]]) if valleys else np.empty((0, 2)))
        self.empty.set_visible(not len(x))
        self.title.set_text(title or story_id)
        return sharp, [int(j) for j in peaks], [int(j) for j in valleys]

    def handles(self, peaks: bool, valleys: bool) -> list:
        """The legend's entries for which triangles a story has."""
        return [self.raw, self.smooth] + ([self.peaks] if peaks else []) + ([self.valleys] if valleys else [])

    def _legend(self, peaks: bool, valleys: bool):
        """The pixels of the legend for which triangles the story has (four kinds,
        each drawn once on the frame): pasted over the curves, an opaque box."""
        key = (peaks, valleys)
        if key not in self.legends:
            from matplotlib.legend import Legend

            entries = self.handles(peaks, valleys)
            legend = Legend(self.ax, entries, [str(h.get_label()) for h in entries], fontsize=7, loc="lower left",
                            framealpha=1.0)
            legend.set_animated(True)
            self.canvas.restore_region(self.frame)
            self.ax.draw_artist(legend)
            self.legends[key] = self.canvas.copy_from_bbox(legend.get_window_extent().padded(1))
        return self.legends[key]

    def close(self) -> None:
        if self.shown:  # pyplot's figure; a file's has nothing to close
            pyplot().close(self.fig)


BARS_SIZE = (8.0, 4.5)  # inches, every group-bar figure alike: they sit side by side on a slide or page
_PLOT_WIDTH = 6.6  # inches of BARS_SIZE's width the axes get, for the label width
_CHAR_WIDTH = 0.075  # inches per character of an 8-point tick label (a wide average)
_MIN_CHARS = 8  # narrower than this ("n = 123" must fit), the labels stand upright
_UPRIGHT = 24  # characters of an upright label's name


def bars_plot(groups: dict[str, dict[str, GroupStat]], stats: Sequence[str], labels: Sequence[str], title: str,
              ylabel: str, scale: float = 1.0, top: float | None = None):
    """Bars per group (x) and statistic (colour) with bootstrap 95% intervals (the
    normal interval where the bootstrap is undefined), on a pyplot figure of
    BARS_SIZE laid out tight (`draw_bars`)."""
    fig = new_figure(BARS_SIZE, shown=True)
    draw_bars(fig.subplots(), groups, stats, labels, title, ylabel, scale, top)
    tight(fig)
    return fig


def draw_bars(ax: Axes, groups: dict[str, dict[str, GroupStat]], stats: Sequence[str], labels: Sequence[str],
              title: str, ylabel: str, scale: float = 1.0, top: float | None = None) -> None:
    """The group bars on `ax`: each group's label is wrapped to its share of the
    width and gives its n; a bar of fewer than two stories has no interval and says
    so; the axis starts at 0 (``top``: its end, e.g. 1 for a rate); an empty run
    says "no stories"."""
    names = list(next(iter(groups.values()))) if groups else []
    width = 0.8 / max(1, len(stats))
    xs = np.arange(len(names))
    for k, (stat, label) in enumerate(zip(stats, labels)):
        where = xs + (k - (len(stats) - 1) / 2) * width
        means, lows, highs, single = [], [], [], []
        for j, g in enumerate(names):
            st = groups[stat][g]
            lo, hi = st.boot_lo, st.boot_hi
            if math.isnan(lo) and not math.isnan(st.ci95):
                lo, hi = st.mean - st.ci95, st.mean + st.ci95
            means.append(st.mean * scale)
            # no interval (n < 2): no bar end at all, never a zero-width one that looks exact
            lows.append(math.nan if math.isnan(lo) else (st.mean - lo) * scale)
            highs.append(math.nan if math.isnan(hi) else (hi - st.mean) * scale)
            if st.n < 2 and not math.isnan(st.mean):
                single.append(j)
        ax.bar(where, means, width, label=label, yerr=[lows, highs], capsize=3, color=f"C{k}", alpha=0.85)
        for j in single:
            ax.annotate(f"n = {groups[stat][names[j]].n}\nno CI", (where[j], means[j]), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=6.5, color="0.3")
    ticks, rotation = _group_labels(groups, names, stats)
    ax.set_xticks(xs, ticks, fontsize=8, rotation=rotation)
    ax.set_ylim(bottom=0.0, top=top)
    ax.set_xlim(-0.6, max(len(names), 1) - 0.4)
    if not names:
        ax.set_xticks([])
        ax.text(0.5, 0.5, "no stories", ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10, pad=18 if len(stats) > 1 else 6)
    ax.grid(axis="y", alpha=0.3)
    if len(stats) > 1 and names:  # above the axes, where no bar can reach it
        ax.legend(fontsize=8, ncols=len(stats), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False,
                  borderaxespad=0.2)


def _group_labels(groups: dict[str, dict[str, GroupStat]], names: list[str],
                  stats: Sequence[str]) -> tuple[list[str], float]:
    """Each group's label and the labels' rotation: the name wrapped (at most three
    lines, then "…") to the width its bars get, and its number of stories; too
    many groups for that, the names stand upright, cut to _UPRIGHT characters."""
    chars = int(_PLOT_WIDTH / max(1, len(names)) / _CHAR_WIDTH)
    out = []
    for g in names:
        n = max(groups[st][g].n + groups[st][g].n_nan for st in stats)
        if chars < _MIN_CHARS:
            out.append(f"{g if len(g) <= _UPRIGHT else g[:_UPRIGHT - 1] + '…'} (n = {n})")
            continue
        lines = textwrap.wrap(g, chars, break_long_words=True, max_lines=3, placeholder="…") or [g]
        out.append("\n".join([*lines, f"n = {n}"]))
    return out, (90.0 if chars < _MIN_CHARS else 0.0)
