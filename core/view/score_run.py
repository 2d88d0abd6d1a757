"""A score run folder as the view shows it: its positions, the story statistics
and group means computed as `score` and `metrics` compute them
(`reports.metrics.compute`), the smoothed curves and sharp reversals as the
report draws them (`kernels.curves.smooth`, `reports.figures.sharp_reversals`),
the story texts from the run's corpus, and each position's endings and verdicts
from the cache (through a `recall`, built by the CLI from the score pipeline's
own request builder so the keys are the run's).

A run that is not finished (no positions.jsonl yet) is shown from
positions.partial.jsonl, a bad line is left out, a missing corpus or cache only
removes the text or the endings: each says so in `notes`, shown on every page.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import msgspec
import numpy as np

from tension.cache.store import Store, default_path
from tension.core.config import make_curve_settings
from tension.core.errors import InputError, TensionError
from tension.core.formats import PositionLine
from tension.core.inputs.corpus import read_corpus
from tension.core.inputs.jsonl import decode_line, iter_lines
from tension.core.inputs.segment import split_sentences
from tension.core.reports.answer_warnings import warning_text
from tension.core.reports.figures import sharp_reversals
from tension.core.reports.metrics import Curve, check_curve, compute, stat_columns
from tension.core.reports.story_intervals import compute_intervals
from tension.core.view.named_files import unreadable
from tension.kernels.curves import CurveSettings, Reason, smooth

__all__ = ["Recall", "RecallFactory", "Stores", "ScoreRun", "NotFound", "slugs", "read_record", "open_recall",
           "recorded_path"]


class Recall(Protocol):
    def position(self, sentences: Sequence[str] | None, k: int, endings_key: str | None = None,
                 judged_key: str | None = None) -> Any: ...


RecallFactory = Callable[[dict[str, Any], Store], Recall]


class Stores:
    """The caches the view reads, each opened read-only once (LMDB allows one open
    environment per path and process); `note` says why one cannot be read."""

    def __init__(self):
        self.open: dict[Path, Store] = {}

    def get(self, path: str | Path | None) -> tuple[Store | None, str | None]:
        p = Path(path or default_path()).resolve()
        if p in self.open:
            return self.open[p], None
        if not (p / "data.mdb").is_file():
            return None, f"no cache at {p}: the records behind this run are not here (view --cache PATH)"
        try:
            self.open[p] = Store(p, readonly=True)
        except TensionError as e:
            return None, f"the cache at {p} cannot be read: {e}"
        return self.open[p], None

    def close(self) -> None:
        for s in self.open.values():
            s.close()
        self.open.clear()


def read_record(path: Path, notes: list[str], what: str) -> dict[str, Any]:
    """A run record (run.json, fairplay_run.json); {} and a note when it is missing or unreadable."""
    if not path.is_file():
        notes.append(f"{path} is missing: the run's {what} are unknown")
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        notes.append(f"{path}: not readable JSON ({e}); the run's {what} are unknown")
        return {}


def recorded_path(record: dict[str, Any], path: str | None, run_dir: Path) -> str | None:
    """A path a run record names, as this process can open it: absolute as recorded
    (runs since issue 25); a relative one of an older record against the folder the
    run was started in (`cwd`, when the record has it), else against the run folder."""
    if not path:
        return path
    p = Path(path).expanduser()
    if p.is_absolute():
        return str(p)
    return str(Path(record.get("cwd") or run_dir) / p)


def open_recall(stores: Stores, factory, cache: str | None, record: dict[str, Any], what: str,
                run_dir: Path):
    """(recall, None) for a run's cached records, or (None, why not): no factory, no
    cache at the path (`cache`, else the one the run record names), or a run record
    its requests cannot be rebuilt from."""
    store, note = stores.get(cache or recorded_path(record, (record.get("config") or {}).get("cache"), run_dir))
    if factory is None:
        return None, f"{what} are not available in this view"
    if store is None:
        return None, note
    try:
        return factory(record, store), None
    except (TensionError, KeyError, OSError) as e:
        return None, f"the run's requests cannot be rebuilt from its run record: {e}"


class NotFound(TensionError):
    """A page or record the run does not have (an unknown story id, a position)."""


def slugs(ids: list[str]) -> dict[str, str]:
    """A file-safe name per id, unique within the run, also where two ids differ only
    in case (`Story`, `story`: one file on macOS and Windows): the reports' scheme."""
    from tension.core.reports.filenames import unique_filenames

    return dict(zip(ids, unique_filenames(ids)))


def _number(v: float) -> float | None:
    """A statistic as JSON has it: all its digits (the page shows what stories.csv
    holds), null for NaN."""
    return None if v is None or not math.isfinite(v) else float(v)


class ScoreRun:
    """One score run folder, loaded once; the page data are built from it on demand."""

    kind: Literal["score"] = "score"

    def __init__(self, path: str | Path, stores: Stores, recall: RecallFactory | None = None,
                 cache: str | None = None, n_resamples: int = 10_000):
        self.dir = Path(path)
        self.notes: list[str] = []
        self.record = read_record(self.dir / "run.json", self.notes, "settings, models and corpus")
        self.settings = self._settings()
        self.lines = self._read_lines()
        self.curves = self._curves()
        self.stats, self.groups = compute(self.curves, self.settings, n_resamples=n_resamples)
        self.intervals = compute_intervals(self.curves, self.stats, self.settings)
        self.index = {c.id: i for i, c in enumerate(self.curves)}
        self.slug = slugs([c.id for c in self.curves])
        self.by_slug = {s: sid for sid, s in self.slug.items()}
        self._texts: dict[str, str] | None = None
        self._unscored: list[dict[str, str]] | None = None
        self._recall_from = (stores, recall, cache)  # opened on first use: the corpus page needs no cache
        self._recall: Recall | None = None
        self.cache_note: str | None = None

    # -- reading the folder ----------------------------------------------------------

    def _settings(self) -> CurveSettings:
        c, d = self.record.get("config") or {}, CurveSettings()
        try:
            return make_curve_settings(c.get("window", d.window), c.get("thresholds", d.thresholds),
                                       c.get("late_threshold", d.late_threshold),
                                       c.get("retention_window", d.retention_window),
                                       interval_resamples=c.get("interval_resamples", d.interval_resamples),
                                       interval_seed=c.get("interval_seed", d.interval_seed))
        except TensionError as e:
            self.notes.append(f"{self.dir / 'run.json'}: {e}; the paper's curve settings are used")
            return d

    def _read_lines(self) -> list[PositionLine]:
        path = self.dir / "positions.jsonl"
        if not path.is_file():
            partial = self.dir / "positions.partial.jsonl"
            if not partial.is_file():
                raise InputError(str(self.dir), 0, None,
                                 "not a score run: neither positions.jsonl nor positions.partial.jsonl is here")
            status = self.record.get("status", "unknown")
            self.notes.append(f"this run is not finished (status: {status}): shown from {partial.name}, "
                              "which holds the positions scored so far")
            path = partial
        dec = msgspec.json.Decoder(PositionLine)
        out, bad = [], 0
        for lineno, raw in iter_lines(path):
            try:
                out.append(decode_line(str(path), lineno, raw, PositionLine, dec))
            except InputError as e:
                bad += 1
                if bad <= 3:
                    self.notes.append(f"{e} (line left out)")
        if bad > 3:
            self.notes.append(f"{bad - 3} more bad line(s) of {path.name} left out")
        return out

    def _curves(self) -> list[Curve]:
        by_id: dict[str, list[PositionLine]] = {}
        for p in self.lines:
            by_id.setdefault(p.id, []).append(p)
        self.positions: dict[str, list[PositionLine]] = {}
        curves = []
        for sid, ps in by_id.items():
            ps.sort(key=lambda p: p.k)  # the partial file is in completion order
            c = Curve(id=sid, group=ps[0].group, x=[p.pct for p in ps], y=[p.no_rate for p in ps],
                      n_endings=[p.n_endings for p in ps], n_match=[p.n_match for p in ps])
            try:
                check_curve(str(self.dir / "positions.jsonl"), 0, c)
            except InputError as e:
                self.notes.append(f"story {sid!r} left out: {e}")
                continue
            self.positions[sid] = ps
            curves.append(c)
        return curves

    # -- the corpus page ----------------------------------------------------------------

    def stat_values(self) -> dict[str, np.ndarray]:
        s = self.stats
        cols = stat_columns(self.settings)
        values = [s.mean_nr, s.late_nr, s.retain, s.convergence] + [s.ir[:, j] for j in range(s.ir.shape[1])]
        return dict(zip(cols, values))

    def story_intervals(self, i: int) -> dict[str, list[float] | None]:
        """Story i's 95% interval of each statistic, [lo, hi] (None: none, docs/metrics.md 1.6)."""
        cols = stat_columns(self.settings)
        iv = self.intervals
        if iv is None:
            return {c: None for c in cols}
        return {c: None if math.isnan(iv.lo[i, j]) else [float(iv.lo[i, j]), float(iv.hi[i, j])]
                for j, c in enumerate(cols)}

    def corpus(self) -> dict[str, Any]:
        values = self.stat_values()
        stories = []
        for i, c in enumerate(self.curves):
            stories.append({
                "id": c.id, "slug": self.slug[c.id], "group": c.group, "n_positions": len(c.x),
                "stats": {k: _number(v[i]) for k, v in values.items()}, "intervals": self.story_intervals(i),
                "nan_reasons": "; ".join(Reason(int(self.stats.reasons[i])).describe()),
                "x": [round(v, 4) for v in c.x], "y": [round(v, 4) for v in c.y]})
        groups = {stat: {g: {"mean": _number(s.mean), "lo": _number(s.boot_lo), "hi": _number(s.boot_hi),
                             "ci95": _number(s.ci95), "n": s.n, "n_nan": s.n_nan} for g, s in by_group.items()}
                  for stat, by_group in self.groups.items()}
        models = self.record.get("models", {})
        return {"kind": "score", "dir": str(self.dir), "status": self.record.get("status", "unknown"),
                "models": models, "columns": list(values), "stories": stories, "unscored": self.unscored(),
                "groups": groups, "notes": self.notes, "warnings": self.warnings()}

    def unscored(self) -> list[dict[str, str]]:
        """The stories stories.csv lists without a position (too short for one, or
        all failed), each with its reason: the corpus page shows them too, as
        report.md's table does, rather than counting fewer stories than the run had."""
        if self._unscored is None:
            self._unscored = []
            path = self.dir / "stories.csv"
            try:
                with path.open(encoding="utf-8", newline="") as f:
                    rows = list(csv.DictReader(f))
            except (OSError, UnicodeDecodeError, csv.Error):
                rows = []  # no stories.csv (a stopped run): only positions.jsonl's stories are known
            for row in rows:
                sid = row.get("id")
                if sid and sid not in self.index:
                    self._unscored.append({"id": sid, "group": row.get("group") or "",
                                           "reason": row.get("nan_reasons") or "no positions"})
        return self._unscored

    def warnings(self) -> list[str]:
        """run.json's degenerate-answer warnings, one line each, as report.md shows them."""
        out = []
        for w in self.record.get("warnings") or []:
            try:
                out.append(warning_text(w))
            except (msgspec.ValidationError, TypeError):
                out.append(f"a warning run.json holds in an unknown form: {w!r}")
        return out

    # -- a story ---------------------------------------------------------------------

    def story_id(self, slug_or_id: str) -> str:
        sid = self.by_slug.get(slug_or_id, slug_or_id)
        if sid not in self.index:
            raise NotFound(f"no story {slug_or_id!r} in the run {self.dir} ({len(self.curves)} stories; "
                           "the corpus page lists them)")
        return sid

    def texts(self) -> dict[str, str]:
        """Story texts by id, from the corpus named in run.json (read once)."""
        if self._texts is None:
            self._texts = {}
            corpus = recorded_path(self.record, self.record.get("corpus"), self.dir)
            if not corpus or not os.path.lexists(corpus):
                shown = self.record.get("corpus_given") or corpus or "not named in run.json"
                self.notes.append(f"the run's corpus ({shown}) is not there: story texts and endings cannot be "
                                  "shown")
            elif (why := unreadable(corpus, "the run's corpus")) is not None:
                self.notes.append(f"{why}; story texts and endings cannot be shown")
            else:
                read = read_corpus(corpus, min_words=0, max_words=10**9)
                self._texts = {s.id: s.text for s in read.stories if s.id in self.index}  # the run's stories only
        return self._texts

    def sentences(self, sid: str) -> list[str] | None:
        text = self.texts().get(sid)
        return None if text is None else split_sentences(text)

    def story(self, slug_or_id: str) -> dict[str, Any]:
        sid = self.story_id(slug_or_id)
        i = self.index[sid]
        c, ps = self.curves[i], self.positions[sid]
        ys = smooth(np.asarray(c.y, dtype=np.float64), self.settings.window)
        sharp = set(int(j) for j in sharp_reversals(c.x, c.y, self.settings))
        marks = {j: ("peak" if ys[j] > ys[j - 1] else "valley") for j in sharp}
        values = self.stat_values()
        positions = [{"k": p.k, "pct": p.pct, "no_rate": p.no_rate, "smoothed": _number(ys[j]),
                      "n_endings": p.n_endings, "n_match": p.n_match, "n_empty": p.n_empty,
                      "n_malformed": p.n_malformed, "mark": marks.get(j)} for j, p in enumerate(ps)]
        return {"kind": "story", "id": sid, "slug": self.slug[sid], "group": c.group,
                "stats": {k: _number(v[i]) for k, v in values.items()}, "intervals": self.story_intervals(i),
                "interval_resamples": self.settings.interval_resamples, "window": self.settings.window,
                "sentences": self.sentences(sid), "positions": positions, "notes": self.notes}

    # -- a position's endings ------------------------------------------------------------

    def recall(self) -> Recall | None:
        """The run's cached records, on first use; None (and `cache_note` says why)
        when there is no cache to read."""
        if self._recall is None and self.cache_note is None:
            self._recall, self.cache_note = open_recall(*self._recall_from, self.record, "endings", self.dir)
        return self._recall

    def endings(self, slug_or_id: str, k: int) -> dict[str, Any]:
        sid = self.story_id(slug_or_id)
        line = next((p for p in self.positions[sid] if p.k == k), None)
        if line is None:
            raise NotFound(f"story {sid!r} has no position k={k}")
        out: dict[str, Any] = {"id": sid, "k": k, "cached": False, "endings": []}
        recall = self.recall()
        # positions.jsonl names the position's cache keys; a run written before it
        # did has its requests rebuilt from the story's text
        sentences = self.sentences(sid)
        if recall is None:
            out["message"] = self.cache_note
        elif sentences is None and line.endings_key is None:
            out["message"] = "the story's text is not available, so its requests cannot be rebuilt"
        else:
            r = recall.position(sentences, k, line.endings_key, line.judged_key)
            out["generation_model"], out["judge_model"] = r.generation_model, r.judge_model
            if r.endings is None:
                out["message"] = (f"the endings of this position are not in the cache "
                                  f"(generation model {r.generation_model!r})")
            else:
                out["cached"] = True
                out["missing"] = r.missing
                out["endings"] = [{"text": e, "raw": raw, "counted": c, "verdict": v}
                                  for e, raw, c, v in zip(r.endings, r.raw, r.counted, r.verdicts)]
        return out

    def all_endings(self, slug_or_id: str) -> dict[int, dict[str, Any]]:
        sid = self.story_id(slug_or_id)
        return {p.k: self.endings(sid, p.k) for p in self.positions[sid]}
