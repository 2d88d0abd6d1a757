"""`cache merge`: join the caches of several machines (each ran its `--shard` on a
cache of its own local disk) into one, from which a final run sends nothing.

Each source record is checked by the records module's own check (its checksum,
whatever the record's format: `records.decode`) and copied as its stored bytes,
never re-encoded. A key DST already holds is either the same answer (the same bytes,
or records equal but for their bookkeeping: when and how fast they were made,
`created` and `seconds`, and the server's token counts, `usage`, whose
`cached_tokens` depend on what its prefix cache held at that moment) and counted
as already there, or a different answer (other texts, finish reasons, verdicts,
log-probabilities or model): a conflict. DST keeps the record it holds (its
own, or the first source's in the order given), and every conflict is reported with
its database, key and sources; the merge exits 1. A damaged source record is
reported and skipped (a run asks again for it).

After a conflict of endings, the source's verdicts and judged records of endings
DST does not keep (its texts that DST's record lacks) are left out, and counted
(`left_out`): no run would read them. A verdict or judged record says which
ending it judged by its link (`records.ending_link`, format 3); one written before
has none, and is copied as before (never read either: its key is that of a judge
request for an ending DST does not hold).

Records are written in batches, one LMDB transaction each: a merge killed mid-way
leaves DST a sound cache holding whole batches, and the same command run again
completes it (what is there counts as already there).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

import msgspec

from . import records
from .store import DBS, Store
from .verify import RECORD_TYPES

__all__ = ["BATCH", "DST_BEFORE", "Conflict", "DamagedSource", "SourceCounts", "MergeReport", "merge", "last_merge",
           "same_answer"]

BATCH = 1000  # records per write transaction: a kill loses at most one batch's work, never DST's soundness
_BATCH_BYTES = 32 << 20  # … or fewer, when the records are large (endings)
DST_BEFORE = "DST"  # a conflict's record that DST held before this merge
_KEPT = 100  # conflicts and damaged records the cache's note of its last merge lists (all are counted)
# An answer's bookkeeping, not the answer: when and how fast it was made, and the
# server's token counts (two runs of one seeded request differ in `cached_tokens`,
# which is what the server's prefix cache held at that moment)
_BOOKKEEPING = ("created", "seconds", "usage")
# … nor which endings record a verdict was written for (one judge request may judge
# the same ending of two records), nor whether it says so (written before format 3)
_LINKS = ("of_ending", "of_endings")


class Conflict(msgspec.Struct):
    database: str
    key: str  # hex
    source: str  # the source whose record differs from DST's
    kept_from: str  # where DST's record came from: DST_BEFORE, or a source (this merge copied it)


class DamagedSource(msgspec.Struct):
    source: str
    database: str
    key: str  # hex
    reason: str


class SourceCounts(msgspec.Struct, kw_only=True):
    path: str
    copied: dict[str, int] = {}
    present: dict[str, int] = {}  # already in DST with the same answer
    conflicting: dict[str, int] = {}
    damaged: dict[str, int] = {}
    left_out: dict[str, int] = {}  # verdicts and judged records of endings that lost a conflict


class MergeReport(msgspec.Struct, kw_only=True):
    dst: str
    sources: list[SourceCounts] = []
    conflicts: list[Conflict] = []
    damaged: list[DamagedSource] = []
    # of the damaged source records, those whose key DST holds no good record of after the merge (another
    # source's or DST's own copy stands in for the others): what a run from DST asks again for
    lost: int = 0
    finished: float = 0.0

    def total(self, what: str) -> dict[str, int]:
        """`copied`, `present`, `conflicting`, `damaged` or `left_out`, summed over the sources, per database."""
        out = dict.fromkeys(DBS, 0)
        for s in self.sources:
            for db, n in getattr(s, what).items():
                out[db] += n
        return out

    @property
    def clean(self) -> bool:
        return not self.conflicts and not self.damaged


def same_answer(a: records.Record, b: records.Record) -> bool:
    """Whether two records hold the same answer: equal but for their bookkeeping
    (when and how fast it was made, the server's token counts)."""
    if type(a) is not type(b):
        return False
    da, db = msgspec.structs.asdict(a), msgspec.structs.asdict(b)
    for field in _BOOKKEEPING + _LINKS:
        da.pop(field, None)
        db.pop(field, None)
    return da == db


def merge(sources: Sequence[str | os.PathLike], dst: str | os.PathLike,
          progress: Callable[[int], None] = lambda n: None) -> MergeReport:
    """Copy every good record of each source cache into the cache `dst` (made when
    missing). The sources are only read; `progress(n)` is told of each batch.
    Callers check that no source is DST and that each source holds a cache."""
    report = MergeReport(dst=str(dst))
    copied_from: dict[tuple[str, bytes], str] = {}  # records this merge wrote into DST, and from where
    with Store(dst) as out:
        for src in sources:
            counts = SourceCounts(path=str(src), copied=dict.fromkeys(DBS, 0), present=dict.fromkeys(DBS, 0),
                                  conflicting=dict.fromkeys(DBS, 0), damaged=dict.fromkeys(DBS, 0),
                                  left_out=dict.fromkeys(DBS, 0))
            report.sources.append(counts)
            losing: set[bytes] = set()  # links of this source's verdicts and judged records DST has no use for
            with Store(src, readonly=True) as store:
                for db in DBS:  # endings first: their conflicts decide what `losing` holds
                    batch: list[tuple[str, bytes, bytes]] = []
                    size = 0
                    for key, value in store.values(db):
                        key, value = bytes(key), bytes(value)
                        rec = _record(db, value)
                        if isinstance(rec, str):
                            counts.damaged[db] += 1
                            report.damaged.append(DamagedSource(str(src), db, key.hex(), rec))
                            progress(1)
                            continue
                        if losing and _link(rec) in losing:
                            counts.left_out[db] += 1
                            progress(1)
                            continue
                        batch.append((db, key, value))
                        size += len(value)
                        if len(batch) >= BATCH or size >= _BATCH_BYTES:
                            _write(out, batch, counts, report, copied_from, progress, losing)
                            batch, size = [], 0
                    _write(out, batch, counts, report, copied_from, progress, losing)
        report.lost = _still_missing(out, report.damaged)
        report.finished = time.time()
        kept = msgspec.structs.replace(report, conflicts=report.conflicts[:_KEPT], damaged=report.damaged[:_KEPT])
        out.put_meta("last_merge", msgspec.json.encode(kept))
    return report


def last_merge(store: Store) -> MergeReport | None:
    """The report of the last merge into this cache (`cache stats`)."""
    v = store.get_meta("last_merge")
    return msgspec.json.decode(v, type=MergeReport) if v else None


def _still_missing(out: Store, damaged: list[DamagedSource]) -> int:
    """How many keys of the damaged source records DST holds no good record of."""
    keys: dict[str, set[bytes]] = {}
    for d in damaged:
        keys.setdefault(d.database, set()).add(bytes.fromhex(d.key))
    return sum(rec is None for db, ks in keys.items() for rec in out.get_many(db, sorted(ks)))


def _record(db: str, value: bytes) -> records.Record | str:
    """The good record of `db` a stored value holds, or why it is none."""
    try:
        rec = records.decode(value)
    except records.DamagedRecord as e:
        return str(e)
    if not isinstance(rec, RECORD_TYPES[db]):
        return f"a {type(rec).__name__} record in the {db} database"
    return rec


def _link(rec: records.Record) -> bytes:
    """The link of a verdict or judged record to what it judged (b"": none)."""
    if isinstance(rec, records.Verdict):
        return rec.of_ending
    if isinstance(rec, records.JudgedPosition):
        return rec.of_endings
    return b""


def _lost(key: bytes, kept: records.Record, lost: records.Record) -> set[bytes]:
    """The links of what judged the endings `lost` (at `key`) that DST, keeping
    `kept`, does not hold: its verdicts of texts `kept` lacks, and its judged record
    when the texts differ."""
    if not (isinstance(kept, records.Endings) and isinstance(lost, records.Endings)) or kept.texts == lost.texts:
        return set()
    there = set(kept.texts)
    out = {records.ending_link(key, t) for t in set(lost.texts) - there}
    out.add(records.endings_link(key, lost.texts))
    return out


def _write(out: Store, batch: list[tuple[str, bytes, bytes]], counts: SourceCounts, report: MergeReport,
           copied_from: dict[tuple[str, bytes], str], progress: Callable[[int], None], losing: set[bytes]) -> None:
    if not batch:
        return
    for (db, key, value), there in zip(batch, out.put_values(batch), strict=True):
        if there is None:
            counts.copied[db] += 1
            copied_from[(db, key)] = counts.path
            continue
        if there == value:
            counts.present[db] += 1
            continue
        kept, theirs = records.decode(there), records.decode(value)
        if same_answer(kept, theirs):
            counts.present[db] += 1
        else:
            counts.conflicting[db] += 1
            report.conflicts.append(Conflict(db, key.hex(), counts.path, copied_from.get((db, key), DST_BEFORE)))
            losing |= _lost(key, kept, theirs)
    progress(len(batch))

