"""The run record files (run.json, fairplay_run.json, STORIES.run.json): the parts
every pipeline's record shares, how a record is written, and the invocations
(a run and its resumes) that made an output folder."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import msgspec

from tension.core.inputs.jsonl import atomic_write

__all__ = ["Failure", "versions", "write_record", "Invocations", "earlier_invocations"]

_DISTRIBUTIONS = ("tension-run", "numpy", "numba", "msgspec", "aiohttp", "lmdb", "uvloop")


def versions() -> dict[str, str]:
    """Python's and the installed packages' versions, for the record."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in _DISTRIBUTIONS:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return out


def write_record(path: Path, doc: dict[str, Any]) -> None:
    """Indented JSON, written atomically (a reader never sees half a record)."""
    atomic_write(path, msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n")


class Failure(msgspec.Struct, kw_only=True):
    """An item of a run (a story, an idea) that failed while the others went on."""

    id: str
    stage: str
    error: str


class Invocations(msgspec.Struct, kw_only=True):
    """The invocations that made one output folder (a run, then its resumes): how
    many, and their wall time added up; what a run costs is counted from this."""

    count: int = 0
    wall_seconds: float = 0.0


def earlier_invocations(record_path: Path) -> Invocations:
    """What the run record already in the output folder says about the invocations
    before this one (none when there is no readable record)."""
    try:
        doc = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Invocations()
    if not isinstance(doc, dict):
        return Invocations()
    try:
        return msgspec.convert(doc["invocations"], Invocations)
    except (KeyError, msgspec.ValidationError):
        # a record written before invocations were counted: its own wall time
        wall = doc.get("wall_seconds")
        return Invocations(count=1, wall_seconds=float(wall)) if isinstance(wall, (int, float)) else Invocations()
