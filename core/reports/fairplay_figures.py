"""Fair-play figures as PNG files (matplotlib, headless): a story's reading curves
(true-culprit and distractor probability per reader over paragraphs, revelation
marked; paper 003, Fig. 3C–D) and the pooled hit curves with Clopper–Pearson
bands."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tension.core.reports.figure_cache import drawn_once
from tension.core.reports.figures import glyphs_quiet, new_figure
from tension.kernels.fairplay import READERS, FairPlaySettings, PooledCurves

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["reading_curve_figure", "pooled_figure"]

_LABEL = {"gullible": "gullible M0", "experienced": "experienced M+", "know_it_all": "know-it-all M*",
          "actual": "actual readers"}


def _legend(ax, ncol: int = 1) -> None:
    # A story whose readers all failed has nothing to label; matplotlib warns then.
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6.5, loc="upper left", ncol=ncol)


def _line(ax, i, p, **kw):
    """Plot defined points only; M(0) = 1/|Y| starts every line."""
    ok = ~np.isnan(p)
    ax.plot(i[ok], p[ok], **kw)


@glyphs_quiet
def reading_curve_figure(path: str | Path, story, p_true: np.ndarray, p_distractor: np.ndarray,
                         present: np.ndarray) -> None:
    """``p_true``/``p_distractor`` are (R, L) per reader in READERS order; a reader
    with ``present[r]`` False is not drawn. Written from the process's earlier drawing
    of the same story and curves (`drawn_once`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    drawn_once(path, ["reading curves", story, p_true, p_distractor, present],
               lambda: _reading_curves(story, p_true, p_distractor, present))


def _reading_curves(story, p_true: np.ndarray, p_distractor: np.ndarray, present: np.ndarray) -> Figure:
    K = len(story.suspects)
    i = np.arange(0, story.L + 1)
    fig = new_figure((8, 3.8))
    ax = fig.subplots()
    for r, name in enumerate(READERS):
        if not present[r]:
            continue
        color = f"C{r}"
        _line(ax, i, np.concatenate([[1.0 / K], p_true[r]]), color=color, lw=1.8, marker="o", ms=2.5,
              label=f"{_LABEL[name]}: {story.suspects[story.culprit]} (culprit)")
        if story.distractor >= 0:
            _line(ax, i, np.concatenate([[1.0 / K], p_distractor[r]]), color=color, lw=1.1, ls="--",
                  label=f"{_LABEL[name]}: {story.suspects[story.distractor]} (distractor)")
    if story.revelation is not None:
        ax.axvline(story.revelation, color="0.3", ls=":", lw=1.2, label=f"revelation (¶{story.revelation})")
    ax.axhline(1.0 / K, color="0.75", lw=0.8)
    ax.set_xlim(0, story.L)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("paragraph i (0 = nothing read, uniform)")
    ax.set_ylabel("M(i) of the suspect")
    ax.set_title(f"{story.id} ({story.group})", fontsize=10)
    ax.grid(alpha=0.3)
    _legend(ax, ncol=2)
    return fig


@glyphs_quiet
def pooled_figure(path: str | Path, group: str, pc: PooledCurves, settings: FairPlaySettings) -> None:
    """Hit rate per reader over relative position, with the Clopper–Pearson band,
    and the probability-weighted mean M(i)_{y*} dotted beside it. Written from the
    process's earlier drawing of the same curves (`drawn_once`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    drawn_once(path, ["pooled", group, pc, settings], lambda: _pooled(group, pc, settings))


def _pooled(group: str, pc: PooledCurves, settings: FairPlaySettings) -> Figure:
    x = (np.arange(settings.bins) + 1) / settings.bins
    fig = new_figure((8, 3.8))
    ax = fig.subplots()
    for r, name in enumerate(READERS):
        if not pc.n[r].any():
            continue
        ok = pc.n[r] > 0
        ax.plot(x[ok], pc.hit_rate[r][ok], color=f"C{r}", lw=1.8, marker="o", ms=2.5,
                label=f"{_LABEL[name]} hit rate")
        ax.fill_between(x[ok], pc.cp_lo[r][ok], pc.cp_hi[r][ok], color=f"C{r}", alpha=0.15)
        ax.plot(x[ok], pc.p_true_mean[r][ok], color=f"C{r}", lw=1.0, ls=":",
                label=f"{_LABEL[name]} mean M(i)_y* (probability-weighted)")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("relative position i / L")
    ax.set_ylabel("share of argmax hits")
    ax.set_title(f"pooled reading curves: {group} ({settings.confidence:.0%} Clopper–Pearson)", fontsize=10)
    ax.grid(alpha=0.3)
    _legend(ax)
    return fig
