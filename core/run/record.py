"""The run record files (run.json, fairplay_run.json, STORIES.run.json): the parts
every pipeline's record shares, and how a record is written."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import msgspec

from tension.core.inputs.jsonl import atomic_write

__all__ = ["Failure", "versions", "write_record"]

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
