"""The settings of the kernels: the choices docs/metrics.md 1.4 and 2.2–2.3 fix, with the
paper's defaults.

They live apart from the kernels so that reading them (the CLI builds its flags
and their help from these fields) imports neither numba nor numpy nor scipy.
Each field carries its help text and flag group as ``msgspec.Meta`` metadata;
a Meta with only a description and ``extra`` adds no constraint, so decoding and
its errors are unchanged. ``curves`` and ``fairplay`` re-export the two Structs.
"""

from __future__ import annotations

import functools
import math
import typing
from typing import Annotated

import msgspec

__all__ = ["Bounds", "bounds_of", "check_bounds", "INT_MIN", "INT_MAX", "CURVE_GROUP", "CurveSettings",
           "FAIRPLAY_GROUP", "FairPlaySettings", "IntervalResamples", "IntervalSeed", "LateThreshold",
           "RetentionWindow", "TIE_RULES", "Thresholds",
           "Window", "MIN_INTERVAL_RESAMPLES", "check_interval_resamples", "SUBSAMPLE_KS", "SUBSAMPLE_STATS",
           "SHIFT_TOLERANCE", "WIDTH_TOLERANCE", "SUBSAMPLE_DRAWS"]

# Every integer setting lies in int64: msgpack (the cache keys), numba (the kernels),
# JSON servers and run records all hold it; 2**80 is a usage error, not a failed run.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


class Bounds(msgspec.Struct, frozen=True, kw_only=True):
    """The values a numeric setting may take, declared with its field (the
    ``bounds`` key of its Meta's extra) and checked from there, for a flag, a
    config key and a Python caller alike (`check_bounds`). A float must also be
    finite (nan passes no comparison; inf is no setting), an integer lie in int64;
    a sequence's or list's items are checked one by one."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    noun: str | None = None  # what a message calls the value ("a share"); default "an integer" / "a number"

    def expected(self, value: float, integer: bool) -> str | None:
        """What a value must be, when `value` is not that; None when it is."""
        lo_ok = (self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
        hi_ok = (self.le is None or value <= self.le) and (self.lt is None or value < self.lt)
        if integer:
            fits = INT_MIN <= value <= INT_MAX
        else:
            fits = math.isfinite(value)
        if lo_ok and hi_ok and fits:
            return None
        # a value below the bounds is told the lower one only, as these messages have always read
        return self.text(integer, value, lower_only=not lo_ok and not math.isnan(value))

    def text(self, integer: bool, value: float | None = None, lower_only: bool = False) -> str:
        """"an integer >= 1", "a number in (0, 1]", "a finite number >= 0", …"""
        kind = self.noun or ("an integer" if integer else "a number")
        lo = (">=", self.ge) if self.ge is not None else (">", self.gt) if self.gt is not None else None
        hi = ("<=", self.le) if self.le is not None else ("<", self.lt) if self.lt is not None else None
        if lower_only and lo and not (lo[1] == 0 and hi and hi[1] == 1):  # a share keeps its [0, 1]
            hi = None
        if lo and hi:
            left, right = "[" if lo[0] == ">=" else "(", "]" if hi[0] == "<=" else ")"
            text = f"{kind} in {left}{_num(lo[1])}, {_num(hi[1])}{right}"
        elif lo or hi:
            op, v = lo or hi  # type: ignore[misc]
            text = f"{kind} {op} {_num(v)}"
        else:
            text = kind
        if not integer and value is not None and not math.isfinite(value) and not (lo and hi):
            text = text.replace("a number", "a finite number")
        if integer and value is not None and not INT_MIN <= value <= INT_MAX and not hi:
            text += " (at most 2**63 - 1)"
        return text


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def bounds_of(struct: type) -> dict[str, tuple[Bounds, bool]]:
    """The declared Bounds of a Struct's numeric fields, with whether each holds integers."""
    return _bounds_of(struct)


@functools.cache
def _bounds_of(struct: type) -> dict[str, tuple[Bounds, bool]]:
    out = {}
    for f in msgspec.structs.fields(struct):
        metas = [m for m in typing.get_args(f.type)[1:] if isinstance(m, msgspec.Meta)]
        b = next((m.extra["bounds"] for m in metas if m.extra and "bounds" in m.extra), None)
        if b is not None:
            out[f.name] = (b, int in _numbers(typing.get_args(f.type)[0]))
    return out


def _numbers(tp) -> set[type]:
    """The number types a field's type holds (int | None, tuple[float, ...], int | list[int] …)."""
    if tp in (int, float):
        return {tp}
    return {t for a in typing.get_args(tp) for t in _numbers(a)}


def check_bounds(obj: msgspec.Struct) -> None:
    """Raise ValueError("field: expected …, got …") for the first field outside its declared Bounds."""
    for name, (b, integer) in bounds_of(type(obj)).items():
        value = getattr(obj, name)
        items = value if isinstance(value, (tuple, list)) else () if value is None else (value,)
        for v in items:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if (what := b.expected(v, integer)) is not None:
                raise ValueError(f"{name}: expected {what}, got {value!r}")


CURVE_GROUP = "curve statistics (docs/metrics.md 1.4; defaults are the paper's)"
TIE_RULES = ("split", "miss")
FAIRPLAY_GROUP = "fair-play metrics (docs/fairplay.md; defaults are the paper's)"


def _curve(description: str, **extra) -> msgspec.Meta:
    return msgspec.Meta(description=description, extra={"group": CURVE_GROUP, **extra})


def _fairplay(description: str, **extra) -> msgspec.Meta:
    return msgspec.Meta(description=description, extra={"group": FAIRPLAY_GROUP, **extra})


# The curve fields as types, so that ScoreConfig (whose curve keys a config file
# may set) carries the same help as CurveSettings without a second copy.
Window = Annotated[int, _curve("centered moving-average window over positions, odd (1 = none)", bounds=Bounds(ge=1))]
Thresholds = Annotated[tuple[float, ...], _curve("vertex-angle thresholds in degrees for the inflection rate",
                                                 metavar="A,B,…", bounds=Bounds(gt=0, le=180))]
LateThreshold = Annotated[float, _curve("late NR averages positions with pct >= this", bounds=Bounds(ge=0, le=1))]
RetentionWindow = Annotated[int, _curve("positions after a peak searched for its low", bounds=Bounds(ge=1))]
# The per-story intervals (docs/metrics.md 1.6). More resamples than this is time, not
# precision: at 1,000 an interval's ends move by well under its width's tenth. Fewer than
# MIN_INTERVAL_RESAMPLES (other than 0, none) are refused: at 100 each 2.5 % tail rests on
# 2.5 resamples, the fewest that place it at all (review I1: 1 gave zero-width intervals).
MIN_INTERVAL_RESAMPLES = 100
IntervalResamples = Annotated[int, _curve(
    "resamples of each story's verdicts for its 95% intervals (stories.csv's *_lo/*_hi; 0 = none, else at least 100)",
    bounds=Bounds(ge=0, le=100_000))]
IntervalSeed = Annotated[int, _curve("seed of the per-story intervals' resamples (with each story's id)",
                                     bounds=Bounds(ge=0))]


def check_interval_resamples(n: int, name: str = "interval_resamples") -> None:
    """0 (no intervals) or at least MIN_INTERVAL_RESAMPLES, else a ValueError naming `name`."""
    if 0 < n < MIN_INTERVAL_RESAMPLES:
        raise ValueError(f"{name}: expected 0 (no intervals) or at least {MIN_INTERVAL_RESAMPLES}, got {n}: a 95 % "
                         "interval's ends are the 2.5th and 97.5th percentiles of the resamples, which fewer than "
                         f"{MIN_INTERVAL_RESAMPLES} cannot place (one resample gives an interval of zero width)")


class CurveSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The choices docs/metrics.md 1.4 fixes; every one is a flag of `tension-run metrics`."""

    window: Window = 5
    thresholds: Thresholds = (30.0, 60.0, 120.0)
    late_threshold: LateThreshold = 0.80
    retention_window: RetentionWindow = 10
    interval_resamples: IntervalResamples = 1000
    interval_seed: IntervalSeed = 0

    def __post_init__(self) -> None:
        if self.window < 1 or self.window % 2 == 0:
            raise ValueError(f"window: expected an odd integer >= 1, got {self.window}")
        if not self.thresholds:
            raise ValueError("thresholds: expected at least one angle")
        for i, a in enumerate(self.thresholds):
            if not 0.0 < a <= 180.0:
                raise ValueError(f"thresholds: expected angles in (0, 180], got {a}")
            if a in self.thresholds[:i]:  # one angle is one column (ir60): twice, stories.csv would hold two
                raise ValueError(f"thresholds: the angle {a:g} is given twice; give each angle once")
        if not 0.0 <= self.late_threshold <= 1.0:
            raise ValueError(f"late_threshold: expected a share of the story in [0, 1], got {self.late_threshold}")
        if self.retention_window < 1:
            raise ValueError(f"retention_window: expected >= 1, got {self.retention_window}")
        check_interval_resamples(self.interval_resamples)
        check_bounds(self)  # the declared bounds: the checks above say it better where they apply


class FairPlaySettings(msgspec.Struct, frozen=True, kw_only=True):
    """The choices docs/fairplay.md fixes; the ones with a group are flags of
    `fairplay-metrics` and `fairplay`, the others are set from Python only."""

    eps: Annotated[float, _fairplay("clip probabilities inside log", bounds=Bounds(gt=0, lt=1))] = 1e-6
    eps_surprise: Annotated[float, _fairplay("weak surprise: U >= log|Y| - this", bounds=Bounds(ge=0))] = 0.1
    delta_surprise: Annotated[float, _fairplay("strong surprise: U >= log|Y| + this", bounds=Bounds(ge=0))] = 0.1
    ties: Annotated[str, _fairplay(
        "split: a tie for the maximum splits the hit among the tied suspects (the authors' rule); "
        "miss: a tie is a miss", metavar="split|miss", choices=TIE_RULES)] = "split"
    tie_eps: Annotated[float, msgspec.Meta(description="values this close to the maximum tie with it",
                                           extra={"bounds": Bounds(ge=0)})] = 1e-12
    early_steps: Annotated[tuple[int, ...], _fairplay(
        "paragraphs checked for early convergence, M*(i)_culprit > 0.5", metavar="I,J,…",
        bounds=Bounds(ge=1, le=100_000))] = (1, 3, 5)
    early_threshold: Annotated[float, msgspec.Meta(description="early convergence: M*(i)_culprit > this",
                                                   extra={"bounds": Bounds(ge=0, le=1)})] = 0.5
    bins: Annotated[int, _fairplay("relative positions of the pooled reading curves",
                                   bounds=Bounds(ge=1, le=100_000))] = 25
    confidence: Annotated[float, msgspec.Meta(description="Clopper–Pearson level of the pooled hit curves",
                                              extra={"bounds": Bounds(gt=0, lt=1)})] = 0.95

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
        check_bounds(self)


# `tension-run subsample` (docs/metrics.md 1.8), here without numba for its --help: the
# grid of k (a few endings up to the paper's 100; the run's own n is always added), the
# headline statistics a recommendation is for, and its tolerances: a group mean may move
# by a quarter of its own 95 % half-width (the paper's ±0.05 on mean NR: ±0.0125), its
# interval may widen by 10 %; random subsets per k.
SUBSAMPLE_KS = (2, 5, 10, 15, 20, 30, 40, 50, 60, 80, 100)
SUBSAMPLE_STATS = ("mean_nr", "late_nr")
SHIFT_TOLERANCE = 0.25
WIDTH_TOLERANCE = 0.10
SUBSAMPLE_DRAWS = 20
