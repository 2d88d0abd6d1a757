"""Records from where the data is, besides JSON Lines: a CSV, TSV or Parquet file
(one row a record, the header's names the fields; the CLI reads them as it reads
a .jsonl corpus), and rows in memory, as a notebook holds them (a pandas
DataFrame, a ``datasets.Dataset``, any iterable of mappings).

One contract for every form, JSON Lines' (core/inputs/jsonl.py `read_records`): a
bad record is an InputError naming the file, the line (where a CSV row begins; a
Parquet row's number, from 1) and the field, the other records are read, and a
record whose id an earlier one has is refused (`UniqueIds`). A delimited file's
delimiter is read off its header (``,`` ``;`` tab ``|``: the one that splits it
into the most columns; a tie is the suffix's, tab for .tsv), its cells may be of
any length, and a cell that is not UTF-8 is its row's error with the way out
(`not_utf8`). A required column missing from the header is one error that lists
the header's names (`missing_columns`); a column the header names twice is one error
for the file too (`named_twice`: which of the two is meant it does not say).

Rows in memory are written as JSON Lines (`write_rows`, row N on line N) and read
by the verb's own reader: the same checks and the same errors (line = row number,
field), the same stories and so the same cache keys as the same rows in a .jsonl
file. Their columns are the JSON Lines fields, or renamed by `columns`
(``{"id": "story_id", "text": "body"}``: field -> column)."""

from __future__ import annotations

import bisect
import codecs
import csv
import io
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from tension.core.errors import ConfigError, InputError
from tension.core.inputs.encodings import NotUtf8Error, utf16
from tension.core.inputs.jsonl import FileError, UniqueIds, atomic_write

__all__ = ["TABULAR", "DELIMITERS", "is_tabular", "read_tabular", "missing_columns", "named_twice", "guess_columns",
           "is_rows", "rows_of", "write_rows"]

T = TypeVar("T")
TABULAR = (".csv", ".tsv", ".parquet")
DELIMITERS = (",", "\t", ";", "|")  # what a delimited file's header is tried with, the default first
PARQUET_NEEDS = ("reading a Parquet file needs pyarrow, which tension-run does not depend on: "
                 "pip install 'tension-run[parquet]' (or pip install pyarrow), or give the corpus as .jsonl or .csv")
_NOT_UTF8 = re.compile("[\udc80-\udcff]")  # a byte that is not UTF-8, as surrogateescape keeps it


def is_tabular(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() in TABULAR


class _Row(msgspec.Struct):
    line: int  # where it begins (a CSV row's quoted text may span lines); a Parquet row's number
    cells: dict[str, Any] | None  # None: the row's `error` says why it cannot be read
    error: InputError | None = None


def read_tabular(path: str | os.PathLike, parse: Callable[[str, int, Any], T], *,
                 id_of: Callable[[T], Any] | None = None, required: Sequence[str] = (),
                 empty: str = "records") -> tuple[list[T], list[InputError]]:
    """Every record `parse` makes of the rows of a CSV, TSV or Parquet file, and an
    error per bad row; `id_of` (when given) names each record's id, which no
    earlier record may have; a `required` column missing from the header is one
    error for the file."""
    p = Path(path)
    name = str(p)
    try:
        header, rows = _parquet_rows(p) if p.suffix.lower() == ".parquet" else _csv_rows(p)
    except InputError as e:
        return [], [e]
    line = 0 if p.suffix.lower() == ".parquet" else 1
    if header is not None and (twice := named_twice(header)) is not None:
        return [], [FileError(name, line, None, twice + ": which one is meant the file does not say; rename or "
                                                        "remove one and read the file again")]
    if header is not None and (missing := [c for c in required if c not in header]):
        return [], [FileError(name, line, None, missing_columns(missing, header, "header"))]
    items: list[T] = []
    errors: list[InputError] = []
    ids = UniqueIds()
    for row in rows:
        try:
            if row.error is not None:
                raise row.error
            item = parse(name, row.line, row.cells)
            if id_of is not None:
                ids.add(name, row.line, id_of(item))
        except InputError as e:
            errors.append(e)
            continue
        items.append(item)
    if not items and not errors:
        errors.append(FileError(name, 0, None, f"no {empty} (the file has no rows)"))
    return items, errors


def named_twice(names: Sequence[str]) -> str | None:
    """What is wrong with a header that names a column twice (None: none does). A row read
    by name keeps one of the two cells, and which one is meant the header does not say, so
    a story could be another column's text; columns without a name (a spreadsheet's empty
    trailing ones) are read by no one."""
    seen: dict[str, int] = {}
    for i, n in enumerate(names, 1):
        if n == "":
            continue
        if n in seen:
            return f"the column {n!r} is named twice (columns {seen[n]} and {i})"
        seen[n] = i
    return None


def missing_columns(missing: Sequence[str], names: Sequence[str], where: str) -> str:
    """What a table (`where`: "header", or "record") lacking the `missing` fields
    says: its names, the name that differs only in case, and the way out (the
    `columns` mapping, where `guess_columns` finds every column)."""
    have = ", ".join(f"`{n}`" for n in names) or "none"
    say = " and ".join(f"`{m}`" for m in missing)
    if where == "header":
        msg = f"no column {say} (the header's columns: {have})"
    else:
        msg = f"no field {say} (the record's fields: {have})"
    cased = [f"`{n}` is `{m}` in another case" for m in missing for n in names if n.casefold() == m]
    if cased:
        msg += f"; names are case-sensitive: {', '.join(cased)}"
    guess = guess_columns(missing, names)
    mapping = "{" + ", ".join(f"{f!r}: {c!r}" for f, c in guess.items()) + "}"
    if where == "header":
        msg += f"; name the columns {say} in the header (line 1)"
        if len(guess) == len(missing):  # a mapping that reads the file as it is
            msg += (f", or read the file into a DataFrame and give it with columns={mapping} (Python: "
                    "tension.score(frame, columns=…))")
        return msg
    return msg + f"; rows in memory (a DataFrame, a Dataset) are renamed by columns={mapping}"


def guess_columns(fields: Sequence[str], names: Sequence[str]) -> dict[str, str]:
    """The column that likely holds each field: its name in another case, else
    (for `id` and `text`) the one column named like it (``story_id``, ``body``)."""
    like = {"id": lambda n: n.endswith("id"),
            "text": lambda n: "text" in n or n in ("body", "story", "content")}
    out = {}
    for f in fields:
        cands = [n for n in names if n.casefold() == f]
        if not cands and f in like:
            cands = [n for n in names if like[f](n.casefold())]
        if len(cands) == 1:
            out[f] = cands[0]
    return out


def _delimiter(first_line: str, suffix: str) -> str:
    """The delimiter a header line is written with: the one of DELIMITERS that
    splits it into the most cells; on a tie the suffix's (tab for .tsv)."""
    default = "\t" if suffix == ".tsv" else ","
    counts = {d: len(next(csv.reader([first_line], delimiter=d), [])) for d in DELIMITERS}
    most = max(counts.values())
    return default if counts[default] == most else next(d for d in DELIMITERS if counts[d] == most)


def _text_of(p: Path) -> tuple[str, bytes]:
    """A delimited file's text (a byte that is not UTF-8 kept as a surrogate, for its
    row's error) and its bytes, a UTF-8 byte order mark dropped."""
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(str(p), 0, None, f"cannot open: {e.strerror or e}") from e
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise FileError(str(p), 0, None, utf16(str(p), "the file"))
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    return data.decode("utf-8", errors="surrogateescape"), data


class _BadBytes(msgspec.Struct):
    lines: list[int]  # the lines (1-based) that hold a byte that is not UTF-8
    where: list[tuple[bytes, int]]  # each such line and its first such byte
    utf8_line: int | None = None  # the first line of UTF-8 beyond ASCII: the file mixes encodings


def _bad_bytes(data: bytes) -> _BadBytes:
    bad = _BadBytes([], [])
    for n, raw in enumerate(data.split(b"\n"), 1):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad.lines.append(n)
            bad.where.append((raw, e.start))
            continue
        if bad.utf8_line is None and not raw.isascii():
            bad.utf8_line = n
    return bad


def _csv_rows(p: Path) -> tuple[list[str] | None, list[_Row]]:
    """The header of a CSV or TSV file and its rows, each with the line it begins on
    (its cells by column, every one text: an id "007" stays "007"; an empty cell is
    a missing value) or with the error that makes it unreadable."""
    name = str(p)
    text, data = _text_of(p)
    if not text.strip():
        return None, []
    delimiter = _delimiter(text.split("\n", 1)[0].rstrip("\r"), p.suffix.lower())
    bad = _bad_bytes(data) if _NOT_UTF8.search(text) else _BadBytes([], [])
    old = csv.field_size_limit()
    csv.field_size_limit(max(old, len(text) + 1))  # a cell as long as the file: a long story is the word filter's
    try:
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
        try:
            header = [c.strip() for c in next(reader, [])]
        except csv.Error as e:
            raise FileError(name, 1, None, f"the header (line 1) is not CSV: {e}") from e
        rows: list[_Row] = []
        while True:
            start = reader.line_num + 1
            try:
                cells = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                rows.append(_Row(start, None, InputError(name, start, None, f"not CSV: {e}")))
                continue
            if not any(cells):
                continue  # a blank line, as in JSON Lines
            rows.append(_csv_row(name, header, delimiter, start, cells, bad))
        return header, rows
    finally:
        csv.field_size_limit(old)


def _csv_row(name: str, header: list[str], delimiter: str, start: int, cells: list[str], bad: _BadBytes) -> _Row:
    for i, cell in enumerate(cells):
        if _NOT_UTF8.search(cell):
            k = bisect.bisect_left(bad.lines, start)
            raw, at = bad.where[k] if k < len(bad.lines) else (b"?", 0)
            line = bad.lines[k] if k < len(bad.lines) else start
            where = f"column {at + 1}" if line == start else f"line {line}, column {at + 1}"
            field = header[i] if i < len(header) else None
            e = NotUtf8Error(name, start, field, raw, at, where)
            return _Row(start, None, e if bad.utf8_line is None else e.mixed(bad.utf8_line))
    columns = ", ".join(header)
    shown = "tab" if delimiter == "\t" else repr(delimiter)
    if len(cells) < len(header):
        missing = header[len(cells)]
        return _Row(start, None, InputError(name, start, missing, f"missing: the row has {len(cells)} cells where the "
                                                                  f"header has {len(header)} columns ({columns})"))
    if len(cells) > len(header):
        return _Row(start, None, InputError(name, start, None, f"{len(cells)} cells where the header has "
                                                               f"{len(header)} columns ({columns}); a cell that holds "
                                                               f"the delimiter ({shown}) must be quoted (\"…\")"))
    return _Row(start, {k: v for k, v in zip(header, cells) if v != ""})


def _parquet_rows(p: Path) -> tuple[list[str] | None, list[_Row]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(str(p), 0, None, PARQUET_NEEDS) from None
    try:
        names = [str(c) for c in pq.read_schema(p).names]
        if named_twice(names) is not None:  # pyarrow refuses to read it by name: said as for a CSV
            return names, []
        table = pq.read_table(p)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise InputError(str(p), 0, None, f"cannot read as Parquet: {e}") from e
    rows = [_Row(i, {k: v for k, v in r.items() if v is not None}) for i, r in enumerate(table.to_pylist(), 1)]
    return [str(c) for c in table.column_names], rows


# -- rows in memory ---------------------------------------------------------------------


def is_rows(obj: object) -> bool:
    """Whether a verb's input is rows in memory rather than a path."""
    return not isinstance(obj, str | bytes | os.PathLike) and obj is not None


def rows_of(obj: Any, columns: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The rows of a DataFrame, a Dataset or an iterable of mappings, as dicts with
    the JSON Lines fields' names (`columns`: field -> column). A missing value
    (None, NaN, pandas' NA) is a field left out, as in a JSON Lines record that
    lacks it."""
    frame = hasattr(obj, "to_dict") and hasattr(obj, "columns")
    if frame:  # a pandas DataFrame (its rows made below, once its columns are known to be apart)
        names = [str(c) for c in obj.columns]
        rows: Iterable[Any] = ()
    elif hasattr(obj, "column_names"):  # a datasets.Dataset (iterated: one dict a row)
        names = list(obj.column_names)
        rows = iter(obj)
    elif isinstance(obj, Iterable) and not isinstance(obj, Mapping):
        rows, names = obj, []
    else:
        raise ConfigError(f"the input is a {type(obj).__name__}: give a path (JSON Lines, CSV, Parquet, a folder), "
                          "a pandas DataFrame, a datasets.Dataset or an iterable of mappings (one dict a record)")
    if (twice := named_twice(names)) is not None:
        raise ConfigError(f"{twice}: which one is meant the input does not say; rename or remove one")
    if frame:
        rows = obj.to_dict(orient="records")
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
