"""The run's judged verdicts by story group, part of the story and the judge's answer (issue 60;
docs/metrics.md 1.10): the population an audit sample is drawn from and weighted back to.

`audit sample` keeps these counts in audit/sample.json when it draws. The run folder can
change under its sample afterwards: `score` run again into it with other settings (other
endings, seed, judge) replaces positions.jsonl, stories.csv and groups.csv but keeps the
audit folder, and a sample.json copied from another run reads as well as its own. The
people's labels then describe verdicts the run no longer holds, and the corrected group
statistics would mix that judge's error rates with these no-rates: `sample_mismatch` says
so by comparing the counts kept with the counts of the positions.jsonl there now.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path

from tension.core.errors import InputError
from tension.core.formats import PositionLine
from tension.core.inputs.jsonl import decode_line, iter_lines
from tension.core.inputs.labels import AUDIT_DIR, Count, Sample

__all__ = ["PARTS", "part_of", "verdict_counts", "run_counts", "sample_mismatch"]

PARTS = ("early", "middle", "late")


def part_of(pct: float) -> str:
    """early / middle / late: the third of the story the reader had seen."""
    return PARTS[0] if pct < 1 / 3 else PARTS[1] if pct < 2 / 3 else PARTS[2]


def verdict_counts(lines: Iterable[PositionLine]) -> list[Count]:
    """Judge-no and judge-yes verdicts per (group, part), sorted: a position's n_match are the
    judge's yes, its other non-empty endings its no (a malformed answer as the no-rate counts it)."""
    counts: dict[tuple[str, str], list[int]] = {}
    for ln in lines:
        c = counts.setdefault((ln.group, part_of(ln.pct)), [0, 0])
        c[0] += ln.n_endings - ln.n_match - ln.n_empty
        c[1] += ln.n_match
    return [Count(group=g, part=p, no=c[0], yes=c[1]) for (g, p), c in sorted(counts.items())]


def run_counts(run_dir: str | os.PathLike) -> list[Count] | None:
    """The counts of the run's positions.jsonl as it is now; None when it has none (a folder
    holding only the report's files) or a line of it cannot be read (its own verbs say which)."""
    path = Path(run_dir) / "positions.jsonl"
    if not path.is_file():
        return None
    try:
        return verdict_counts(decode_line(str(path), n, raw, PositionLine) for n, raw in iter_lines(path))
    except (InputError, OSError):  # an unreadable line: nothing to compare (the run's own verbs say which)
        return None


def _total(counts: Iterable[Count]) -> tuple[int, int]:
    cs = list(counts)
    return sum(c.no for c in cs), sum(c.yes for c in cs)


def sample_mismatch(run_dir: str | os.PathLike, sample: Sample) -> str | None:
    """Why the sample is not of the verdicts the run holds now (its counts differ from
    positions.jsonl's), with the way out; None when they agree or there is nothing to compare."""
    now = run_counts(run_dir)
    if now is None or now == sample.counts:
        return None
    d, audit = shlex.quote(str(run_dir)), Path(run_dir) / AUDIT_DIR
    was_no, was_yes = _total(sample.counts)
    is_no, is_yes = _total(now)
    return (f"{AUDIT_DIR}/sample.json was drawn from other verdicts than the run holds now (the sample's: "
            f"{was_no:,} the judge called no, {was_yes:,} yes; positions.jsonl's: {is_no:,} no, {is_yes:,} yes): "
            f"the run was scored again since the sample was drawn, or the sample is another run's. Its labels "
            f"cannot correct this run's numbers: move the audit away (mv {shlex.quote(str(audit))} "
            f"{shlex.quote(str(audit) + '.old')}) and draw a new sample (tension-run audit sample {d})")
