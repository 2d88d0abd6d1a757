"""The evidence for the corrected second-order statistics (docs/metrics.md 1.8): on
simulated stories of the shapes of `tension.testing.precision` (binomial verdicts from
known noise-free curves, each story's level shifted as `simulated_verdicts` does), the
group mean of each statistic raw and corrected at 20 and at 100 endings a position,
against the group mean of the noise-free curves' values. bench/corrected.py prints the
table, tests/kernels/test_corrected_simulation.py holds the bar."""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np

from tension.kernels import curves
from tension.kernels.curves import CurveSettings
from tension.kernels.denoise import corrected_stats
from tension.kernels.subsample import first_k_counts
from tension.testing.precision import SHAPES, simulated_verdicts

__all__ = ["SECOND_ORDER", "Cell", "corrected_table", "format_table"]

# stories.csv's column index of each second-order statistic
SECOND_ORDER = {"retain": 2, "convergence": 3, "ir30": 4, "ir60": 5, "ir120": 6}


class Cell(msgspec.Struct, frozen=True, kw_only=True):
    """One shape and statistic: group means (NaN stories left out) and how many stories
    define the statistic, raw and corrected at each n, and noise-free."""

    shape: str
    stat: str
    truth: float
    truth_defined: int
    stories: int
    raw: dict[int, float]
    corrected: dict[int, float]
    raw_defined: dict[int, int]
    corrected_defined: dict[int, int]

    def error(self, which: str, n: int) -> float:
        return abs(getattr(self, which)[n] - self.truth)

    def gap(self, which: str, a: int, b: int) -> float:
        v = getattr(self, which)
        return abs(v[a] - v[b])


def _mean(values: np.ndarray) -> float:
    ok = values[np.isfinite(values)]
    return float(ok.mean()) if len(ok) else math.nan


def corrected_table(stories: int = 32, m: int = 150, seed: int = 0, ns: Sequence[int] = (20, 100),
                    shapes: Sequence[str] | None = None, settings: CurveSettings = CurveSettings()) -> list[Cell]:
    """A cell per shape and second-order statistic. The endings at a smaller n are the
    first n of the largest's, as a run at `--endings n` with the same seed draws them. A
    statistic the noise-free curve leaves undefined in a story (Retain without a peak)
    is compared on the stories that define it; where no story does, the cell's truth is
    NaN and the shares defined are what can be compared."""
    names = list(shapes or SHAPES)
    top = max(ns)
    out: list[Cell] = []
    for si, name in enumerate(names):
        v, truth = simulated_verdicts(stories, m, top, seed + si, shapes=[name])
        t = curves.batch_stats(np.concatenate([truth[s][0] for s in v.ids]),
                               np.concatenate([truth[s][1] for s in v.ids]), v.offsets, settings)
        tm = np.column_stack([t.mean_nr, t.late_nr, t.retain, t.convergence, t.ir])
        raw, cor = {}, {}
        for n in ns:
            nn, kk = first_k_counts(v.match, v.starts, n)
            r = curves.batch_stats(v.x, 1.0 - kk / nn, v.offsets, settings)
            raw[n] = np.column_stack([r.mean_nr, r.late_nr, r.retain, r.convergence, r.ir])
            cor[n] = corrected_stats(v.x, nn, kk, v.offsets, settings)
        for stat, j in SECOND_ORDER.items():
            defined = np.isfinite(tm[:, j])
            on = defined if defined.any() else np.ones(len(defined), dtype=bool)
            out.append(Cell(shape=name, stat=stat, truth=_mean(tm[:, j]), truth_defined=int(defined.sum()),
                            stories=stories, raw={n: _mean(raw[n][on, j]) for n in ns},
                            corrected={n: _mean(cor[n][on, j]) for n in ns},
                            raw_defined={n: int(np.isfinite(raw[n][:, j]).sum()) for n in ns},
                            corrected_defined={n: int(np.isfinite(cor[n][:, j]).sum()) for n in ns}))
    return out


def _f(v: float, stat: str) -> str:
    if not math.isfinite(v):
        return "—"
    return f"{v:.1f}" if stat in ("retain", "convergence") else f"{v:.3f}"


def format_table(cells: Sequence[Cell], ns: Sequence[int] = (20, 100)) -> str:
    """The markdown table of docs/metrics.md 1.8."""
    a, b = ns
    lines = [f"| shape | statistic | noise-free | raw at {a} / {b} | corrected at {a} / {b} | "
             f"closer at {a} and {b}, and to each other |",
             "|---|---|---:|---:|---:|---|"]
    for c in cells:
        if math.isfinite(c.truth):
            pairs = [(c.error("corrected", a), c.error("raw", a)), (c.error("corrected", b), c.error("raw", b)),
                     (c.gap("corrected", a, b), c.gap("raw", a, b))]
            if all(abs(u - v) <= 1e-9 for u, v in pairs):
                verdict = "equal"  # both at the value already: nothing to correct
            elif all(u < v for u, v in pairs):
                verdict = "yes"
            elif all(u <= v + 1e-9 for u, v in pairs):
                verdict = "closer or equal"  # raw already at the value at one n
            else:
                verdict = "**no**"
            truth = _f(c.truth, c.stat)
            if c.truth_defined < c.stories:
                truth += f" ({c.truth_defined} of {c.stories} stories)"
            raw = f"{_f(c.raw[a], c.stat)} / {_f(c.raw[b], c.stat)}"
            cor = f"{_f(c.corrected[a], c.stat)} / {_f(c.corrected[b], c.stat)}"
        else:
            verdict = "defined in fewer stories" if all(
                c.corrected_defined[n] < c.raw_defined[n] for n in ns) else "**no**"
            truth = f"undefined (no peak) in all {c.stories}"
            raw = " / ".join(f"{c.raw_defined[n]} def." for n in ns)
            cor = " / ".join(f"{c.corrected_defined[n]} def." for n in ns)
        lines.append(f"| {c.shape} | {c.stat} | {truth} | {raw} | {cor} | {verdict} |")
    return "\n".join(lines)
