"""A table of statistics as computed, before it is written: the rows of a
verb's CSV file (stories.csv, groups.csv) typed by column, and the text the file
holds. One layout for the file and for the API's table of the same rows."""

from __future__ import annotations

import csv
import io

import msgspec

__all__ = ["Cell", "Rows", "rows_csv"]

# A cell as computed: a label (str), a count (int), a statistic (float), None where
# a statistic is undefined (an empty cell on disk)
Cell = int | float | str | None


class Rows(msgspec.Struct, frozen=True, kw_only=True):
    """A table as computed: its columns and rows. The file is these rows as text
    (`rows_csv`), so a result in memory and the file hold the same rows (the
    file's statistics rounded to 10 significant digits)."""

    columns: tuple[str, ...]
    rows: list[tuple[Cell, ...]]


def rows_csv(table: Rows) -> str:
    """The rows as CSV: statistics with 10 significant digits, None empty."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(table.columns)
    w.writerows(["" if v is None else f"{v:.10g}" if type(v) is float else v for v in r] for r in table.rows)
    return buf.getvalue()
