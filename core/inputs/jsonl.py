"""Reading JSON Lines input record by record, with errors that name file, line and
field, and writing output files atomically."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from tension.core.errors import InputError

__all__ = ["iter_lines", "decode_line", "json_type", "atomic_write"]

T = TypeVar("T")

# msgspec reports where a value failed as "... - at `$.y[3]`"; we turn the path
# into the field name users see ("y[3]").
_AT = re.compile(r"\s*-\s*at `\$\.?(?P<path>[^`]*)`$")


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line number, raw bytes)`` of every non-blank line.

    Raises InputError for a file that cannot be opened. Lines are read as bytes so
    that one line of bad UTF-8 is an error for that line, not the whole file.
    """
    p = Path(path)
    try:
        f = p.open("rb")
    except OSError as e:
        raise InputError(str(p), 0, None, f"cannot open: {e.strerror or e}") from e
    with f:
        for lineno, raw in enumerate(f, start=1):
            if raw.strip():
                yield lineno, raw


def decode_line(path: str | os.PathLike, lineno: int, raw: bytes, type: type[T],
                decoder: msgspec.json.Decoder | None = None) -> T:
    """Decode one line into ``type``; every failure becomes an InputError."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(str(path), lineno, None,
                         f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})") from e
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


def json_type(v: Any) -> str:
    """A decoded JSON value's type as an error message names it ("an array")."""
    return {bool: "a boolean", int: "a number", float: "a number", list: "an array",
            dict: "an object", type(None): "null"}.get(type(v), type(v).__name__)


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
    """Write a whole file so that readers see the old or the new one, never half."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": "utf-8", "newline": ""})) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
