"""What a process keeps of the figures it drew, for its next report: two memos of
the process, each lent or read under its own lock, both compared with matplotlib's
style (rcParams) now, so that a figure whose look would differ is drawn anew.

    report_curves  the curves' frame (core/reports/figures.py `CurvePlot`: the
                   figure laid out and drawn, and its legends), by curve settings
    drawn_once     the PNG bytes of a figure, by the sha256 of what it was drawn
                   from; `bars_figure`, the report's group bars, is written through it

A report drawn again (the rerun of a finished run, a resumed one, a notebook's second
report of a run) spent most of its time on figures it had drawn before
(bench/figures.py)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from tension.core.reports.figures import BARS_SIZE, CurvePlot, draw_bars, glyphs_quiet, new_figure, save_png
from tension.kernels.curves import CurveSettings
from tension.kernels.groups import GroupStat

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["report_curves", "drawn_once", "bars_figure"]


def _style() -> dict[str, Any]:
    """matplotlib's style now (rcParams), to tell a figure drawn in another style. The
    backend is left out: it is not the style of a file drawn by Agg, and reading it
    before pyplot's import chooses one by importing pyplot (`pyplot`)."""
    import matplotlib

    params = matplotlib.rcParams
    return {str(k): params[k] for k in params if k != "backend"}


# The curve frames a process keeps for its next report (`report_curves`): by settings,
# each with the matplotlib style (rcParams) it was drawn in.
_FRAMES_KEPT = 4
_frames: OrderedDict[CurveSettings, tuple[CurvePlot, dict[str, Any]]] = OrderedDict()
_frames_lock = threading.Lock()


@contextlib.contextmanager
def report_curves(settings: CurveSettings) -> Iterator[CurvePlot]:
    """A CurvePlot for a report's curve files, kept for the process's next report of the
    same settings: its frame (the figure, laid out and drawn, and the legends) is made
    once a process instead of once a report, where it was most of a small report's
    curve time (bench/figures.py). The plot is lent to one report at a time: a report
    drawn while another draws (two runs in flight in a notebook) makes its own, and a
    report that fails keeps nothing (what it left on the figure is never reused). A
    style changed since (a notebook's rcParams) draws a new frame in it."""
    style = _style()
    with _frames_lock:
        plot, drawn_in = _frames.pop(settings, (None, None))
    if plot is None or drawn_in != style:
        plot = CurvePlot(settings)
    yield plot
    with _frames_lock:
        _frames[settings] = plot, style
        while len(_frames) > _FRAMES_KEPT:
            _frames.popitem(last=False)


# The PNGs a process has drawn (`drawn_once`), by the digest of what each was drawn from,
# with the style it was drawn in; the least recently written dropped first.
_KEPT = 32  # ≈ 40 KB each
_kept: OrderedDict[bytes, tuple[dict[str, Any], bytes]] = OrderedDict()
_kept_lock = threading.Lock()


def _encoded(obj: Any) -> Any:
    """msgpack's form of what msgspec does not encode itself: an array as its type, shape and bytes."""
    if isinstance(obj, np.ndarray):
        return [obj.dtype.str, list(obj.shape), np.ascontiguousarray(obj).tobytes()]
    if isinstance(obj, np.generic):
        return obj.item()
    raise NotImplementedError(f"no key for a {type(obj).__name__}")


def drawn_once(path: str | Path, inputs: Sequence[Any], draw: Callable[[], Figure]) -> None:
    """The figure `draw` makes, written to `path` as a PNG (`save_png`), or, when the
    process has drawn one from the same `inputs` in the same style, the bytes drawn
    then. `inputs` must hold everything the drawing depends on (a name for the kind
    of figure first, then every argument whole: numbers, labels, settings, arrays);
    the style (rcParams) is compared whole, so a figure whose numbers or look would
    differ is drawn anew. A report drawn again (the rerun of a finished run, a resumed
    one, a notebook's second report of a run) spent most of its time on figures it
    had drawn before (a group-bar figure ≈ 100 ms, bench/figures.py); inputs that
    cannot be encoded are drawn each time."""
    try:
        key: bytes | None = hashlib.sha256(msgspec.msgpack.encode(list(inputs), enc_hook=_encoded)).digest()
    except (TypeError, NotImplementedError):
        key = None
    style = _style()
    with _kept_lock:
        drawn_in, png = _kept.get(key, (None, b"")) if key is not None else (None, b"")
    if drawn_in != style:
        buf = io.BytesIO()
        save_png(draw(), buf)
        png = buf.getvalue()
        if key is not None:
            with _kept_lock:
                _kept[key] = style, png
                _kept.move_to_end(key)
                while len(_kept) > _KEPT:
                    _kept.popitem(last=False)
    Path(path).write_bytes(png)


@glyphs_quiet
def bars_figure(path: str | Path, groups: dict[str, dict[str, GroupStat]], stats: Sequence[str],
                labels: Sequence[str], title: str, ylabel: str, scale: float = 1.0, top: float | None = None) -> None:
    """`bars_plot`'s figure saved to `path` (PNG), drawn outside pyplot and once, or
    written from the process's earlier drawing of the same figure (`drawn_once`)."""

    def draw() -> Figure:
        fig = new_figure(BARS_SIZE)
        draw_bars(fig.subplots(), groups, stats, labels, title, ylabel, scale, top)
        return fig

    drawn_once(path, ["bars", groups, list(stats), list(labels), title, ylabel, scale, top], draw)
