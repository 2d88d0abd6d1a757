"""Records from where the data is, besides JSON Lines: a CSV or a Parquet file
(one row a record, the header's names the fields; the CLI reads them as it reads
a .jsonl corpus), and rows in memory, as a notebook holds them (a pandas
DataFrame, a ``datasets.Dataset``, any iterable of mappings).

Rows in memory are written as JSON Lines (`write_rows`, row N on line N) and read
by the verb's own reader: the same checks and the same errors (line = row number,
field), the same stories and so the same cache keys as the same rows in a .jsonl
file. Their columns are the JSON Lines fields, or renamed by `columns`
(``{"id": "story_id", "text": "body"}``: field -> column)."""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from tension.core.errors import ConfigError, InputError
from tension.core.inputs.jsonl import FileError, atomic_write

__all__ = ["TABULAR", "is_tabular", "read_tabular", "is_rows", "rows_of", "write_rows"]

T = TypeVar("T")
TABULAR = (".csv", ".parquet")
PARQUET_NEEDS = ("reading a Parquet file needs pyarrow, which tension-run does not depend on: "
                 "pip install 'tension-run[parquet]' (or pip install pyarrow), or give the corpus as .jsonl or .csv")


def is_tabular(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() in TABULAR


def read_tabular(path: str | os.PathLike, parse: Callable[[str, int, Any], T], *,
                 empty: str = "records") -> tuple[list[T], list[InputError]]:
    """Every record `parse` makes of the rows of a CSV or Parquet file, and an error
    per bad row (its line in a CSV file; its row number, from 1, in Parquet)."""
    p = Path(path)
    name = str(p)
    try:
        rows = _parquet_rows(p) if p.suffix.lower() == ".parquet" else _csv_rows(p)
    except InputError as e:
        return [], [e]
    items: list[T] = []
    errors: list[InputError] = []
    for lineno, row in rows:
        try:
            items.append(parse(name, lineno, row))
        except InputError as e:
            errors.append(e)
    if not items and not errors:
        errors.append(FileError(name, 0, None, f"no {empty} (the file has no rows)"))
    return items, errors


def _csv_rows(p: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except OSError as e:
        raise InputError(str(p), 0, None, f"cannot open: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise InputError(str(p), 0, None, f"not valid UTF-8 (byte offset {e.start})") from e
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            return []
        out = []
        for cells in reader:
            if not any(cells):
                continue  # a blank line, as in JSON Lines
            if len(cells) != len(header):
                raise InputError(str(p), reader.line_num, None, f"{len(cells)} cells where the header has "
                                                                f"{len(header)} columns")
            # every cell is text (an id "007" stays "007"); an empty one is a missing value
            out.append((reader.line_num, {k: v for k, v in zip(header, cells) if v != ""}))
        return out
    except csv.Error as e:
        raise InputError(str(p), reader.line_num, None, f"not CSV: {e}") from e


def _parquet_rows(p: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(str(p), 0, None, PARQUET_NEEDS) from None
    try:
        rows = pq.read_table(p).to_pylist()
    except OSError as e:
        raise InputError(str(p), 0, None, f"cannot read as Parquet: {e}") from e
    return [(i, {k: v for k, v in r.items() if v is not None}) for i, r in enumerate(rows, 1)]


# -- rows in memory ---------------------------------------------------------------------


def is_rows(obj: object) -> bool:
    """Whether a verb's input is rows in memory rather than a path."""
    return not isinstance(obj, str | bytes | os.PathLike) and obj is not None


def rows_of(obj: Any, columns: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The rows of a DataFrame, a Dataset or an iterable of mappings, as dicts with
    the JSON Lines fields' names (`columns`: field -> column). A missing value
    (None, NaN, pandas' NA) is a field left out, as in a JSON Lines record that
    lacks it."""
    if hasattr(obj, "to_dict") and hasattr(obj, "columns"):  # a pandas DataFrame
        names = [str(c) for c in obj.columns]
        rows: Iterable[Any] = obj.to_dict(orient="records")
    elif hasattr(obj, "column_names"):  # a datasets.Dataset (iterated: one dict a row)
        names = list(obj.column_names)
        rows = iter(obj)
    elif isinstance(obj, Iterable) and not isinstance(obj, Mapping):
        rows, names = obj, []
    else:
        raise ConfigError(f"the input is a {type(obj).__name__}: give a path (JSON Lines, CSV, Parquet, a folder), "
                          "a pandas DataFrame, a datasets.Dataset or an iterable of mappings (one dict a record)")
    rename = dict(columns or {})
    if names:
        missing = [c for c in rename.values() if c not in names]
        if missing:
            raise ConfigError(f"columns: no column {', '.join(map(repr, missing))} in the input "
                              f"(its columns: {', '.join(names)})")
    back = {column: field for field, column in rename.items()}
    out = []
    for i, row in enumerate(rows, 1):
        if not isinstance(row, Mapping):
            raise ConfigError(f"the input's row {i} is a {type(row).__name__}, not a mapping (one dict a record: "
                              "id, text, group, …)")
        out.append({back.get(str(k), str(k)): _plain(v) for k, v in row.items() if not _missing(v)})
    return out


def _missing(v: Any) -> bool:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return True
    return type(v).__name__ in ("NAType", "NaTType")  # pandas' missing values


def _plain(v: Any) -> Any:
    """A value as JSON holds it: numpy scalars as Python's, other objects as their text."""
    if isinstance(v, str | bool | int | float | list | dict) or v is None:
        return v
    if hasattr(v, "item") and callable(v.item):  # numpy scalars
        return v.item()
    if hasattr(v, "tolist"):  # numpy arrays
        return v.tolist()
    if hasattr(v, "isoformat"):  # dates and times
        return v.isoformat()
    return str(v)


def write_rows(rows: Iterable[Mapping[str, Any]], path: str | os.PathLike) -> Path:
    """`rows` as JSON Lines at `path` (row N on line N), for the verb's reader."""
    enc = msgspec.json.Encoder(enc_hook=_plain)
    atomic_write(path, b"".join(enc.encode(r) + b"\n" for r in rows))
    return Path(path)
