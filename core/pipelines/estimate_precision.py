"""`estimate --pilot RUN_DIR`: the endings a position the headline statistics need,
from the pilot's own cached verdicts (`tension-run subsample`, docs/metrics.md 1.8),
and the cost of this corpus at that number beside its cost at --endings (the paper's
100 by default). The defaults stay the paper's: this only says what fewer would give."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from tension.core.errors import ConfigError, InputError, TensionError
from tension.core.pipelines.estimate_adaptive import CostRow

if TYPE_CHECKING:
    from tension.core.config import ScoreConfig
    from tension.core.pipelines.estimate import Estimate
    from tension.core.pipelines.subsample import SubsampleResult

__all__ = ["PrecisionCost", "pilot_subsample", "precision_cost", "precision_lines"]


class PrecisionCost(msgspec.Struct, kw_only=True):
    pilot: str
    stats: list[str]
    pilot_endings: int  # the pilot's n
    k: int | None  # the recommended endings a position; None: none below the pilot's n (`why`)
    why: str
    rows: dict[str, CostRow]  # "at k", "at --endings"
    endings: int  # --endings


def pilot_subsample(pilot: str | Path, required: bool) -> SubsampleResult | str:
    """The pilot's subsampling, or why it cannot be had (a ConfigError when `required`:
    --pilot without --target-half-width has nothing else to give)."""
    from tension.core.pipelines.score.recall import run_record
    from tension.core.pipelines.subsample import run_subsample

    try:
        run_record(Path(pilot), "--pilot")  # a folder that is no run is said as the flag it was given to (E31)
        return run_subsample(pilot)
    except TensionError as e:
        if required:
            why = ("the recommended endings are read from a finished score run's cached verdicts (and the expected "
                   "cost of adaptive endings needs --target-half-width)")
            if isinstance(e, InputError):  # the pilot run is the input: exit 1, as a missing corpus
                raise InputError(e.path, e.line, e.field, f"{e.message}; {why}") from None
            raise ConfigError(f"--pilot {pilot}: {e}; {why}") from None
        return str(e)


def precision_cost(cfg: ScoreConfig, est: Estimate, pilot: str | Path, sub: SubsampleResult) -> PrecisionCost:
    from tension.core.pipelines.throughput import endings_gpu_hours

    rec = sub.result.recommendation
    rows = {}
    for name, n in (("at k", rec.k), ("at --endings", cfg.endings)):
        if n is None:
            continue
        endings = n * est.positions
        hours = endings_gpu_hours(endings, est.ending_tokens, est.throughput) if est.throughput else None
        rows[name] = CostRow(endings=endings, ending_tokens=endings * est.ending_tokens, gpu_hours=hours)
    return PrecisionCost(pilot=str(pilot), stats=rec.stats, pilot_endings=rec.n, k=rec.k, why=rec.why, rows=rows,
                         endings=cfg.endings)


def precision_lines(p: PrecisionCost) -> list[str]:
    """The lines `estimate` prints under its table."""
    out = [f"endings by the question (pilot {p.pilot}, its cached verdicts; docs/metrics.md 1.8):"]
    if p.k is None:
        out.append(f"  {', '.join(p.stats)} need all of the pilot's {p.pilot_endings} endings ({p.why})")
    else:
        out.append(f"  {', '.join(p.stats)}: {p.k} endings a position keep every group mean and interval within the "
                   f"tolerances of the pilot's {p.pilot_endings}")
    for name, r in p.rows.items():
        n = p.k if name == "at k" else p.endings
        label = f"at {n} endings" + (" (--endings)" if name == "at --endings" else " (recommended)")
        hours = f", {r.gpu_hours:.3f} GPU-hours" if r.gpu_hours is not None else ""
        out.append(f"  {label}: {r.endings:,.0f} endings, {r.ending_tokens:,.0f} ending tokens{hours}")
    out.append("  IR, Retain and convergence move with the endings (docs/metrics.md 1.6): keep --endings for them")
    return out
