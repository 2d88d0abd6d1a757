"""Text from a run (ids, group names, messages, paths) as Markdown that renders as
that text: no raw HTML reaches a renderer that passes inline HTML, no `|` cuts a
table cell, no bracket breaks an image's alt text (review 2026-12-01, 9g)."""

from __future__ import annotations

import re

__all__ = ["md_text", "md_alt", "md_code"]


def md_text(text: object) -> str:
    """An id, group name or message as Markdown text: a renderer that passes inline
    HTML gets none (`<`, `>`, `&` as entities), a table cell is not cut (`|`), and
    no line break ends the cell or list item."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
            .replace("\r", " ").replace("\n", " "))


def md_alt(text: object) -> str:
    """An image's alt text: `md_text`, with its brackets escaped so the link stays one."""
    return md_text(text).replace("[", "\\[").replace("]", "\\]")


def md_code(text: object) -> str:
    """A code span holding `text` whatever backticks it has (its HTML stays text)."""
    t = str(text).replace("\r", " ").replace("\n", " ")
    fence = "`" * (max((len(r) for r in re.findall("`+", t)), default=0) + 1)
    pad = " " if t.startswith("`") or t.endswith("`") else ""
    return f"{fence}{pad}{t}{pad}{fence}"
