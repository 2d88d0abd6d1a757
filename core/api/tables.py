"""A table a verb computed and wrote (stories.csv, groups.csv, …) as the API hands
it over (`Table`): its cells typed by column (`column_kind`: labels as strings,
counts as integers, statistics as floats, undefined as None), ``to_pandas()`` where
pandas is installed (the optional extra ``pandas``: ``pip install
'tension-run[pandas]'``), its HTML for a notebook (`html_table`), and a saved run's
CSV file read back typed as the verbs' own (`read_table`)."""

from __future__ import annotations

import csv
import html
import io
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from pandas import DataFrame

    from tension.core.reports.rows import Rows

__all__ = ["Table"]

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
    """A table a verb computed and wrote (its CSV file at ``path``): its columns,
    and its rows, typed by column (`column_kind`): labels (id, group, …) as
    strings, counts as integers, statistics as floats, undefined (an empty cell
    in the file) as None."""

    path: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]

    def records(self) -> list[dict[str, Cell]]:
        """One dict per row, by column name."""
        return [dict(zip(self.columns, r)) for r in self.rows]

    def to_pandas(self) -> DataFrame:
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

    @classmethod
    def of(cls, path: str | Path, computed: Rows) -> Table:
        """The rows a verb computed and wrote to `path` (as text: statistics to 10 digits)."""
        return cls(path=str(path), columns=computed.columns, rows=tuple(computed.rows))

    def _repr_html_(self) -> str:
        return html_table(self)


SHOWN_ROWS = 20  # rows of a table a notebook shows; the rest are counted under it


def html_table(table: Table, caption: str = "") -> str:
    """The table as HTML for a notebook (every cell escaped: ids, groups and
    reasons are the corpus's own text): the first SHOWN_ROWS rows, the rest counted."""
    def cell(v: Cell) -> str:
        if v is None:
            return "<td></td>"
        if isinstance(v, float):
            return f"<td>{html.escape(f'{v:.4g}')}</td>"
        return f"<td>{html.escape(str(v))}</td>"

    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join(f"<tr>{''.join(cell(v) for v in r)}</tr>" for r in table.rows[:SHOWN_ROWS])
    more = (f"<p>… {len(table.rows) - SHOWN_ROWS} more rows (to_pandas() has them all)</p>"
            if len(table.rows) > SHOWN_ROWS else "")
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


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
    """The CSV at `path` (a saved run's table) as a Table, typed as the verbs'
    own (`Table.of`, from memory); None when no such file was written."""
    p = Path(path)
    if not p.is_file():
        return None
    rows = list(csv.reader(io.StringIO(p.read_text(encoding="utf-8"))))
    if not rows:
        return Table(path=str(p), columns=(), rows=())
    kinds = [column_kind(c) for c in rows[0]]
    return Table(path=str(p), columns=tuple(rows[0]),
                 rows=tuple(tuple(_cell(c, k) for c, k in zip(r, kinds)) for r in rows[1:]))
