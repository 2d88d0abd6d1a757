"""`cache verify` and `cache recover`: read every record of a cache, and copy what
is readable into a fresh one.

Both read the data file with `pages.DataFile`, not LMDB: a truncated file or a
page of zeros would crash an LMDB reader (SIGBUS, an assertion), and the point of
these commands is to work on exactly such files. A record is good when its
checksum matches (or, written before checksums, when it decodes; compressed or
not) and it is the kind of record its database holds; `recover` writes every
record it keeps compressed. `recover` also carves the leaf pages that no
database reaches any more (under a damaged branch page): records are written once
and never changed, so any good copy of one is the record. A page LMDB freed (an
older copy of a changed page, or the page of records `cache drop` deleted) holds
records the cache no longer has: only the good older copy of a record damaged where
the database reaches it, or of one in the key range of a damaged page, is taken
from it; a deleted record never comes back (issue 58: `recover` after a drop brought
every dropped record back, and `verify` counted them as found on a sound cache).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import msgspec

from . import pages, records
from .store import DBS, Store

__all__ = ["BadRecord", "PageProblem", "DatabaseReport", "Report", "verify", "recover", "RECORD_TYPES", "FREE_LIST"]

RECORD_TYPES: dict[str, type] = {"endings": records.Endings, "verdicts": records.Verdict,
                                 "tokens": records.TokenCount, "positions": records.JudgedPosition}
_DB_OF_TYPE = {t: db for db, t in RECORD_TYPES.items()}
_BATCH = 1000  # records per write transaction of `recover`
FREE_LIST = "(free pages)"  # the database of a damaged page of LMDB's free-page list (it holds no record)


class BadRecord(msgspec.Struct):
    database: str
    key: str  # hex
    reason: str


class PageProblem(msgspec.Struct):
    database: str
    page: int
    after: str  # hex of the last key read before the page ("" at the start)
    reason: str


class DatabaseReport(msgspec.Struct):
    records: int = 0  # good records
    checked: int = 0  # of which with a checksum
    bad: int = 0
    compressed: int = 0  # good records stored compressed (issue 28; the others are msgpack as before)


class Report(msgspec.Struct, kw_only=True):
    path: str
    file_bytes: int = 0
    problem: str | None = None  # the file as a whole (truncated, not LMDB)
    databases: dict[str, DatabaseReport] = {}
    bad: list[BadRecord] = []
    pages: list[PageProblem] = []
    unreached: int = 0  # good records found only in pages no database reaches
    bad_recovered: int = 0  # of the bad records, those with a good older copy among them (recover keeps it)
    free_unread: bool = False  # LMDB's free-page list could not be read: the carving took every page's records
    # of `unreached`, those taken from pages LMDB had freed for being in the key range of a damaged page: older
    # copies of what it held, or records deleted before (a `cache drop`), which nothing tells apart
    from_freed: int = 0
    written: dict[str, int] = {}  # `recover`: records written into the new cache, per database

    @property
    def sound(self) -> bool:
        return self.problem is None and not self.bad and not self.pages


def verify(path: str | os.PathLike) -> Report:
    """Read and decode every record of the cache at `path`. Raises FileNotFoundError
    when it holds no data file and pages.PageError when it is not an LMDB file."""
    report, _ = _read(Path(path), keep=False)
    return report


def recover(src: str | os.PathLike, dst: str | os.PathLike) -> Report:
    """Copy every good record of the cache `src` into a new cache at `dst` (which
    must not exist yet, or be an empty folder), each with a checksum; `src` is only
    read. The report says what was found and `written` what the new cache holds."""
    dst = Path(dst)
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise FileExistsError(f"{dst} exists and is not an empty folder: recover writes a new cache")
    report, found = _read(Path(src), keep=True)
    with Store(dst) as store:
        for db, recs in found.items():
            items = [(db, key, rec) for key, rec in recs.items()]
            for i in range(0, len(items), _BATCH):
                store.put_many(items[i:i + _BATCH])
        report.written = dict(store.counts.writes)
    return report


def _read(path: Path, keep: bool) -> tuple[Report, dict[str, dict[bytes, records.Record]]]:
    if not (path / pages.DATA_FILE).is_file():
        raise FileNotFoundError(f"no cache at {path} (no {pages.DATA_FILE} in it)")
    report = Report(path=str(path), databases={db: DatabaseReport() for db in DBS})
    found: dict[str, dict[bytes, records.Record]] = {db: {} for db in DBS}
    with pages.DataFile(path) as f:
        report.file_bytes = f.size
        if f.size < f.meta.needed_bytes:
            report.problem = (f"{pages.DATA_FILE} is {f.size:,} bytes but its last transaction needs "
                              f"{f.meta.needed_bytes:,} (a partial copy or a full disk?)")

        def on_error(db: str):
            return lambda pgno, after, why: report.pages.append(PageProblem(db, pgno, after.hex(), why))

        roots = f.databases(on_error("(main)"))
        main_damaged = bool(report.pages)
        gaps: dict[str, list[tuple[bytes, bytes | None]]] = {db: [] for db in DBS}  # key ranges damaged pages held
        for db in DBS:
            root = roots.get(db.encode())
            if root is None:
                if main_damaged:  # (its root may be on the damaged page: every key is in doubt)
                    gaps[db].append((b"", None))
                continue
            for key, value in _walk(f, root, on_error(db), gaps[db]):
                _take(report, found, db, key, value, keep)
        before = len(report.pages)
        free = f.free_pages(on_error(FREE_LIST))
        report.free_unread = len(report.pages) > before
        if report.free_unread:
            free = set()  # which pages are free is unknown: every page's records are taken, as before
        bad: dict[str, set[bytes]] = {db: set() for db in DBS}
        for b in report.bad:
            bad[b.database].add(bytes.fromhex(b.key))
        # the pages in use first: a record found there is the one the cache held, not an older copy of it
        in_use = (pgno for pgno in f.page_numbers if pgno not in free)
        for pgno, key, value in itertools.chain(f.leaves(in_use), f.leaves(sorted(free))):
            rec = _good(value)
            if rec is None:
                continue
            rec_db = _DB_OF_TYPE.get(type(rec))
            if rec_db is None or key in found[rec_db]:
                continue
            if pgno in free and key not in bad[rec_db]:
                if not _in_gap(key, gaps[rec_db]):
                    continue  # a record LMDB let go: deleted, or an older copy of one the database holds
                report.from_freed += 1
            found[rec_db][key] = rec
            report.unreached += 1
            report.bad_recovered += key in bad[rec_db]
    return report, found


def _walk(f: pages.DataFile, root: int, on_error, gaps: list[tuple[bytes, bytes | None]]):
    """(key, value) of every leaf node under `root` (`DataFile.walk`); the key range
    each run of damaged pages held (between the keys read either side of it) is
    appended to `gaps`."""
    gap: list[bytes] = []  # the key read before an open gap

    def on_page_error(pgno: int, after: bytes, why: str) -> None:
        on_error(pgno, after, why)
        if not gap:
            gap.append(after)

    for key, _, value in f.walk(root, on_page_error):
        if gap:
            gaps.append((gap.pop(), key))
        yield key, value
    if gap:
        gaps.append((gap.pop(), None))


def _in_gap(key: bytes, gaps: list[tuple[bytes, bytes | None]]) -> bool:
    return any(low < key and (high is None or key < high) for low, high in gaps)


def _take(report: Report, found: dict, db: str, key: bytes, value, keep: bool) -> None:
    """Count one record a database reaches; keep it for `recover`."""
    stats = report.databases[db]
    try:
        rec = records.decode(value)
        if not isinstance(rec, RECORD_TYPES[db]):
            raise records.DamagedRecord(f"a {type(rec).__name__} record in the {db} database")
    except records.DamagedRecord as e:
        stats.bad += 1
        report.bad.append(BadRecord(db, key.hex(), str(e)))
        return
    stats.records += 1
    stats.checked += records.is_checked(value)
    stats.compressed += records.is_compressed(value)
    # verify keeps only the keys (to tell the records no database reaches), recover the records
    found[db][key] = rec if keep else None


def _good(value) -> records.Record | None:
    try:
        return records.decode(value)
    except records.DamagedRecord:
        return None
