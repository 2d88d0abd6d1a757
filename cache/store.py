"""The LMDB store: named databases for endings, verdicts, judged positions and token counts.

One environment (a folder) holds every LLM result, keyed by ``keys.request_key``.
Reads are lock-free memory-mapped lookups; writes go in batches, one transaction
per batch (group commit: on this machine ≈2,100 synced single-record commits/s vs
≈122,000 records/s at 100 records per commit). The map grows when full. Several
processes may share one store: LMDB serialises writers, readers never block.

A damaged store is refused before LMDB maps it (`pages.check`: a truncated file
would kill the process with SIGBUS), and LMDB's own errors about bad pages stop
the run with `CacheDamagedError`, which says how to recover. A record whose
checksum fails is a miss (counted in `damaged`): the run asks for it again and
writes the new answer over it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import lmdb
import msgspec

from tension.core.errors import CacheError

from . import mounts, pages, records, shared
from .failures import DAMAGE, cannot_write, damaged, replace_damaged, write_failure
from .paths import cache_root
from .run_counts import RunCounts

__all__ = ["DBS", "FORMAT_VERSION", "Store", "default_path", "damaged", "write_failure",
           "cannot_write", "open_for_run"]

# "positions" (added later, no format change): one record per judged position, so a
# rerun reads a position's n verdicts with one lookup; older caches simply lack it.
DBS = ("endings", "verdicts", "tokens", "positions")
# The cache's format, kept in its meta database, says which release may read it
# (docs/reliability.md, "Which release reads which cache"): 1, records as msgpack,
# with or without a checksum; 2 (issue 36), records may be stored compressed
# (records.py), which a release reading up to 1 took for damaged ones; 3 (issue 36,
# M4), verdicts and judged records may carry the link to the endings they judged
# (`records.ending_link`), by which `cache merge` leaves out those of endings that
# lost a conflict. A release reading up to 2 would read them (a field it does not
# know), but a merge by it would copy those orphans and a run by it would write
# verdicts without links, which no later merge can tell: it refuses the cache. A
# cache is marked with this format in the transaction that first writes a record of
# this release into it; what an older one holds is read as it is.
FORMAT_VERSION = 3
_META = b"meta"
T = TypeVar("T")
_INITIAL_MAP = 1 << 30  # 1 GiB of address space; the file grows only as it fills
_MAX_GROWS = 16


def default_path() -> Path:
    return cache_root() / "llm.lmdb"


class Store:
    """An open cache. ``with Store(path) as s: …`` or ``open()``/``close()``."""

    def __init__(self, path: str | os.PathLike, *, map_size: int = _INITIAL_MAP, readonly: bool = False,
                 max_bytes: int | None = None):
        self.path = Path(path)
        self.readonly = readonly
        self.max_bytes = max_bytes  # the map never grows past this (None: only the disk limits it)
        if max_bytes is not None:
            map_size = min(map_size, max_bytes)
        self.counts = RunCounts.zero(DBS)  # this run's book (cache/run_counts.py): the store counts its reads
        self.env: lmdb.Environment | None = None
        self._shared: shared.Env | None = None
        self.unlocked = False  # opened read-only without LMDB's lock file (cache/shared.py `open_env`)
        self._format = FORMAT_VERSION  # the cache's, once read (`_check_format`)
        mounts.check_local(self.path)  # every verb opening a cache comes here: none on a network file system
        try:
            pages.check(self.path)  # before LMDB maps the file: a short one would SIGBUS
            if not readonly:  # private: it holds every story and ending (a shared node's other users)
                self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            # One environment per folder per process (cache/shared.py): several runs
            # of one process share it, each with its own counts.
            self._shared = shared.acquire(self.path, readonly, lambda: shared.open_env(self.path, DBS, _META,
                                                                                      map_size, readonly))
            self.env, self._dbs, self._meta = self._shared.env, self._shared.dbs, self._shared.meta
            self.unlocked = self._shared.unlocked
            # Reads may run on one thread while a writer thread commits. Growing the map
            # needs no transaction open in this process: reads and resizes share a lock,
            # and writes (of every store sharing the environment) another.
            self._map_lock, self._write_lock = self._shared.map_lock, self._shared.write_lock
            self._check_format()
        except pages.PageError as e:
            raise damaged(self.path, str(e)) from e
        except BaseException as e:
            self.close()
            if isinstance(e, DAMAGE):
                raise damaged(self.path, f"LMDB says {e}") from e
            if isinstance(e, (OSError, lmdb.Error)):
                raise CacheError(f"cannot open the cache at {self.path}: {e}") from e
            raise

    @property
    def _lmdb(self) -> lmdb.Environment:
        """The open environment (a closed store has none)."""
        assert self.env is not None, f"the cache at {self.path} is closed"
        return self.env

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """This store's use of the environment ends; the last user's closes it."""
        self.env = None
        if self._shared is not None:
            env, self._shared = self._shared, None
            shared.release(env)

    # -- format -------------------------------------------------------------

    def _check_format(self) -> None:
        with self._lmdb.begin(db=self._meta) as txn:
            v = txn.get(b"format")
        self._format = FORMAT_VERSION if v is None else int(v)
        if v is None:
            if not self.readonly:
                self._write([(_META, b"format", str(FORMAT_VERSION).encode())], meta=True)
            return
        if int(v) > FORMAT_VERSION:
            raise CacheError(f"the cache at {self.path} has format {int(v)}; this tension-run reads "
                             f"up to {FORMAT_VERSION}: upgrade tension-run or use another --cache")

    # -- reads --------------------------------------------------------------

    def get(self, db: str, key: bytes) -> records.Record | None:
        """One key (the hot path of every cached request: no list, no tallies)."""
        handle = self._dbs[db]
        if handle is not None:
            try:
                with self._map_lock, self._lmdb.begin(db=handle, buffers=True) as txn:
                    v = txn.get(key)
                    rec = records.decode(v) if v is not None else None
            except (records.DamagedRecord, lmdb.Error):
                return self.get_many(db, [key])[0]  # the slow path says what happened, and counts it
            if rec is not None:
                self.counts.hits[db] += 1
                return rec
        self.counts.misses[db] += 1
        return None

    def get_many(self, db: str, keys: Sequence[bytes]) -> list[records.Record | None]:
        """Look up many keys in one read transaction; counts hits and misses."""
        handle = self._dbs[db]
        if handle is None:
            self.counts.misses[db] += len(keys)
            return [None] * len(keys)
        out: list[records.Record | None] = []
        bad = 0
        try:
            with self._map_lock, self._lmdb.begin(db=handle, buffers=True) as txn:
                for k in keys:
                    v = txn.get(k)
                    try:
                        out.append(records.decode(v) if v is not None else None)
                    except records.DamagedRecord:
                        out.append(None)  # a miss: asked again, and the answer written over it
                        bad += 1
        except lmdb.MapResizedError:
            # Another process grew the map; adopt its size and read again.
            with self._map_lock:
                self._lmdb.set_mapsize(0)
            return self.get_many(db, keys)
        except DAMAGE as e:
            raise damaged(self.path, f"reading the {db} database failed: {e}") from e
        except lmdb.Error as e:
            raise CacheError(f"cannot read the cache at {self.path}: {e}") from e
        hits = sum(r is not None for r in out)
        self.counts.hits[db] += hits
        self.counts.misses[db] += len(out) - hits
        self.counts.damaged[db] += bad
        return out

    # -- writes -------------------------------------------------------------

    def put_many(self, items: Iterable[tuple[str, bytes, records.Record]],
                 replace: Collection[tuple[str, bytes]] = ()) -> int:
        """Write completed records in one transaction. A key already present is
        left as it is (values are written once), unless its value is damaged (its
        checksum fails) or (database, key) is in `replace` (a record asked again on
        purpose, `--refresh`): then the new one replaces it. Returns how many were
        new."""
        encoded = [(self._dbs[db], key, records.encode(rec), db, (db, key) in replace) for db, key, rec in items]
        if not encoded:
            return 0
        return self._write(encoded)

    def keys(self, db: str) -> Iterator[tuple[bytes, records.Record | None]]:
        """Every key of a database with its record (None: damaged), in key order,
        read in one transaction (`cache drop` looks at each). The store must not be
        read otherwise while this is iterated (it holds the map's lock)."""
        handle = self._dbs[db]
        if handle is None:
            return
        with self._map_lock, self._lmdb.begin(db=handle) as txn:
            for key, value in txn.cursor():
                try:
                    rec = records.decode(value)
                except records.DamagedRecord:
                    rec = None
                yield bytes(key), rec

    def values(self, db: str) -> Iterator[tuple[bytes, bytes]]:
        """Every key of a database with its stored value as it is (framed, not
        decoded), in key order, in one read transaction (`cache merge` copies them)."""
        handle = self._dbs[db]
        if handle is None:
            return
        with self._map_lock, self._lmdb.begin(db=handle) as txn:
            yield from txn.cursor()

    def put_values(self, items: Sequence[tuple[str, bytes, bytes]]) -> list[bytes | None]:
        """Write stored values as they are, in one transaction, never over a good
        record: per item None when it was written (the key was new, or its value
        damaged), else the value already there (`cache merge`)."""
        if self.readonly:
            raise CacheError(f"the cache at {self.path} is open read-only")

        def body(txn) -> list[bytes | None]:
            self._mark_format(txn)
            out: list[bytes | None] = []
            for db, key, value in items:
                handle = self._dbs[db]
                written = txn.put(key, value, db=handle, overwrite=False) or replace_damaged(txn, handle, key, value)
                out.append(None if written else bytes(txn.get(key, db=handle, default=b"")))
            return out

        out = self._transaction(body)
        self._format = FORMAT_VERSION
        return out

    def delete_many(self, items: Iterable[tuple[str, bytes]]) -> dict[str, int]:
        """Delete records in one transaction; how many were there, per database."""
        if self.readonly:
            raise CacheError(f"the cache at {self.path} is open read-only")
        gone = dict.fromkeys(DBS, 0)
        try:
            with self._write_lock, self._lmdb.begin(write=True) as txn:
                for db, key in items:
                    handle = self._dbs[db]
                    if handle is not None and txn.delete(key, db=handle):
                        gone[db] += 1
        except DAMAGE as e:
            raise damaged(self.path, f"writing to it failed: {e}") from e
        except lmdb.Error as e:
            raise CacheError(write_failure(self.path, e)) from e
        return gone

    def _write(self, encoded, meta: bool = False) -> int:
        if self.readonly:
            raise CacheError(f"the cache at {self.path} cannot be written (a read-only mount, or files this user "
                             "may only read), and this run has new answers to keep: give a writable --cache (a copy "
                             f"of it will do: cp -r {self.path} NEW, then --cache NEW) and rerun to continue; what "
                             "it holds is read from it")
        if meta:
            def put_meta(txn) -> dict[str, int]:
                for _db, key, value in encoded:
                    txn.put(key, value, db=self._meta)
                return {}
            self._transaction(put_meta)
            return 1

        def body(txn) -> dict[str, int]:
            self._mark_format(txn)
            added = dict.fromkeys(DBS, 0)
            for handle, key, value, name, replace in encoded:
                if txn.put(key, value, db=handle, overwrite=replace) or replace_damaged(txn, handle, key, value):
                    added[name] += 1
            return added

        added = self._transaction(body)
        self._format = FORMAT_VERSION
        # Counted only once the transaction committed: a batch retried after the
        # map grew must not be counted twice.
        for name, n in added.items():
            self.counts.writes[name] += n
        return sum(added.values())

    def _mark_format(self, txn: lmdb.Transaction) -> None:
        """Mark an older cache with this release's format, in the transaction that
        writes its first records: a release that reads only the older one then
        refuses it ("upgrade tension-run") rather than taking them for damaged."""
        if self._format < FORMAT_VERSION:
            txn.put(b"format", str(FORMAT_VERSION).encode(), db=self._meta)

    def _transaction(self, body: Callable[[lmdb.Transaction], T]) -> T:
        """`body` in one write transaction, run again after the map grew."""
        with self._write_lock:
            return self._transaction_locked(body)

    def _transaction_locked(self, body: Callable[[lmdb.Transaction], T]) -> T:
        for _ in range(_MAX_GROWS):
            try:
                with self._lmdb.begin(write=True) as txn:
                    return body(txn)
            except lmdb.MapFullError:
                self._grow()
            except lmdb.MapResizedError:
                with self._map_lock:
                    self._lmdb.set_mapsize(0)
            except DAMAGE as e:
                raise damaged(self.path, f"writing to it failed: {e}") from e
            except lmdb.Error as e:
                raise CacheError(write_failure(self.path, e)) from e
        raise CacheError(f"the cache at {self.path} is full after growing {_MAX_GROWS} times")

    def _grow(self) -> None:
        size = self._lmdb.info()["map_size"]
        new = size * 2
        if self.max_bytes is not None:
            if size >= self.max_bytes:
                # The limit is the user's: the same command would stop here again.
                raise CacheError(f"the cache at {self.path} is full: it reached its limit of {self.max_bytes:,} "
                                 "bytes (--cache-max-gb); the records written so far are intact and readable. "
                                 f"Raise --cache-max-gb (now {self.max_bytes / 1e9:g}) and rerun to continue")
            new = min(new, self.max_bytes)
        try:
            with self._map_lock:
                self._lmdb.set_mapsize(new)
        except lmdb.Error as e:
            raise CacheError(f"cannot grow the cache at {self.path} beyond {size} bytes: {e}") from e

    # -- stats --------------------------------------------------------------

    def stats(self) -> dict[str, dict[str, int]]:
        """Entries and bytes per database."""
        out = {}
        with self._lmdb.begin() as txn:
            for name, handle in self._dbs.items():
                if handle is None:
                    out[name] = {"entries": 0, "bytes": 0}
                    continue
                st = txn.stat(handle)
                pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
                out[name] = {"entries": st["entries"], "bytes": pages * st["psize"]}
        return out

    def file_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())

    def save_run_counts(self) -> None:
        """Keep this run's counts for `cache stats` (not in a cache that cannot be written)."""
        if self.readonly:
            return
        self.counts.finished = time.time()
        self._write([(_META, b"last_run", msgspec.json.encode(self.counts))], meta=True)

    def put_meta(self, name: str, value: bytes) -> None:
        """Keep a fact about the cache beside its records (`cache merge`: the last merge)."""
        self._write([(_META, name.encode(), value)], meta=True)

    def get_meta(self, name: str) -> bytes | None:
        with self._lmdb.begin(db=self._meta) as txn:
            v = txn.get(name.encode())
        return bytes(v) if v is not None else None

    def last_run_counts(self) -> RunCounts | None:
        with self._lmdb.begin(db=self._meta) as txn:
            v = txn.get(b"last_run")
        return msgspec.json.decode(v, type=RunCounts) if v else None


def open_for_run(path: str | os.PathLike, max_bytes: int | None = None) -> Store:
    """The cache a run uses: opened to be written, or, where the file system
    refuses writes (a read-only mount, a cache this user may only read), read-only
    (`Store.readonly`), which a fully cached rerun needs no more than."""
    try:
        return Store(path, max_bytes=max_bytes)
    except CacheError as e:
        if e.__cause__ is None or not cannot_write(e.__cause__) or not (Path(path) / "data.mdb").is_file():
            raise
    return Store(path, readonly=True, max_bytes=max_bytes)
