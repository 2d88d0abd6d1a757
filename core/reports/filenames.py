"""File names made from ids and group names, which may hold any character.

Two different names never get one file name: a name made only of ASCII letters,
digits, '-', '_' and '.' (not starting with '.') is kept as it is; any other name
is cleaned and gets a hash of the whole name, so `a/b`, `a_b` and `a:b` are three
files. `unique_filenames` also keeps names apart that differ only in case, for
file systems that do not tell `A` from `a` (macOS, Windows)."""

from __future__ import annotations

import hashlib
import string
from collections.abc import Sequence

__all__ = ["safe_filename", "unique_filenames"]

MAX_NAME = 100  # characters kept of the name: with a suffix it stays far below the 255 bytes of a file name
_SAFE = frozenset(string.ascii_letters + string.digits + "-_.")
_HASH = 8  # hex digits of the name's sha256: one pair in ~4 billion collides


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH]


def safe_filename(name: str) -> str:
    """``name`` itself when it is a safe file name of at most MAX_NAME characters;
    otherwise every other character replaced by '_', cut, and ``-`` plus a hash of
    the whole name appended (module docstring)."""
    if name and len(name) <= MAX_NAME and set(name) <= _SAFE and not name.startswith("."):
        return name
    cleaned = "".join(ch if ch in _SAFE else "_" for ch in name).lstrip(".")
    return f"{cleaned[:MAX_NAME - _HASH - 1]}-{_digest(name)}"


def unique_filenames(names: Sequence[str]) -> list[str]:
    """``safe_filename`` of each name, with a hash added where two names would
    differ only in case; distinct names stay distinct, equal names stay equal."""
    safe = [safe_filename(n) for n in names]
    owners: dict[str, set[str]] = {}
    for name, s in zip(names, safe):
        owners.setdefault(s.casefold(), set()).add(name)
    # a hashed name is unique already; a name kept as it is gets its hash when another differs only in case
    return [f"{s[:MAX_NAME - _HASH - 1]}-{_digest(n)}" if s == n and len(owners[s.casefold()]) > 1 else s
            for n, s in zip(names, safe)]
