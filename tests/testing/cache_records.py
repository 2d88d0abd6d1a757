"""Reading a cache's records back the way a test checks them."""

from __future__ import annotations

from pathlib import Path

__all__ = ["verdict_records", "record_keys", "previous_form", "set_format"]


def verdict_records(cache: Path) -> dict:
    """Every verdict record of a cache, by key (read with LMDB's cursor for the keys,
    then through the Store, which checks and decodes them)."""
    import lmdb

    from tension.cache.store import Store

    env = lmdb.open(str(cache), max_dbs=8, readonly=True, lock=False)
    with env.begin() as txn:
        keys = [k for k, _ in txn.cursor(env.open_db(b"verdicts", txn=txn, create=False))]
    env.close()
    with Store(cache, readonly=True) as s:
        return dict(zip(keys, s.get_many("verdicts", keys)))


def record_keys(cache: Path, db: str) -> set[bytes]:
    """The keys of one database of a cache."""
    from tension.cache.store import Store

    with Store(cache, readonly=True) as s:
        return {k for k, _ in s.keys(db)}


def previous_form(src: Path, dst: Path, fmt: int = 2) -> Path:
    """A copy of the cache `src` as the release reading up to format `fmt` wrote it:
    its verdicts and judged records without the link to the endings they judged
    (issue 36, M4: added with format 3), its format `fmt`."""
    import msgspec

    from tension.cache import records
    from tension.cache.store import DBS, Store

    items = []
    with Store(src, readonly=True) as s:
        for db in DBS:
            for k, rec in s.keys(db):
                if isinstance(rec, records.Verdict):
                    rec = msgspec.structs.replace(rec, of_ending=b"")
                elif isinstance(rec, records.JudgedPosition):
                    rec = msgspec.structs.replace(rec, of_endings=b"")
                assert rec is not None
                items.append((db, k, bytes(records.encode(rec))))
    with Store(dst) as s:
        s.put_values(items)
    set_format(dst, fmt)
    return dst


def set_format(path: Path, n: int) -> None:
    """Mark the cache at `path` with format `n`, as a release of that format would."""
    import lmdb

    env = lmdb.open(str(path), max_dbs=8)
    try:
        with env.begin(write=True, db=env.open_db(b"meta")) as txn:
            txn.put(b"format", str(n).encode())
    finally:
        env.close()
