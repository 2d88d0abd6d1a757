"""Reading a cache's records back the way a test checks them."""

from __future__ import annotations

from pathlib import Path

__all__ = ["verdict_records"]


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
