"""The paper's figures as PNG files (matplotlib, headless): a story's no-rate curve
with its sharp reversals (000, Fig. 3) and group bars with 95% intervals
(Figs. 8–10)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no screen: CI, servers, GPU boxes

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tension.kernels.curves import CurveSettings, reversals, smooth, vertex_angles  # noqa: E402
from tension.kernels.groups import GroupStat  # noqa: E402

__all__ = ["sharp_reversals", "curve_figure", "bars_figure"]

SHARP_ANGLE = 60.0  # the triangles of the paper's Figure 3


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
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=110)
    try:
        if len(x):
            ys = smooth(y, settings.window)
            ax.plot(100 * x, y, color="0.65", lw=0.9, marker="o", ms=2.5, label="no-rate")
            ax.plot(100 * x, ys, color="C0", lw=2.0, label=f"smoothed (w={settings.window})")
            sharp = sharp_reversals(x, y, settings)
            peaks = [j for j in sharp if ys[j] > ys[j - 1]]
            valleys = [j for j in sharp if ys[j] < ys[j - 1]]
            if peaks:
                ax.scatter(100 * x[peaks], ys[peaks], marker="^", s=70, color="C3", zorder=3,
                           label=f"peak, angle ≤ {SHARP_ANGLE:g}°")
            if valleys:
                ax.scatter(100 * x[valleys], ys[valleys], marker="v", s=70, color="C2", zorder=3,
                           label=f"valley, angle ≤ {SHARP_ANGLE:g}°")
        else:
            sharp = np.zeros(0, dtype=np.int64)
            ax.text(0.5, 0.5, "no positions", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlim(0, 100)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("% of story revealed")
        ax.set_ylabel("no-rate")
        ax.set_title(title or story_id, fontsize=10)
        ax.grid(alpha=0.3)
        if len(x):
            ax.legend(fontsize=7, loc="lower left")
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return np.asarray(sharp, dtype=np.int64)


def bars_figure(path: str | Path, groups: dict[str, dict[str, GroupStat]], stats: Sequence[str],
                labels: Sequence[str], title: str, ylabel: str, scale: float = 1.0) -> None:
    """Bars per group (x) and statistic (colour) with bootstrap 95% intervals
    (the normal interval where the bootstrap is undefined)."""
    names = list(next(iter(groups.values()))) if groups else []
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(names) * len(stats) + 1.5), 3.8), dpi=110)
    try:
        width = 0.8 / max(1, len(stats))
        xs = np.arange(len(names))
        for k, (stat, label) in enumerate(zip(stats, labels)):
            means, lows, highs = [], [], []
            for g in names:
                s = groups[stat][g]
                m = s.mean * scale
                lo, hi = s.boot_lo, s.boot_hi
                if math.isnan(lo) and not math.isnan(s.ci95):
                    lo, hi = s.mean - s.ci95, s.mean + s.ci95
                means.append(m)
                lows.append(0.0 if math.isnan(lo) else m - lo * scale)
                highs.append(0.0 if math.isnan(hi) else hi * scale - m)
            ax.bar(xs + (k - (len(stats) - 1) / 2) * width, np.nan_to_num(means), width, label=label,
                   yerr=[lows, highs], capsize=3, color=f"C{k}", alpha=0.85)
        ax.set_xticks(xs, names)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        if len(stats) > 1:
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
