"""The settings of the kernels: the choices docs/metrics.md 1.4 and 2.2–2.3 fix, with the
paper's defaults.

They live apart from the kernels so that reading them (the CLI builds its flags
and their help from these fields) imports neither numba nor numpy nor scipy.
Each field carries its help text and flag group as ``msgspec.Meta`` metadata;
a Meta with only a description and ``extra`` adds no constraint, so decoding and
its errors are unchanged. ``curves`` and ``fairplay`` re-export the two Structs.
"""

from __future__ import annotations

import math
from typing import Annotated

import msgspec

__all__ = ["CURVE_GROUP", "CurveSettings", "FAIRPLAY_GROUP", "FairPlaySettings", "LateThreshold",
           "RetentionWindow", "TIE_RULES", "Thresholds", "Window"]

CURVE_GROUP = "curve statistics (docs/metrics.md 1.4; defaults are the paper's)"
TIE_RULES = ("split", "miss")
FAIRPLAY_GROUP = "fair-play metrics (docs/fairplay.md; defaults are the paper's)"


def _curve(description: str, **extra) -> msgspec.Meta:
    return msgspec.Meta(description=description, extra={"group": CURVE_GROUP, **extra})


def _fairplay(description: str, **extra) -> msgspec.Meta:
    return msgspec.Meta(description=description, extra={"group": FAIRPLAY_GROUP, **extra})


# The curve fields as types, so that ScoreConfig (whose curve keys a config file
# may set) carries the same help as CurveSettings without a second copy.
Window = Annotated[int, _curve("centered moving-average window over positions, odd (1 = none)")]
Thresholds = Annotated[tuple[float, ...], _curve("vertex-angle thresholds in degrees for the inflection rate",
                                                 metavar="A,B,…")]
LateThreshold = Annotated[float, _curve("late NR averages positions with pct >= this")]
RetentionWindow = Annotated[int, _curve("positions after a peak searched for its low")]


class CurveSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The choices docs/metrics.md 1.4 fixes; every one is a flag of `tension-run metrics`."""

    window: Window = 5
    thresholds: Thresholds = (30.0, 60.0, 120.0)
    late_threshold: LateThreshold = 0.80
    retention_window: RetentionWindow = 10

    def __post_init__(self) -> None:
        if self.window < 1 or self.window % 2 == 0:
            raise ValueError(f"window: expected an odd integer >= 1, got {self.window}")
        if not self.thresholds:
            raise ValueError("thresholds: expected at least one angle")
        for a in self.thresholds:
            if not 0.0 < a <= 180.0:
                raise ValueError(f"thresholds: expected angles in (0, 180], got {a}")
        if not 0.0 <= self.late_threshold <= 1.0:
            raise ValueError(f"late_threshold: expected a share of the story in [0, 1], got {self.late_threshold}")
        if self.retention_window < 1:
            raise ValueError(f"retention_window: expected >= 1, got {self.retention_window}")


class FairPlaySettings(msgspec.Struct, frozen=True, kw_only=True):
    """The choices docs/fairplay.md fixes; the ones with a group are flags of
    `fairplay-metrics` and `fairplay`, the others are set from Python only."""

    eps: Annotated[float, _fairplay("clip probabilities inside log")] = 1e-6
    eps_surprise: Annotated[float, _fairplay("weak surprise: U >= log|Y| - this")] = 0.1
    delta_surprise: Annotated[float, _fairplay("strong surprise: U >= log|Y| + this")] = 0.1
    ties: Annotated[str, _fairplay(
        "split: a tie for the maximum splits the hit among the tied suspects (the authors' rule); "
        "miss: a tie is a miss", metavar="split|miss", choices=TIE_RULES)] = "split"
    tie_eps: Annotated[float, msgspec.Meta(description="values this close to the maximum tie with it")] = 1e-12
    early_steps: Annotated[tuple[int, ...], _fairplay(
        "paragraphs checked for early convergence, M*(i)_culprit > 0.5", metavar="I,J,…")] = (1, 3, 5)
    early_threshold: Annotated[float, msgspec.Meta(description="early convergence: M*(i)_culprit > this")] = 0.5
    bins: Annotated[int, _fairplay("relative positions of the pooled reading curves")] = 25
    confidence: Annotated[float, msgspec.Meta(description="Clopper–Pearson level of the pooled hit curves")] = 0.95

    def __post_init__(self) -> None:
        for name in ("eps", "eps_surprise", "delta_surprise", "tie_eps", "early_threshold", "confidence"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"{name}: expected a finite number >= 0, got {v}")
        if not 0.0 < self.eps < 1.0:
            raise ValueError(f"eps: expected a probability in (0, 1), got {self.eps}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence: expected a level in (0, 1), got {self.confidence}")
        if self.ties not in TIE_RULES:
            raise ValueError(f"ties: expected one of {', '.join(TIE_RULES)}, got {self.ties!r}")
        if self.bins < 1:
            raise ValueError(f"bins: expected >= 1, got {self.bins}")
        if any(i < 1 for i in self.early_steps):
            raise ValueError(f"early_steps: expected paragraph numbers >= 1, got {self.early_steps}")
