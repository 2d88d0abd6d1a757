"""What the API verbs return: typed results holding the pipeline's own summary
(what the CLI prints from), the tables they wrote read back (per-story
statistics, groups) and the run record, each with ``to_pandas()`` where pandas is
installed (the optional extra ``pandas``: ``pip install 'tension-run[pandas]'``)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import msgspec

__all__ = ["Table", "ScoreResult", "EstimateResult", "MetricsResult", "CompareResult", "FairPlayResult",
           "FairPlayMetricsResult", "GenerateResult"]

Cell = float | str | None


def pandas() -> Any:
    """The pandas module, else an ImportError that names the extra to install."""
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("to_pandas() needs pandas, which tension-run does not depend on: "
                          "pip install 'tension-run[pandas]' (or pip install pandas)") from e
    return pd


class Table(msgspec.Struct, frozen=True, kw_only=True):
    """A CSV file a verb wrote, read back: its columns, and its rows with numbers as
    floats and empty cells as None."""

    path: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]

    def records(self) -> list[dict[str, Cell]]:
        """One dict per row, by column name."""
        return [dict(zip(self.columns, r)) for r in self.rows]

    def to_pandas(self) -> Any:
        return pandas().DataFrame(list(self.rows), columns=list(self.columns))

    def __len__(self) -> int:
        return len(self.rows)


def _cell(text: str) -> Cell:
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def read_table(path: str | Path) -> Table | None:
    """The CSV at `path` as a Table; None when the verb did not write it."""
    p = Path(path)
    if not p.is_file():
        return None
    rows = list(csv.reader(io.StringIO(p.read_text(encoding="utf-8"))))
    if not rows:
        return Table(path=str(p), columns=(), rows=())
    return Table(path=str(p), columns=tuple(rows[0]), rows=tuple(tuple(_cell(c) for c in r) for r in rows[1:]))


def read_record(path: str | Path) -> dict[str, Any] | None:
    """A run record (run.json, STORIES.run.json, fairplay_run.json) as plain data;
    None when none was written."""
    p = Path(path)
    return msgspec.json.decode(p.read_bytes()) if p.is_file() else None


class _Result(msgspec.Struct, kw_only=True):
    """What every run's result has: the pipeline's summary, its status and exit
    status (as the CLI would exit), where it wrote."""

    status: str
    exit_status: int
    out: str


class ScoreResult(_Result, kw_only=True):
    """`score`: per-story statistics (stories.csv), group statistics with their
    intervals (groups.csv), the run record (run.json); ``summary`` is the
    pipeline's RunSummary (requests, cache hits, failures, warnings)."""

    stories: Table | None
    groups: Table | None
    run: dict[str, Any] | None
    summary: Any

    def to_pandas(self) -> Any:
        """The per-story statistics as a DataFrame."""
        return _frame(self.stories)


class MetricsResult(_Result, kw_only=True):
    """`metrics`: per-story and group statistics of saved curves; ``errors`` are
    the lines that failed (file, line, field); ``computed`` the library's
    reports.metrics.MetricsResult (curves, kernel statistics, GroupStat)."""

    stories: Table | None
    groups: Table | None
    errors: list[str]
    computed: Any

    def to_pandas(self) -> Any:
        return _frame(self.stories)


class EstimateResult(_Result, kw_only=True):
    """`estimate`: the Estimate (requests, tokens, cache coverage, GPU-hours,
    money; its ``run`` the run header) and the text the CLI prints."""

    estimate: Any
    text: str

    def to_pandas(self) -> Any:
        """One row: the estimate's scalar figures, nested ones flattened (`gpu_hours.total`)."""
        flat: dict[str, Any] = {}

        def walk(prefix: str, v: Any) -> None:
            if isinstance(v, dict):
                for k, x in v.items():
                    walk(f"{prefix}.{k}" if prefix else str(k), x)
            elif not isinstance(v, list):
                flat[prefix] = v

        walk("", {k: v for k, v in msgspec.to_builtins(self.estimate).items() if k != "run"})
        return pandas().DataFrame([flat])


class CompareResult(_Result, kw_only=True):
    """`compare`: the paired comparison (B − A per statistic: means, difference,
    bootstrap interval, t-test) as reports.comparison.Comparison, and its tables."""

    comparison: Any
    markdown: str
    csv: str

    def to_pandas(self) -> Any:
        return pandas().DataFrame([msgspec.to_builtins(r) for r in self.comparison.rows])


class FairPlayMetricsResult(_Result, kw_only=True):
    """`fairplay_metrics`: per-story scores (stories.csv), groups (groups.csv),
    ``summary`` the reports.fairplay_metrics.FairPlaySummary."""

    stories: Table | None
    groups: Table | None
    summary: Any

    def to_pandas(self) -> Any:
        return _frame(self.stories)


class FairPlayResult(_Result, kw_only=True):
    """`fairplay`: the readers' run (``summary``: FairPlayRun) and its metrics
    (``metrics``: FairPlayMetricsResult, None when they did not run), the run
    record (fairplay_run.json)."""

    metrics: FairPlayMetricsResult | None
    run: dict[str, Any] | None
    summary: Any

    def to_pandas(self) -> Any:
        """The per-story fair-play scores as a DataFrame."""
        return _frame(self.metrics.stories if self.metrics is not None else None)


class GenerateResult(_Result, kw_only=True):
    """`generate`: the stories written (the lines of ``out``), the run record
    (STORIES.run.json), ``summary`` the pipeline's GenerateSummary."""

    stories: list[dict[str, Any]]
    run: dict[str, Any] | None
    summary: Any

    def to_pandas(self) -> Any:
        return pandas().DataFrame(self.stories)


def _frame(table: Table | None) -> Any:
    if table is None:
        pandas()  # the extra is named first, whatever else is missing
        raise ValueError("the run wrote no table (see its status and error)")
    return table.to_pandas()
