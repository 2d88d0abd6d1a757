"""Filling prompt templates: each literal ``{name}`` placeholder replaced by its
value in one pass, never by str.format — story texts contain braces, a placeholder
inside an inserted text is left alone, and another program (the know-it-all reader
of `fairplay`) must rebuild a whodunit prompt exactly from the stored templates.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

__all__ = ["fill", "story_join", "suspect_list", "render_whodunit"]


def fill(template: str, values: Mapping[str, object]) -> str:
    """Replace each ``{name}`` of `values` in one pass; other braces stay as they are."""
    if not values:
        return template
    return _placeholders(tuple(values)).sub(lambda m: str(values[m.group(1)]), template)


@functools.lru_cache(maxsize=64)
def _placeholders(names: tuple[str, ...]) -> re.Pattern[str]:
    # a whodunit fills the same names for every paragraph: compile them once
    return re.compile(r"\{(" + "|".join(re.escape(k) for k in names) + r")\}")


def story_join(paragraphs: Sequence[str]) -> str:
    """A story (or the part written so far) as one text: paragraphs separated by a
    blank line; "" before the first paragraph."""
    return "\n\n".join(paragraphs)


def suspect_list(suspects: Sequence[str]) -> str:
    return ", ".join(suspects)


def render_whodunit(template: str, *, i: int, L: int, suspects: Sequence[str], culprit: str, distractor: str,
                    story: str) -> str:
    """A whodunit prompt for paragraph `i` (1-based) of `L`: each placeholder `{i}`,
    `{L}`, `{suspects}` (names joined by ", "), `{culprit}`, `{distractor}`, `{story}`
    replaced by its value in one pass. Braces that are not one of these placeholders,
    and braces inside the values, are left as they are."""
    return fill(template, {"i": i, "L": L, "suspects": suspect_list(suspects), "culprit": culprit,
                           "distractor": distractor, "story": story})
