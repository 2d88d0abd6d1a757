"""One run's book of the cache: what it found, missed, found damaged and wrote,
per database (run.json `cache`, `cache stats`' "last run").

The store keeps the counts of its own reads and writes (cache/store.py); what
only the run knows it says here through the book's methods, not by writing its
tallies: a record read but not taken (`--refresh`), a group record that stands
for the answers it holds.
"""

from __future__ import annotations

import msgspec

__all__ = ["RunCounts"]


class RunCounts(msgspec.Struct, kw_only=True):
    """Hits and misses of one run, per database."""

    hits: dict[str, int] = {}
    misses: dict[str, int] = {}
    writes: dict[str, int] = {}
    damaged: dict[str, int] = {}  # records whose checksum failed: counted as misses too, and asked again
    finished: float = 0.0

    @classmethod
    def zero(cls, dbs: tuple[str, ...]) -> RunCounts:
        return cls(hits=dict.fromkeys(dbs, 0), misses=dict.fromkeys(dbs, 0), writes=dict.fromkeys(dbs, 0),
                   damaged=dict.fromkeys(dbs, 0))

    def not_taken(self, db: str, n: int = 1) -> None:
        """`n` records read from `db` were not taken (written before a --refresh run):
        they count as misses, not hits."""
        self.hits[db] -= n
        self.misses[db] += n

    def stood_for(self, db: str, n: int) -> None:
        """One record read stood for `n` answers of `db` (a judged position's verdicts):
        they count as the hits they replace."""
        self.hits[db] += n
