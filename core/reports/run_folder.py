"""A score run's folder read back (`load_run`): its curves (``positions.jsonl``),
the statistics computed from them, its stories' pairing fields (``meta.jsonl``)
and its run record (``run.json``) typed as the run wrote it
(core/run/record.py `RunRecord`: the header every record shares, then the score
pipeline's body), or the record its caller holds (the run that just wrote it: not
read again).

Everything is recomputed from the files, so a report or a comparison can be
rebuilt, or built with other curve settings, without any LLM."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from tension.core.errors import InputError, exit_status
from tension.core.inputs.jsonl import decode_line, iter_lines
from tension.core.reports.comparable import comparable_columns, comparable_matrix, is_comparable
from tension.core.reports.metrics import Curve, compute, read_run_positions, stat_columns
from tension.core.reports.story_intervals import compute_intervals
from tension.core.reports.unfinished import no_positions
from tension.core.run.record import RunHeader, RunRecord
from tension.kernels.bootstrap import N_RESAMPLES
from tension.kernels.curves import BatchStats, CurveSettings
from tension.kernels.groups import GroupStat
from tension.kernels.intervals import StoryIntervals

__all__ = ["recorded_settings", "RunData", "load_run", "read_record", "record_of_doc", "settings_from_run",
           "settings_from_config"]


class RunData(msgspec.Struct, kw_only=True):
    """A score run folder as read back, with the statistics computed from it."""

    dir: str
    curves: list[Curve]
    stats: BatchStats
    groups: dict[str, dict[str, GroupStat]]
    settings: CurveSettings
    record: RunRecord | None  # run.json, typed; None: the folder has none (or an empty one)
    meta: dict[str, dict[str, Any]]  # story id -> {"group", "words", "meta": {...}}
    # stories × comparable statistics (docs/metrics.md 1.9): computed once, for the groups and `values`
    comparable: np.ndarray
    intervals: StoryIntervals | None = None  # per story (docs/metrics.md 1.6); None when not asked for

    def values(self, stat: str) -> np.ndarray:
        """Every story's value of `stat` (a column of stories.csv), in curve order."""
        if is_comparable(stat):
            return self.comparable[:, comparable_columns(stat_columns(self.settings)).index(stat)]
        cols = stat_columns(self.settings)
        k = cols.index(stat)
        if k < 4:
            return [self.stats.mean_nr, self.stats.late_nr, self.stats.retain, self.stats.convergence][k]
        return self.stats.ir[:, k - 4]


class _MetaLine(msgspec.Struct):
    """A line of meta.jsonl, as score writes it."""

    id: str
    group: str | None = None
    words: int = 0
    meta: dict[str, Any] = {}


def _read_doc(path: Path) -> dict[str, Any]:
    """run.json as plain data; a damaged one is an InputError naming it, line and column."""
    raw = path.read_bytes()
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputError(str(path), 0, None, f"not valid UTF-8 (byte offset {e.start}); rerun the score "
                         "command to write it again, or move it away to report without it") from e
    except json.JSONDecodeError as e:
        raise InputError(str(path), e.lineno, None, f"not valid JSON ({e.msg} at column {e.colno}); rerun the "
                         "score command to write it again, or move it away to report without it") from e
    if not isinstance(doc, dict):
        raise InputError(str(path), 1, None, "expected a JSON object (a run record)")
    return doc


_HEADER = RunHeader.__struct_fields__
# What a record says of a header field it does not hold (one written before the field
# was, or by hand): nothing, as the report read it before the header was typed
_UNSAID: dict[str, Any] = {"command": "score", "status": "complete", "error": None, "argv": [], "started": 0.0,
                           "wall_seconds": 0.0, "config": {}, "models": {}, "versions": {}, "requests": {},
                           "http": {}, "usage_this_run": {}, "usage_all_answers": {}, "lanes": {}}
_NO_CACHE = {"path": "", "hits": {}, "misses": {}, "writes": {}, "damaged": {}}


def record_of_doc(doc: dict[str, Any], path: str | os.PathLike, stories: int = 0) -> RunRecord:
    """A run record's plain data (what run.json holds) as the typed record: its
    header's keys as `RunHeader`, the rest as the body. A record of an earlier
    version (before the shared header, issue 24, or before its exit status) or one
    written by hand gets the header fields it lacks as a record that says nothing
    of them (`_UNSAID`), and its exit status from its status and stories, of which
    `stories` curves were read (kept, when the record does not say). A field of
    another type is an InputError naming `path` and the field."""
    head = {k: doc[k] for k in _HEADER if k in doc}
    body = {k: v for k, v in doc.items() if k not in head}
    for k, v in _UNSAID.items():
        head.setdefault(k, v)
    if isinstance(head.get("cache", {}), dict):
        head["cache"] = {**_NO_CACHE, **head.get("cache", {})}
    if head.get("exit_status") is None:  # a record written before the exit status was recorded
        st = body.get("stories", {})
        errors, failed = st.get("input_errors", []), st.get("failed", [])
        kept = st.get("kept", stories)
        head["exit_status"] = exit_status(head["status"], kept - len(failed), len(errors) + len(failed))
    try:
        header = msgspec.convert(head, RunHeader)
    except msgspec.ValidationError as e:
        raise InputError(str(path), 0, None, f"not a run record: {e}; rerun the score command to write it "
                         "again, or move it away to report without it") from e
    return RunRecord(header=header, body=body)


def read_record(path: str | os.PathLike, stories: int = 0) -> RunRecord:
    """The run record at `path` (run.json), typed (`record_of_doc`)."""
    return record_of_doc(_read_doc(Path(path)), path, stories)


def settings_from_config(config: dict[str, Any]) -> CurveSettings:
    """The curve settings of a run record's `config` (the defaults for what it does not say)."""
    d = CurveSettings()
    c = config
    return CurveSettings(window=c.get("window", d.window), thresholds=tuple(c.get("thresholds", d.thresholds)),
                         late_threshold=c.get("late_threshold", d.late_threshold),
                         retention_window=c.get("retention_window", d.retention_window),
                         interval_resamples=c.get("interval_resamples", d.interval_resamples),
                         interval_seed=c.get("interval_seed", d.interval_seed))


def settings_from_run(run: dict[str, Any]) -> CurveSettings:
    """The curve settings of a run record given as plain data."""
    return settings_from_config(run.get("config", {}))


def recorded_settings(run_dir: str | os.PathLike, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """The curve settings a folder's run was scored with (its run.json), as keywords, with
    `given` (flags or keywords the caller gave) over them; a path that is no run folder
    (a curves file) or whose run.json is missing: `given` alone, the defaults filling the
    rest. A damaged run.json is the reading verb's to report: here it counts as none."""
    d = Path(run_dir)
    base: dict[str, Any] = {}
    if d.is_dir() and (d / "run.json").is_file():
        try:
            base = msgspec.structs.asdict(settings_from_run(_read_doc(d / "run.json")))
        except (InputError, TypeError, ValueError, AttributeError):
            base = {}
    return {**base, **(given or {})}


_LEFT_OUT = " (line left out)"  # what metrics says of a bad line it goes on without


def _bad_lines(d: Path, errors: list[InputError]) -> InputError:
    """One error naming every bad line of a run's positions.jsonl, for the verbs that need
    them all (report, compare): they stop and write nothing, unlike `metrics`, which leaves
    such a line out, so metrics' "(line left out)" is not theirs to say."""
    said = [str(e).removesuffix(_LEFT_OUT) for e in errors]
    first = errors[0]
    command = shlex.join(["tension-run", "metrics", str(d), "--out", f"{d}-metrics"])
    return InputError(first.path, first.line, first.field,
                      "\n".join([first.message.removesuffix(_LEFT_OUT), *said[1:],
                                  f"nothing written: report and compare read every line of positions.jsonl; correct "
                                  f"or remove the {len(errors)} bad line(s) above (`{command}` computes the run "
                                  "without them)"]))


def load_run(run_dir: str | os.PathLike, settings: CurveSettings | None = None,
             n_resamples: int = N_RESAMPLES, seed: int = 0, intervals: bool = True,
             record: RunRecord | None = None) -> RunData:
    """The score run in `run_dir`, its statistics computed with `settings` (default:
    its record's). `record`: the run's record as its caller holds it (the run that
    wrote it), instead of its run.json read again; it is taken as the file holds it
    (`RunRecord.doc`: tuples as lists, an undefined number as null)."""
    d = Path(run_dir)
    if not (d / "positions.jsonl").is_file():
        raise no_positions(d)
    if record is not None:
        doc: dict[str, Any] = record.doc()
    else:
        doc = _read_doc(d / "run.json") if (d / "run.json").is_file() else {}
    settings = settings or settings_from_run(doc)
    curves, errors = read_run_positions(d)
    if errors:
        raise _bad_lines(d, errors)
    typed = record_of_doc(doc, d / "run.json", len(curves)) if doc else None
    meta: dict[str, dict[str, Any]] = {}
    if (d / "meta.jsonl").is_file():
        path = str(d / "meta.jsonl")
        for lineno, raw in iter_lines(path):
            m = decode_line(path, lineno, raw, _MetaLine)
            meta[m.id] = msgspec.to_builtins(m)
    comparable = comparable_matrix(curves, settings)
    stats, groups = compute(curves, settings, n_resamples=n_resamples, seed=seed, comparable=comparable)
    iv = compute_intervals(curves, stats, settings) if intervals else None
    return RunData(dir=str(d), curves=curves, stats=stats, groups=groups, settings=settings, record=typed, meta=meta,
                   comparable=comparable, intervals=iv)
