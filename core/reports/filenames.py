"""File names made from ids and group names, which may hold any character."""

from __future__ import annotations

__all__ = ["safe_filename"]

MAX_NAME = 100  # characters kept of the name: with a suffix it stays far below the 255 bytes of a file name


def safe_filename(name: str) -> str:
    """``name`` with every character other than a letter, digit, '-', '_' or '.'
    replaced by '_', cut to MAX_NAME characters; "_" for an empty name."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:MAX_NAME] or "_"
