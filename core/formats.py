"""The records tension-run writes to a file and reads back, each defined once so
that the writer and the reader cannot drift apart.

    Generator     the `generator` field of a whodunit line: `generate --mode whodunit`
                  writes it, `fairplay` reads it (its know-it-all reader continues
                  the story with the same prompts)
    PositionLine  one line of a score run's positions.jsonl: `score` writes it,
                  `metrics` and `report` read a run folder through it
    DEFAULT_GROUP the group of a story, curve or reader record that names none
"""

from __future__ import annotations

import msgspec

__all__ = ["DEFAULT_GROUP", "Generator", "PositionLine"]

DEFAULT_GROUP = "all"


class Generator(msgspec.Struct, kw_only=True):
    """How a whodunit was generated, so a reader can continue it from any paragraph:
    system + render_whodunit(paragraph_prompt, …) for i < L, final_prompt for i = L.

    The writer sets every field, so the defaults never show in what it writes
    (there is no omit_defaults: every field is written, in this order); they let
    `fairplay` read a generator written by hand without temperature or
    max_tokens. Unknown fields are ignored (msgspec's default) so that a file
    from a later version still reads."""

    model: str
    system: str
    paragraph_prompt: str
    final_prompt: str
    temperature: float = 1.0
    max_tokens: int = 1024
    L: int


class PositionLine(msgspec.Struct, kw_only=True):
    """One scored position: the no-rate after the reader has seen k sentences.

    The field order is the order of the keys in positions.jsonl. The reader of a
    run folder needs only id, group, k, pct and no_rate; the counts have defaults
    so that it keeps reading lines without them, and `group` defaults to
    DEFAULT_GROUP as a corpus story without one does."""

    id: str
    group: str = DEFAULT_GROUP
    k: int
    pct: float
    n_endings: int = 0
    n_match: int = 0
    n_empty: int = 0
    n_malformed: int = 0
    no_rate: float
    # The cache keys the position was scored from (hex): its endings record and its
    # judged record, so any run's endings are found without rebuilding its requests.
    endings_key: str | None = None
    judged_key: str | None = None
