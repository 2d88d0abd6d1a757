"""The run record files (run.json, fairplay_run.json, STORIES.run.json): the
header every pipeline's record shares (`RunHeader`, built by the run), how a
record is written, and the invocations (a run and its resumes) that made an
output folder.

A record is the header's keys, then the pipeline's own (its body): the same
keys for the same facts in score, generate, fairplay, and in the files estimate
(`--json`) and bench (`--save`) write, under their "run" key."""

from __future__ import annotations

import functools
import json
import os
import platform
from pathlib import Path
from typing import Any

import msgspec

from tension.cache.records import Usage
from tension.core.errors import NO_ROOM, RunStatus
from tension.core.inputs.jsonl import atomic_write
from tension.core.run.progress import Eta

__all__ = ["Failure", "versions", "write_record", "Invocations", "earlier_record", "RunHeader", "RunRecord", "Http",
           "CacheFigures", "counted_locally"]

_DISTRIBUTIONS = ("tension-run", "numpy", "numba", "msgspec", "aiohttp", "lmdb", "uvloop")


def versions() -> dict[str, str]:
    """Python's and the installed packages' versions, for the record."""
    return dict(_versions())


@functools.cache
def _versions() -> tuple[tuple[str, str], ...]:
    # Looked up once a process (≈ 10 ms: importlib.metadata reads sys.path's folders each
    # time): the code a process runs is what it imported, even if a package is upgraded
    # under a notebook later.
    from importlib.metadata import PackageNotFoundError, version

    out = [("python", platform.python_version())]
    for dist in _DISTRIBUTIONS:
        try:
            out.append((dist, version(dist)))
        except PackageNotFoundError:
            pass
    return tuple(out)


class Http(msgspec.Struct, kw_only=True):
    """The HTTP side of a run: attempts (retries included), retries, requests
    sent to complete short answers, and the pace once the first answers were in
    (core/run/progress.py; None: not measured)."""

    attempts: int = 0
    retries: int = 0
    followups: int = 0
    eta: Eta | None = None


class CacheFigures(msgspec.Struct, kw_only=True):
    """The cache a run used and what it found there, per database."""

    path: str
    hits: dict[str, int]
    misses: dict[str, int]
    writes: dict[str, int]
    damaged: dict[str, int]


class RunHeader(msgspec.Struct, kw_only=True):
    """What every run record says first, in this order (tests/snapshots/run_records.json)."""

    command: str  # the verb: score, generate, fairplay, estimate, bench
    status: RunStatus
    error: str | None
    exit_status: int
    argv: list[str]
    started: float
    wall_seconds: float
    config: dict[str, Any]  # the settings, without secrets
    models: dict[str, str | None]  # role -> model id
    versions: dict[str, str]
    requests: dict[str, int]  # LLM requests sent per role
    http: Http
    usage_this_run: Usage  # what this run's requests used
    usage_all_answers: Usage  # what every answer used, cached or not
    cache: CacheFigures
    lanes: dict[str, Any]  # per Scheduler lane: limit, requests, queue and busy time
    # per server sent to: what it can do, as learned (core/llm/traits.py), and its capacity
    servers: list[dict[str, Any]] = []

    def __post_init__(self) -> None:
        # `tokenize` says what counted the tokens for pct: a local --tokenizer, where one did
        # (the servers' /tokenize was then never asked), not the dialect it would have been asked in
        local = counted_locally(self.config.get("tokenizer"))
        if local is not None:
            self.servers = [{**s, "tokenize": local} if "tokenize" in s else s for s in self.servers]


def counted_locally(tokenizer: object) -> str | None:
    """What counted a run's tokens on this machine, as run.json `servers[].tokenize` says it:
    "words" (--tokenizer words) or "tokenizer.json" (--tokenizer PATH, the path in `config`);
    None where the servers counted them (--tokenizer server) or the run counts none."""
    if not isinstance(tokenizer, str) or tokenizer == "server":
        return None
    return "words" if tokenizer == "words" else "tokenizer.json"


class RunRecord(msgspec.Struct, kw_only=True, frozen=True):
    """A run record as the run computed it: the typed header, then the pipeline's
    body (plain data, as the file holds it). `doc()` is what the file says."""

    header: RunHeader
    body: dict[str, Any]

    def doc(self) -> dict[str, Any]:
        """The record as plain JSON data, the header's keys first: what the file
        holds (tuples as lists, an undefined number as null), without reading it."""
        doc: dict[str, Any] = msgspec.to_builtins(self.header)
        doc.update(self.body)
        decoded: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(doc))
        return decoded


def write_record(path: Path, doc: dict[str, Any]) -> None:
    """Indented JSON, written atomically (a reader never sees half a record). On a
    full disk, where there is no room for a second copy, an earlier record is
    written over in place (its blocks are freed, then reused): the record states
    how the run ended rather than an earlier state ("complete" before a report
    that could not be written)."""
    data = msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"
    try:
        atomic_write(path, data)
    except OSError as e:
        if e.errno not in NO_ROOM or not path.is_file():
            raise
        with path.open("r+b") as f:
            f.truncate(0)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


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


def earlier_record(record_path: Path) -> dict[str, Any] | None:
    """The run record already at `record_path` (None when there is no readable one)."""
    try:
        doc = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
