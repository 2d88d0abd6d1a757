"""What a verb that reads a score run's positions.jsonl says when the folder has none:
a folder that is no score run, or a run that stopped before writing it (Ctrl-C, SIGTERM,
a failure). The second is told apart, with what it kept and the command that resumes it,
because "not a score run" about the folder a user just scored is false and leaves them
without the way on (review of the reports, 2026-12-07)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tension.core.errors import InputError

__all__ = ["no_positions"]


def no_positions(run_dir: str | Path, needs: str = "") -> InputError:
    """The error for `run_dir` without positions.jsonl; `needs`: why the verb needs a
    finished run (appended after a colon)."""
    d = Path(run_dir)
    tail = f": {needs}" if needs else ""
    record = _record(d / "run.json")
    partial = d / "positions.partial.jsonl"
    if record is None and not partial.is_file():
        return InputError(str(d), 0, None, f"not a score run: no positions.jsonl in this folder{tail}")
    status = record.get("status") if record else None
    kept = _lines(partial)
    said = [f"status {status}" if isinstance(status, str) else None,
            f"{kept} position(s) in positions.partial.jsonl" if kept is not None else None]
    why = "; ".join(s for s in said if s)
    argv = record.get("argv") if record else None
    how = ("" if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)) else
           " Resume it from the folder it was started in, with the command that started it; it asks only for what "
           "is missing:\n  " + shlex.join(argv))
    return InputError(str(d), 0, None, f"not a finished score run: it stopped before writing positions.jsonl"
                                       f"{f' ({why})' if why else ''}{tail}.{how}")


def _record(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # no run.json, or one the verb's own reading reports
    return doc if isinstance(doc, dict) else None


def _lines(path: Path) -> int | None:
    try:
        with path.open("rb") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return None
