"""The figure of `tension-run subsample`: each named statistic against k, one line per
group (the first-k group mean, with the 95 % band of a rerun at k), the full-n mean as
a dashed line and its 95 % interval shaded; for Retain, convergence and the IRs, the
corrected value (the comparable statistic, docs/metrics.md 1.8–1.9) as a dash-dotted line."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from tension.core.reports.figures import BARS_SIZE, glyphs_quiet, new_figure, save_png
from tension.core.reports.subsampling import Subsampling

__all__ = ["subsampling_figure"]


@glyphs_quiet
def subsampling_figure(path: str | Path | BinaryIO, s: Subsampling, stats: Sequence[str] | None = None) -> None:
    stats = list(stats or s.recommendation.stats)
    fig = new_figure(BARS_SIZE)
    axes = fig.subplots(1, len(stats), squeeze=False)
    groups = list(dict.fromkeys(r.group for r in s.rows))
    corrected = {(nr.stat, nr.group): nr.corrected for nr in s.noise}
    for ax, stat in zip(axes[0], stats):
        for c, g in enumerate(groups):
            rows = [r for r in s.rows if r.stat == stat and r.group == g]
            if not rows:
                continue
            ks = np.array([r.k for r in rows])
            first = np.array([r.first for r in rows])
            band = 1.96 * np.array([r.rerun_spread for r in rows])
            full, half = rows[-1].full, rows[-1].full_ci95
            ax.plot(ks, first, "o-", color=f"C{c}", ms=3, lw=1, label=g)
            ax.fill_between(ks, first - band, first + band, color=f"C{c}", alpha=0.15, lw=0)
            ax.axhline(full, color=f"C{c}", ls="--", lw=0.8)
            if np.isfinite(half):
                ax.axhspan(full - half, full + half, color=f"C{c}", alpha=0.07, lw=0)
            if np.isfinite(corrected.get((stat, g), np.nan)):
                ax.axhline(corrected[(stat, g)], color=f"C{c}", ls="-.", lw=0.8)
        if s.recommendation.k is not None and stat in s.recommendation.stats:
            ax.axvline(s.recommendation.k, color="0.3", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("endings a position (k)")
        ax.set_title(stat, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, frameon=False)
    note = ", dash-dot: corrected" if any(st in {nr.stat for nr in s.noise} for st in stats) else ""
    fig.suptitle(f"group means from k of {s.n} endings (dashed: n = {s.n}, shaded: its 95 % interval{note})",
                 fontsize=9)
    save_png(fig, path)
