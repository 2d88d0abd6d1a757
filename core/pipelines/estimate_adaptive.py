"""`estimate --target-half-width W`: the cost of adaptive endings (docs/metrics.md 1.7,
docs/cost.md). Its range: every position stopping after the first round, … every
position at --max-endings; with `--pilot RUN_DIR`, the expected cost, from the no-rate
of each position of an earlier score run (its positions.jsonl): the expected endings
under the stopping rule at that no-rate, exact from the binomial (kernels/stopping.py),
averaged over the pilot's positions and multiplied by this corpus's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from tension.core.config import ScoreConfig
from tension.core.errors import InputError
from tension.core.formats import PositionLine

if TYPE_CHECKING:
    from tension.core.pipelines.estimate import Estimate

__all__ = ["AdaptiveCost", "CachedRounds", "CostRow", "Pilot", "PILOT_MIN_ENDINGS", "read_pilot", "adaptive_cost",
           "adaptive_lines"]


class CostRow(msgspec.Struct, kw_only=True):
    endings: float
    ending_tokens: float  # endings × E
    gpu_hours: float | None = None  # generation + judge, at the throughput given


class CachedRounds(msgspec.Struct, kw_only=True):
    """What the cache holds of a target's rounds (review D10), as the run drew them
    (score/lookup.py's walk): rounds and endings found, positions whose rule has
    stopped them (complete), and the most endings left to send."""

    rounds: int = 0
    endings: int = 0
    positions: int = 0
    complete: int = 0
    to_send_max: int = 0


class AdaptiveCost(msgspec.Struct, kw_only=True):
    target_half_width: float
    round_endings: int
    max_endings: int
    rows: dict[str, CostRow]  # "first round", ("expected",) "maximum"
    pilot: str | None = None
    pilot_positions: int = 0
    pilot_endings: int = 0  # the pilot's median endings a position
    cached: CachedRounds | None = None  # None: the cache was not checked


class Pilot(msgspec.Struct, kw_only=True):
    """The no-rate and the endings of each position of a pilot run."""

    no_rates: list[float]
    endings: list[int]

    def median_endings(self) -> int:
        s = sorted(self.endings)
        return s[len(s) // 2] if s else 0


# A pilot of fewer endings a position than this has its no-rates on a coarse grid (4
# endings: 0, ¼, ½, ¾, 1): taken as the true p they misstate the expected count (review D8).
PILOT_MIN_ENDINGS = 20


def read_pilot(run_dir: str | Path) -> Pilot:
    """The no-rate and endings of each position of the pilot run (a score run folder)."""
    path = Path(run_dir) / "positions.jsonl"
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(str(path), 0, None, f"cannot be read ({e.strerror or e}); --pilot expects the folder of "
                         "an earlier score run") from None
    dec = msgspec.json.Decoder(PositionLine)
    out: list[float] = []
    endings: list[int] = []
    for i, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = dec.decode(raw)
        except msgspec.DecodeError as e:
            raise InputError(str(path), i, None, f"{e} (the --pilot run's positions)") from None
        if line.n_endings <= 0:
            raise InputError(str(path), i, "n_endings", f"expected > 0 (a --pilot run that kept its counts), "
                             f"got {line.n_endings}")
        out.append(1.0 - line.n_match / line.n_endings)
        endings.append(line.n_endings)
    if not out:
        raise InputError(str(path), 0, None, "holds no position (the --pilot run's positions)")
    return Pilot(no_rates=out, endings=endings)


def adaptive_cost(cfg: ScoreConfig, est: Estimate, pilot: Pilot | None = None,
                  pilot_dir: str | None = None) -> AdaptiveCost | None:
    """The cost rows of `cfg`'s target over `est`'s positions (None without a target)."""
    if cfg.target_half_width is None:
        return None
    from tension.core.pipelines.throughput import endings_gpu_hours
    from tension.kernels.stopping import expected_endings

    per_position = {"first round": float(min(cfg.round_endings, cfg.max_endings))}
    if pilot is not None:
        # the rule's expected endings are a function of p alone: one per distinct p
        memo: dict[float, float] = {}
        for p in pilot.no_rates:
            if p not in memo:
                memo[p] = expected_endings(p, cfg.round_endings, cfg.max_endings, cfg.target_half_width)
        per_position["expected"] = sum(memo[p] for p in pilot.no_rates) / len(pilot.no_rates)
    per_position["maximum"] = float(cfg.max_endings)
    thr = est.throughput
    rows = {}
    for name, n in per_position.items():
        endings = n * est.positions
        hours = endings_gpu_hours(endings, est.ending_tokens, thr) if thr is not None else None
        rows[name] = CostRow(endings=endings, ending_tokens=endings * est.ending_tokens, gpu_hours=hours)
    return AdaptiveCost(cached=est.adaptive_cached, target_half_width=cfg.target_half_width,
                        round_endings=cfg.round_endings,
                        max_endings=cfg.max_endings, rows=rows, pilot=pilot_dir,
                        pilot_positions=len(pilot.no_rates) if pilot is not None else 0,
                        pilot_endings=pilot.median_endings() if pilot is not None else 0)


def adaptive_lines(a: AdaptiveCost) -> list[str]:
    """The lines `estimate` prints under its table."""
    out = [f"adaptive endings: target half-width {a.target_half_width:g}, rounds of {a.round_endings}, at most "
           f"{a.max_endings} (docs/metrics.md 1.7); the rows above are of --endings"]
    for name, r in a.rows.items():
        label = f"expected (pilot: {a.pilot_positions:,} positions of {a.pilot})" if name == "expected" else name
        hours = f", {r.gpu_hours:.3f} GPU-hours" if r.gpu_hours is not None else ""
        out.append(f"  {label}: {r.endings:,.0f} endings, {r.ending_tokens:,.0f} ending tokens{hours}")
    if a.cached is not None:
        c = a.cached
        out.append(f"  cached rounds: {c.rounds:,} rounds, {c.endings:,} endings of {c.positions:,} positions "
                   f"({c.complete:,} complete by the rule); to send: {c.to_send_max:,} endings at most")
    if a.pilot is not None and a.pilot_endings < PILOT_MIN_ENDINGS:
        out.append(f"  warning: the pilot's no-rates rest on {a.pilot_endings} endings a position (its median): "
                   f"they lie on a grid of 1/{a.pilot_endings} and taken as the true no-rates misstate the expected "
                   "count; "
                   f"a pilot of {PILOT_MIN_ENDINGS} endings or more gives a figure to plan by")
    return out
