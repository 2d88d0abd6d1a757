"""What an input file that is not UTF-8 is told (core/inputs/jsonl.py and tabular.py read
every text input as UTF-8): the byte and where it is, and the way out, a command that
converts the file, run as printed; not when the file mixes encodings, which converting
it whole would garble."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from tension.core.errors import InputError

__all__ = ["STDIN", "NotUtf8Error", "not_utf8", "utf16", "display_name"]

STDIN = "-"  # the input path that means standard input


class NotUtf8Error(InputError):
    """A line holding a byte that is not UTF-8, with what `not_utf8` needs to say it
    again once the whole file is read (`mixed`)."""

    def __init__(self, path: str, line: int, field: str | None, raw: bytes, start: int, where: str = "",
                 utf8_line: int | None = None):
        super().__init__(path, line, field, not_utf8(path, raw, start, where, utf8_line))
        self.raw, self.start, self.where = raw, start, where

    def mixed(self, utf8_line: int) -> NotUtf8Error:
        """The same error in a file whose line `utf8_line` is UTF-8 beyond ASCII."""
        return NotUtf8Error(self.path, self.line, self.field, self.raw, self.start, self.where, utf8_line)


def not_utf8(path: str, raw: bytes, start: int, where: str = "", utf8_line: int | None = None) -> str:
    """What an InputError says of `raw` (a line of `path`), whose byte `start` is
    not UTF-8: the byte, where it is (`where`, else its column), and the way out:
    a line that reads as Windows-1252 (cp1252, what Excel and older Windows tools
    save "CSV" and text in) gets the iconv command that converts the file. Not when
    the file's line `utf8_line` is UTF-8 beyond ASCII: the file mixes encodings, and
    converting it whole would garble that line's text (or iconv stop half-way, leaving
    half a file): the record is to be saved again as UTF-8."""
    msg = f"not valid UTF-8 (byte 0x{raw[start]:02x} at {where or f'column {start + 1}'})"
    src, dst = _converted(path)
    if utf8_line is not None:
        try:
            seen = f" (it reads as Windows-1252, where the byte is {raw[start:start + 1].decode('cp1252')!r})"
        except UnicodeDecodeError:
            seen = ""
        return (msg + f"; the file mixes encodings: line {utf8_line} is UTF-8 beyond ASCII, which converting the "
                      f"whole file (iconv) would garble: save this record's text as UTF-8{seen} and read the file "
                      "again")
    try:
        char = raw[start:start + 1].decode("cp1252")
        raw.decode("cp1252")
    except UnicodeDecodeError:
        return msg + f"; the file is read as UTF-8: convert it (iconv -f ITS-ENCODING -t UTF-8 {src} > {dst})"
    return (msg + f"; the file reads as Windows-1252 (cp1252, as Excel and older Windows tools save text; the byte is "
                  f"{char!r} there): "
                  f"convert it to UTF-8 and read the new file: iconv -f CP1252 -t UTF-8 {src} > {dst}")


def _converted(path: str) -> tuple[str, str]:
    """A file and the one its conversion to UTF-8 is written to, as a shell command names them."""
    shown = display_name(path)
    if shown == "<stdin>":
        return "FILE", "FILE.utf8"
    p = Path(shown)
    return shlex.quote(shown), shlex.quote(str(p.with_name(f"{p.stem}.utf8{p.suffix}")))


def utf16(path: str, what: str) -> str:
    """What a FileError says of a file whose byte-order mark says UTF-16 (`what`: "the corpus"),
    with the iconv command that writes it as UTF-8 beside it (run as printed: the new file)."""
    src, dst = _converted(path)
    return (f"UTF-16 (its byte-order mark says so); {what} is read as UTF-8: convert it to UTF-8 and read the new "
            f"file: iconv -f UTF-16 -t UTF-8 {src} > {dst}")


def display_name(path: str | os.PathLike) -> str:
    """The path as messages name it: ``<stdin>`` for ``-``."""
    return "<stdin>" if str(path) == STDIN else str(path)
