"""What a score --out folder held before this run: the same run (resumed or rerun
as it was, whose invocations add up to the run's cost), or another one (another
corpus, other settings), which this run replaces whole and whose cost is not
this run's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from tension.core.config import ScoreConfig
from tension.core.config.score import CHECKS, CONCURRENCY, OUTPUTS, RECORDED_BEFORE, SERVERS
from tension.core.run.record import Invocations, earlier_record

__all__ = ["earlier_run", "other_run"]

# Settings of how a run is done (servers, lanes, retries, the cache, the checks), not
# of what it produces: a rerun with other ones continues the same run. The models
# and the reasoning switch are in the servers group but change every answer.
_HOW_GROUPS = (SERVERS, CONCURRENCY, OUTPUTS, CHECKS)
_WHAT_ANYWAY = {"model", "judge_model", "reasoning_off"}
_HOW_ANYWAY = {"judge_batch", "api_key"}  # the same verdicts either way (docs/cost.md)


def _what_fields() -> list[str]:
    out = []
    for f in msgspec.inspect.type_info(ScoreConfig).fields:  # type: ignore[attr-defined]
        group = (getattr(f.type, "extra", None) or {}).get("group")
        if f.name in _WHAT_ANYWAY or (group not in _HOW_GROUPS and f.name not in _HOW_ANYWAY):
            out.append(f.name)
    return out


WHAT_FIELDS = _what_fields()


def _corpus(path: object) -> str:
    return os.path.abspath(str(path))


def other_run(doc: dict[str, Any], cfg: ScoreConfig, corpus_path: str | Path) -> str | None:
    """What makes the run recorded in `doc` another run than this one (its corpus,
    the settings that change what is produced), said; None when it is this run."""
    if "corpus" in doc and _corpus(doc["corpus"]) != _corpus(corpus_path):
        return f"another corpus ({doc['corpus']})"
    # as JSON reads it back (tuples are lists there)
    then, now = _as_made(doc.get("config") or {}), _as_made(msgspec.json.decode(msgspec.json.encode(cfg.public())))
    changed = [f"{k.replace('_', '-')} {then[k]!r} → {now.get(k)!r}" for k in WHAT_FIELDS
               if k in then and then[k] != now.get(k)]
    if changed:
        return "other settings (" + ", ".join(changed[:3]) + (", …" if len(changed) > 3 else "") + ")"
    return None


def _as_made(config: dict[str, Any]) -> dict[str, Any]:
    """A run's recorded settings with those it predates as it was made with them
    (RECORDED_BEFORE), and without the seed scheme when it is unseeded (no request
    of an unseeded run depends on it)."""
    if not config:
        return config
    out = {**RECORDED_BEFORE, **config}
    if out.get("seed") is None:
        out.pop("seed_scheme", None)
    return out


def earlier_run(record_path: Path, cfg: ScoreConfig, corpus_path: str | Path) -> tuple[Invocations, str | None]:
    """The invocations before this one of the run in the folder (none when the
    folder held another run), and what made it another run (None: the same)."""
    doc = earlier_record(record_path)
    if doc is None:
        return Invocations(), None
    other = other_run(doc, cfg, corpus_path)
    if other is not None:
        return Invocations(), other
    return _invocations(doc), None


def _invocations(doc: dict[str, Any]) -> Invocations:
    try:
        return msgspec.convert(doc["invocations"], Invocations)
    except (KeyError, msgspec.ValidationError):
        # a record written before invocations were counted: its own wall time
        wall = doc.get("wall_seconds")
        return Invocations(count=1, wall_seconds=float(wall)) if isinstance(wall, (int, float)) else Invocations()
