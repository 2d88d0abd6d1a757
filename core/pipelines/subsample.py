"""`tension-run subsample RUN_DIR`: a finished score run's verdicts, read back from
its cache in ending order (no request is sent), recomputed from k of each position's
n endings (core/reports/subsampling.py, docs/metrics.md 1.8), with what the
recommended k saves through `estimate`'s cost model (docs/cost.md).

A position's verdicts are read by the cache keys its positions.jsonl line names
(score/recall.py, the walk `view` makes); an adaptive run's lines name none, so its
rounds are rebuilt from the run's corpus and settings, as the run drew them. A story
any of whose positions is not in the cache, or whose cached verdicts do not give the
line's counts (the judge asked again since), is left out, and the result says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from tension.cache.store import Store, default_path
from tension.core.errors import InputError
from tension.core.formats import PositionLine
from tension.core.inputs.jsonl import decode_line, iter_lines
from tension.core.pipelines.throughput import Throughput, endings_gpu_hours
from tension.core.reports import subsampling
from tension.core.reports.subsampling import Subsampling, Verdicts
from tension.core.reports.unfinished import no_positions
from tension.kernels.curves import CurveSettings

__all__ = ["SubsampleResult", "Savings", "read_verdicts", "run_subsample", "ending_tokens_of"]


class Savings(msgspec.Struct, kw_only=True):
    """The run's corpus at the recommended k against its own n (estimate's cost model)."""

    k: int
    n: int
    endings_full: int
    endings_at_k: int
    ending_tokens: float  # E: tokens per ending (the run's own mean, else its max_tokens)
    tokens_full: float
    tokens_at_k: float
    gpu_hours_full: float | None = None
    gpu_hours_at_k: float | None = None


class SubsampleResult(msgspec.Struct, kw_only=True):
    run: str
    result: Subsampling
    left_out: list[str]  # stories left out, each with why
    savings: Savings | None = None


def _record(run_dir: Path) -> dict[str, Any]:
    from tension.core.pipelines.score.recall import run_record

    # The run folder is subsample's input: a folder that is none, or a record that cannot be
    # read, is a bad input (exit 1), as the same folder given to `report` is (errors.status_of).
    doc = run_record(run_dir, "subsample")
    if doc.get("command", "score") != "score":
        raise InputError(str(run_dir), 0, None, f"its run.json is the record of `{doc.get('command')}`, not of a "
                         "score run")
    return doc


def _path_of(record: dict[str, Any], path: str | None, run_dir: Path) -> Path | None:
    """A path the run record names: absolute as recorded, an older relative one against
    the folder the run was started in (`cwd`), else the run folder."""
    if not path:
        return None
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(record.get("cwd") or run_dir) / p


def _lines(run_dir: Path) -> list[tuple[int, PositionLine]]:
    path = str(run_dir / "positions.jsonl")
    if not Path(path).is_file():
        raise no_positions(run_dir)
    dec = msgspec.json.Decoder(PositionLine)
    return [(lineno, decode_line(path, lineno, raw, PositionLine, dec)) for lineno, raw in iter_lines(path)]


def read_verdicts(run_dir: str | Path, cache: str | Path | None = None) -> tuple[Verdicts, list[str], dict[str, Any]]:
    """The run's verdicts in ending order (Verdicts), the stories left out (with why)
    and its run record. Reads the cache read-only; sends nothing."""
    from tension.core.pipelines.score.recall import ScoreRecall

    d = Path(run_dir)
    record = _record(d)
    lines = _lines(d)
    # the cache given, else the one run.json names, else the default one (a run that named none used it)
    where = Path(cache) if cache else (_path_of(record, (record.get("config") or {}).get("cache"), d)
                                       or default_path())
    if not (where / "data.mdb").is_file():
        raise InputError(str(run_dir), 0, None, f"no cache at {where}: the run's verdicts are read from it "
                         "(give --cache PATH)")
    sentences = _corpus_sentences(record, d) if any(ln.endings_key is None for _, ln in lines) else {}
    by_story: dict[str, list[tuple[int, PositionLine]]] = {}
    for lineno, ln in lines:
        by_story.setdefault(ln.id, []).append((lineno, ln))
    ids: list[str] = []
    groups: list[str] = []
    xs: list[float] = []
    matches: list[np.ndarray] = []
    counts: list[int] = []
    left_out: list[str] = []
    with Store(where, readonly=True) as store:
        recall = ScoreRecall(record, store)
        for sid, story in by_story.items():
            why, got = None, []
            for lineno, ln in story:
                if ln.endings_key is None and sid not in sentences:
                    why = (f"line {lineno}: names no cache key and the run's corpus is not readable to rebuild "
                           "its requests")
                    break
                r = recall.position(sentences.get(sid), ln.k, ln.endings_key, ln.judged_key)
                if r.endings is None or r.missing:
                    why = f"line {lineno} (k = {ln.k}): its endings or verdicts are not in the cache {where}"
                    break
                m = np.array([v == "match" for v in r.verdicts], dtype=np.int64)
                if len(m) != ln.n_endings or int(m.sum()) != ln.n_match:
                    why = (f"line {lineno} (k = {ln.k}): the cache's verdicts give {int(m.sum())} matches of "
                           f"{len(m)}, the line {ln.n_match} of {ln.n_endings} (judged again since?)")
                    break
                got.append((ln.pct, m))
            if why is not None:
                left_out.append(f"{sid}: {why}")
                continue
            ids.append(sid)
            groups.append(story[0][1].group)
            for pct, m in got:
                xs.append(pct)
                matches.append(m)
                counts.append(len(m))
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum([len(by_story[s]) for s in ids], out=offsets[1:])
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    v = Verdicts(ids=ids, groups=groups, x=np.array(xs, dtype=np.float64),
                 match=np.concatenate(matches) if matches else np.zeros(0, dtype=np.int64), starts=starts,
                 offsets=offsets)
    return v, left_out, record


def _corpus_sentences(record: dict[str, Any], run_dir: Path) -> dict[str, list[str]]:
    """Each story's sentences from the run's corpus (an adaptive run's requests are
    rebuilt from them); {} when the corpus is not there."""
    from tension.core.inputs.corpus import read_corpus
    from tension.core.inputs.segment import split_sentences

    path = _path_of(record, record.get("corpus"), run_dir)
    if path is None or not path.exists():
        return {}
    return {s.id: split_sentences(s.text) for s in read_corpus(path, min_words=0, max_words=10**9).stories}


def ending_tokens_of(record: dict[str, Any], endings: int) -> float:
    """E: the run's mean generated tokens per ending (its usage over its endings), else
    its max_tokens (an upper bound)."""
    usage = ((record.get("usage_all_answers") or {}).get("generation") or {})
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(tokens, int | float) and tokens > 0 and endings > 0:
        return float(tokens) / endings
    return float((record.get("config") or {}).get("max_tokens") or 150)


def run_subsample(run_dir: str | Path, *, cache: str | Path | None = None, settings: CurveSettings | None = None,
                  ks: Sequence[int] = subsampling.DEFAULT_KS, stats: Sequence[str] = subsampling.DEFAULT_STATS,
                  draws: int = subsampling.DRAWS,
                  seed: int = 0, shift_tolerance: float = subsampling.SHIFT_TOLERANCE,
                  width_tolerance: float = subsampling.WIDTH_TOLERANCE,
                  throughput: Throughput | None = None) -> SubsampleResult:
    from tension.core.reports.run_folder import settings_from_run

    v, left_out, record = read_verdicts(run_dir, cache)
    if not v.ids:
        detail = f": {left_out[0]}" if left_out else ""
        raise InputError(str(Path(run_dir) / "positions.jsonl"), 0, None,
                         f"no story's verdicts could be read from the cache{detail}")
    settings = settings or settings_from_run(record)
    res = subsampling.subsample(v, settings, ks, stats, draws, seed, shift_tolerance, width_tolerance)
    savings = None
    rec = res.recommendation
    if rec.k is not None:
        e = ending_tokens_of(record, rec.endings_full)
        savings = Savings(k=rec.k, n=rec.n, endings_full=rec.endings_full, endings_at_k=rec.endings_at_k,
                          ending_tokens=e, tokens_full=rec.endings_full * e, tokens_at_k=rec.endings_at_k * e)
        if throughput is not None:
            savings.gpu_hours_full = endings_gpu_hours(rec.endings_full, e, throughput)
            savings.gpu_hours_at_k = endings_gpu_hours(rec.endings_at_k, e, throughput)
    return SubsampleResult(run=str(run_dir), result=res, left_out=left_out, savings=savings)

