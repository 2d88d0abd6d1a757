"""Reading JSON Lines input record by record, with errors that name file, line and
field, and writing output files atomically."""

from __future__ import annotations

import codecs
import contextlib
import functools
import operator
import os
import re
import secrets
import shutil
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal, TypeVar, overload

import msgspec

from tension.core.errors import InputError
from tension.core.inputs.encodings import STDIN, NotUtf8Error, display_name, not_utf8, utf16

__all__ = ["STDIN", "MAX_NOT_TEXT", "FileError", "NotUtf8Error", "UniqueIds", "iter_lines", "is_text", "not_utf8",
           "utf16", "decode_line", "read_records", "display_name", "string_field", "check_label", "json_type",
           "atomic_write", "write_together", "folder_aside"]

T = TypeVar("T")

MAX_NOT_TEXT = 5  # lines that are not text before a file is taken for binary and left unread

# msgspec reports where a value failed as "... - at `$.y[3]`"; we turn the path
# into the field name users see ("y[3]").
_AT = re.compile(r"\s*-\s*at `\$\.?(?P<path>[^`]*)`$")


class FileError(InputError):
    """The file as a whole holds no records: it is empty, or a JSON array where
    JSON Lines belong. One error says so; no record failed (a summary counts none)."""


# Control characters in an id or group reach CSV files, file names and terminals
# raw (a NUL byte in stories.csv breaks the tools that read it as text).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_label(path: str, lineno: int, name: str, value: str | None) -> None:
    """Raise InputError when an id or group name holds a control character."""
    if value is not None and (m := _CONTROL.search(value)):
        raise InputError(path, lineno, name, f"holds a control character (U+{ord(m.group()):04X} at character "
                                             f"{m.start() + 1}); an {name} must be printable text")


def _is_json_array(raw: bytes) -> bool:
    """Whether a file's first line opens a JSON array of records (`[` alone, as
    pretty-printed; or a whole array of objects on one line), not a bad line."""
    if not raw.lstrip().startswith(b"["):
        return False
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return True  # the array goes on over the next lines
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line number, raw bytes)`` of every non-blank line; ``-`` reads
    standard input. A UTF-8 byte order mark on line 1 is dropped.

    Raises InputError for a file that cannot be opened. Lines are read as bytes so
    that one line of bad UTF-8 is an error for that line, not the whole file.
    """
    if str(path) == STDIN:
        yield from _lines(sys.stdin.buffer)
        return
    p = Path(path)
    try:
        f = p.open("rb")
    except OSError as e:
        raise InputError(str(p), 0, None, f"cannot open: {e.strerror or e}") from e
    with f:
        yield from _lines(f)


def _lines(f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    for lineno, raw in enumerate(f, start=1):
        if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8):]  # editors on Windows write one; it is no part of the JSON
        if raw.strip():
            yield lineno, raw


def is_text(raw: bytes) -> bool:
    """Whether a line can be text at all: UTF-8 without NUL bytes."""
    if b"\0" in raw:
        return False
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class UniqueIds:
    """The ids of one file's records so far, in every reader of records (JSON Lines,
    CSV, TSV, Parquet; rows in memory are read as JSON Lines): ids that look the
    same in every table are one id, equal after Unicode normalisation (café
    composed or decomposed) and trimming ("a" and "a ")."""

    def __init__(self) -> None:
        self.seen: dict[Any, tuple[int, Any]] = {}  # the id, normalised -> (its first line, the id as written)

    def add(self, path: str, lineno: int, key: Any) -> None:
        """Keep `key` (the id of the record at `lineno`); an InputError if an earlier record has it."""
        norm = unicodedata.normalize("NFC", key).strip() if isinstance(key, str) else key
        if norm in self.seen:
            first, written = self.seen[norm]
            same = "" if written == key else (f" as {written!r}: the same id after Unicode normalisation (NFC) "
                                              "and trimming")
            raise InputError(path, lineno, "id", f"duplicate id {key!r} (first on line {first}{same})")
        self.seen[norm] = (lineno, key)


def decode_line(path: str | os.PathLike, lineno: int, raw: bytes, type: type[T],
                decoder: msgspec.json.Decoder | None = None) -> T:
    """Decode one line into ``type``; every failure becomes an InputError."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NotUtf8Error(str(path), lineno, None, raw, e.start) from e
    try:
        if decoder is not None:
            return decoder.decode(raw)
        return msgspec.json.decode(raw, type=type)
    except msgspec.ValidationError as e:
        text = str(e)
        m = _AT.search(text)
        field = m.group("path") if m else None
        msg = text[: m.start()] if m else text
        if msg.startswith("Object missing required field"):
            # "Object missing required field `text`": the field is the missing one.
            name = msg.split("`")[1] if "`" in msg else None
            field = f"{field}.{name}" if field and name else name
            msg = "missing required field"
        return _raise(path, lineno, field, msg, e)
    except msgspec.DecodeError as e:
        return _raise(path, lineno, None, f"not valid JSON ({e})", e)


def _raise(path, lineno, field, msg, cause):
    raise InputError(str(path), lineno, field or None, msg) from cause


def read_records(path: str | os.PathLike, parse: Callable[[str, int, Any], T], *,
                 decode: Callable[[str, int, bytes], Any] = functools.partial(decode_line, type=dict),
                 id_of: Callable[[T], str] = operator.attrgetter("id"),
                 empty: str | None = None, what: str = "the file") -> tuple[list[T], list[InputError]]:
    """Every good record of a JSON Lines file in file order, and an InputError per
    bad line: blank lines are skipped, each line is decoded by ``decode(path, line,
    raw)`` and made a record by ``parse(path, line, value)`` (either may raise
    InputError), and a record whose id an earlier one has is an error. A file with
    neither records nor errors is an error "no EMPTY (the file is empty)" when
    ``empty`` names what it should hold. After MAX_NOT_TEXT lines that are not
    text (not UTF-8, or NUL bytes: a binary file, a wrong path) reading stops with
    one error that counts the lines left unread. A JSON array in place of JSON
    Lines is one FileError naming `what` the file should be, not one per line."""
    lines = iter_lines(path)
    path = display_name(path)
    items: list[T] = []
    errors: list[InputError] = []
    ids = UniqueIds()
    not_text = 0
    utf8_line: int | None = None  # the first line of UTF-8 beyond ASCII: with a line that is not, the file mixes
    for lineno, raw in lines:
        if lineno == 1 and raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            errors.append(FileError(path, 0, None, utf16(path, what)))
            break
        if not items and not errors and _is_json_array(raw):
            errors.append(FileError(path, lineno, None, f"a JSON array; {what} is JSON Lines, one object per line "
                                                        "(convert with jq -c '.[]')"))
            break
        try:
            if utf8_line is None and not raw.isascii() and is_text(raw):
                utf8_line = lineno
            if not is_text(raw):
                not_text += 1
                if not_text > MAX_NOT_TEXT:
                    rest = 1 + sum(1 for _ in lines)
                    errors.append(InputError(path, lineno, None, f"{not_text - 1} lines are not text (is this a "
                                             f"binary file?); stopped reading: {rest} more lines not read"))
                    break
            item = parse(path, lineno, decode(path, lineno, raw))
            ids.add(path, lineno, id_of(item))
        except InputError as e:
            errors.append(e)
            continue
        items.append(item)
    if empty and not items and not errors:
        errors.append(FileError(path, 0, None, f"no {empty} (the file is empty)"))
    if utf8_line is not None:
        errors = [e.mixed(utf8_line) if isinstance(e, NotUtf8Error) else e for e in errors]
    return items, errors


@overload
def string_field(path: str, lineno: int, obj: dict[str, Any], name: str, required: Literal[True] = True) -> str: ...
@overload
def string_field(path: str, lineno: int, obj: dict[str, Any], name: str, required: bool) -> str | None: ...
def string_field(path: str, lineno: int, obj: dict[str, Any], name: str, required: bool = True) -> str | None:
    """``obj[name]``, which must be a string; None when it is absent or null and not required."""
    if name not in obj or (obj[name] is None and not required):
        # an optional field given as null is absent: tools (fairplay among them) write it so
        if required:
            raise InputError(path, lineno, name, "missing required field")
        return None
    v = obj[name]
    if not isinstance(v, str):
        msg = f"expected a string, got {json_type(v)}"
        if name in ("id", "group") and isinstance(v, int | float) and not isinstance(v, bool):
            # a Parquet, DataFrame or Dataset column of numbers (ids 1, 2, 3): every row refused alike
            msg += (f" ({v!r}); an {name} is text: write it as \"{v}\", or make the column text "
                    f"(pandas: df[{name!r}] = df[{name!r}].astype(str))")
        raise InputError(path, lineno, name, msg)
    return v


def json_type(v: Any) -> str:
    """A decoded JSON value's type as an error message names it ("an array")."""
    return {bool: "a boolean", int: "a number", float: "a number", list: "an array",
            dict: "an object", type(None): "null"}.get(type(v), type(v).__name__)


def atomic_write(path: str | os.PathLike, data: str | bytes | Iterable[bytes]) -> None:
    """Write a whole file so that readers see the old or the new one, never half.
    `data` may be an iterable of byte chunks (lines), written as they come: a large
    output never has to be whole in memory. The file gets the mode any new file
    gets (0666 less the umask), as `open` would give it: a temporary file's private
    0600 would hide results from a group."""
    p = Path(path)
    tmp = _written_aside(p, data)
    try:
        os.replace(tmp, p)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename is None:
            raise _named(e, p) from e
        raise


def write_together(files: dict[Path, str | bytes], *, drawn: dict[Path, Path] | None = None) -> None:
    """Write several files as one output: each whole under a temporary name first, then
    all renamed into place while stop signals wait (core/signals.py `held`). A verb
    stopped or failed while it writes leaves the set that was there before (or none),
    never some files new and some old or missing (issue 58, G6: subsample.json and .txt
    without the .png, in a folder that looked done).

    `drawn`: outputs the verb has already written under hidden names (its figures, drawn
    into a `folder_aside`), by the place each goes to; they are put in place with the
    files. A file replaces the one there; a folder replaces the folder there whole (the
    earlier one is removed once everything is in place)."""
    from tension.core.signals import held

    aside: list[tuple[Path, Path]] = []
    earlier: list[Path] = []  # folders replaced whole, moved aside under hidden names until the end
    try:
        for path, data in files.items():
            aside.append((_written_aside(Path(path), data), Path(path)))
        for place, tmp in (drawn or {}).items():
            Path(place).parent.mkdir(parents=True, exist_ok=True)
            aside.append((Path(tmp), Path(place)))
        with held():
            while aside:
                tmp, place = aside[0]
                if tmp.is_dir() and place.is_dir():
                    gone = place.parent / f".{place.name}.{secrets.token_hex(6)}.old"
                    os.replace(place, gone)
                    try:
                        os.replace(tmp, place)
                    except BaseException:
                        os.replace(gone, place)
                        raise
                    earlier.append(gone)
                else:
                    os.replace(tmp, place)
                aside.pop(0)
    except BaseException:
        for tmp, _ in aside:  # what was not renamed (a failed write names its file: `_written_aside`)
            _remove(tmp)
        raise
    finally:
        for gone in earlier:
            shutil.rmtree(gone, ignore_errors=True)


@contextlib.contextmanager
def folder_aside(place: Path) -> Iterator[Path]:
    """A new hidden folder beside `place` (a folder, or a file's parent) in which a verb
    draws outputs before `write_together(drawn=…)` puts them in place; on leaving, it is
    removed with whatever of it was not moved (a verb stopped while it draws leaves
    nothing). An OSError within names the output (`place`, or the file in it), not the
    hidden folder. Made as `mkdir` makes any folder (0777 less the umask): moved into place,
    it is the output folder."""
    place = Path(place)
    place.parent.mkdir(parents=True, exist_ok=True)
    tmp = place.parent / f".{place.name}.{secrets.token_hex(6)}.tmp"
    tmp.mkdir()
    try:
        yield tmp
    except OSError as e:  # a failed drawing names the output, never the hidden folder (a full disk: no file)
        if e.filename is None:
            raise _named(e, place) from e
        where = Path(os.fsdecode(e.filename)) if isinstance(e.filename, (str, bytes, os.PathLike)) else None
        if where is None or not where.is_relative_to(tmp):
            raise
        raise _named(e, place / where.relative_to(tmp)) from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove(p: Path) -> None:
    """A file or a folder tree, gone (nothing if it is not there)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def _written_aside(p: Path, data: str | bytes | Iterable[bytes]) -> Path:
    """`data` written whole and synced to a hidden temporary file beside `p`; its path."""
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    tmp = p.parent / f".{p.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as f:
            if isinstance(data, (bytes, bytearray, memoryview)):
                f.write(data)
            else:
                f.writelines(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename is None:
            raise _named(e, p) from e
        raise
    return tmp


def _named(e: OSError, p: Path) -> OSError:
    """A failed write names no file (a full disk): the error, naming the one being written."""
    return OSError(e.errno, e.strerror, str(p))
