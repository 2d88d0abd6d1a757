"""Caches' records the way a test makes and reads them: verdicts made up by key,
caches written with them, the score command that fills one, and the records read
back."""

from __future__ import annotations

from pathlib import Path

from tension.cache import records

__all__ = ["cache_with", "key", "many_verdicts", "previous_form", "record_keys", "score_argv", "set_format", "verdict",
           "verdict_records"]


def score_argv(corpus: Path, out: Path, cache: Path, url: str, *extra: str) -> list[str]:
    return ["score", str(corpus), "--out", str(out), "--cache", str(cache), "--base-url", url, "--model", "test-gen",
            "--judge-model", "test-judge", "--endings", "4", "--seed", "7", "--no-progress", "--no-report", *extra]


def verdict(text: str, created: float = 1.0) -> records.Verdict:
    return records.Verdict(text=text, finish_reason="stop", model="test-judge", usage=records.Usage(requests=1),
                           created=created)


def key(i: int) -> bytes:
    return b"\x01" + i.to_bytes(16, "big")


def cache_with(path: Path, recs: dict[bytes, records.Verdict]) -> Path:
    from tension.cache.store import Store

    with Store(path) as store:
        store.put_many(("verdicts", k, r) for k, r in recs.items())
    return path


def many_verdicts(path: Path, n: int) -> Path:
    """A cache of `n` verdicts, long enough to merge that a merge can be stopped part-way."""
    from tension.cache.store import Store

    with Store(path) as store:
        for start in range(0, n, 10_000):
            store.put_many(("verdicts", key(i), verdict("v")) for i in range(start, min(n, start + 10_000)))
    return path


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
