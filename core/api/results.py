"""What the API verbs return: typed results holding the pipeline's own summary
(what the CLI prints from), the tables they wrote read back (per-story
statistics, groups) and the run record, each with ``to_pandas()`` where pandas is
installed (the optional extra ``pandas``: ``pip install 'tension-run[pandas]'``)."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:  # the pipelines' records, imported only to type (import tension stays light)
    from tension.core.pipelines.estimate import Estimate
    from tension.core.pipelines.fairplay import FairPlayRun
    from tension.core.pipelines.generate import GenerateSummary
    from tension.core.pipelines.score import RunSummary
    from tension.core.reports.comparison import Comparison
    from tension.core.reports.fairplay_metrics import FairPlaySummary
    from tension.core.reports.metrics import MetricsResult as ComputedMetrics

__all__ = ["Table", "ScoreResult", "EstimateResult", "MetricsResult", "CompareResult", "FairPlayResult",
           "FairPlayMetricsResult", "GenerateResult"]

Cell = int | float | str | None


def pandas() -> Any:
    """The pandas module, else an ImportError that names the extra to install."""
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("to_pandas() needs pandas, which tension-run does not depend on: "
                          "pip install 'tension-run[pandas]' (or pip install pandas)") from e
    return pd


# The columns of the tables the verbs write (core/reports/metrics.py, fairplay_metrics.py,
# fairplay_tables.py) that are not statistics: labels, kept as the strings the corpus
# gave ("007" is not "7", "NaN" not a missing value, the group "2024" not a number),
# and counts, kept as integers. Every other column is a statistic: a float, NaN
# (an empty cell) where it is undefined.
TEXT_COLUMNS = frozenset({"id", "group", "nan_reasons", "statistic", "interval", "reader"})
COUNT_COLUMNS = frozenset({"n_positions", "n", "n_nan", "L", "n_suspects", "extracted_suspects", "n_failures",
                           "renormalised", "empty_rows", "zero_rows", "bin", "n_distractor", "n_U",
                           "insufficient_gap"})
COUNT_PREFIXES = ("steps_", "early_")  # steps per reader; the early-guess flags (0/1)


def column_kind(name: str) -> str:
    """"text", "count" or "float": how a column of a verb's table is typed."""
    if name in TEXT_COLUMNS:
        return "text"
    if name in COUNT_COLUMNS or name.startswith(COUNT_PREFIXES):
        return "count"
    return "float"


class Table(msgspec.Struct, frozen=True, kw_only=True):
    """A table a verb wrote (its CSV file at ``path``): its columns, and its rows,
    typed by column (`column_kind`): labels (id, group, …) as strings, counts as
    integers, statistics as floats, an empty cell (undefined) as None."""

    path: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]

    def records(self) -> list[dict[str, Cell]]:
        """One dict per row, by column name."""
        return [dict(zip(self.columns, r)) for r in self.rows]

    def to_pandas(self) -> Any:
        """A DataFrame with a dtype per column: labels as Python strings (object),
        counts int64 (Int64 where a count is missing), statistics float64 (NaN where
        undefined)."""
        pd = pandas()
        data: dict[str, Any] = {}
        for k, name in enumerate(self.columns):
            values = [r[k] for r in self.rows]
            kind = column_kind(name)
            if kind == "text":
                data[name] = pd.Series(values, dtype=object)
            elif kind == "count" and all(isinstance(v, int) for v in values):
                data[name] = pd.Series(values, dtype="int64")
            elif kind == "count":
                data[name] = pd.Series(values, dtype="Int64")
            else:
                data[name] = pd.Series([float("nan") if v is None else v for v in values], dtype="float64")
        return pd.DataFrame(data, columns=list(self.columns))

    def __len__(self) -> int:
        return len(self.rows)


# The forms the writers give a number (f"{v:.10g}", an int): no "_", no "Infinity"
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?|-?inf|nan")


def _cell(text: str, kind: str) -> Cell:
    if kind == "text":
        return text
    if text == "":
        return None
    if kind == "count" and re.fullmatch(r"-?\d+", text):
        return int(text)
    if _NUMBER.fullmatch(text):
        return float(text)
    return text  # not a number the writers write: shown as it is, never guessed


def read_table(path: str | Path) -> Table | None:
    """The CSV at `path` as a Table; None when the verb did not write it."""
    p = Path(path)
    if not p.is_file():
        return None
    rows = list(csv.reader(io.StringIO(p.read_text(encoding="utf-8"))))
    if not rows:
        return Table(path=str(p), columns=(), rows=())
    kinds = [column_kind(c) for c in rows[0]]
    return Table(path=str(p), columns=tuple(rows[0]),
                 rows=tuple(tuple(_cell(c, k) for c, k in zip(r, kinds)) for r in rows[1:]))


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
    summary: RunSummary

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
    computed: ComputedMetrics

    def to_pandas(self) -> Any:
        return _frame(self.stories)


class EstimateResult(_Result, kw_only=True):
    """`estimate`: the Estimate (requests, tokens, cache coverage, GPU-hours,
    money; its ``run`` the run header) and the text the CLI prints."""

    estimate: Estimate
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

    comparison: Comparison
    markdown: str
    csv: str

    def to_pandas(self) -> Any:
        return pandas().DataFrame([msgspec.to_builtins(r) for r in self.comparison.rows])


class FairPlayMetricsResult(_Result, kw_only=True):
    """`fairplay_metrics`: per-story scores (stories.csv), groups (groups.csv),
    ``summary`` the reports.fairplay_metrics.FairPlaySummary."""

    stories: Table | None
    groups: Table | None
    summary: FairPlaySummary

    def to_pandas(self) -> Any:
        return _frame(self.stories)


class FairPlayResult(_Result, kw_only=True):
    """`fairplay`: the readers' run (``summary``: FairPlayRun) and its metrics
    (``metrics``: FairPlayMetricsResult, None when they did not run), the run
    record (fairplay_run.json)."""

    metrics: FairPlayMetricsResult | None
    run: dict[str, Any] | None
    summary: FairPlayRun

    def to_pandas(self) -> Any:
        """The per-story fair-play scores as a DataFrame."""
        return _frame(self.metrics.stories if self.metrics is not None else None)


class GenerateResult(_Result, kw_only=True):
    """`generate`: the stories written (the lines of ``out``), the run record
    (STORIES.run.json), ``summary`` the pipeline's GenerateSummary."""

    stories: list[dict[str, Any]]
    run: dict[str, Any] | None
    summary: GenerateSummary

    def to_pandas(self) -> Any:
        return pandas().DataFrame(self.stories)


def _frame(table: Table | None) -> Any:
    if table is None:
        pandas()  # the extra is named first, whatever else is missing
        raise ValueError("the run wrote no table (see its status and error)")
    return table.to_pandas()
