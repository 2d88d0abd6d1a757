"""Caches' records the way a test makes and reads them: verdicts made up by key,
caches written with them, the score command that fills one, and the records read
back."""

from __future__ import annotations

from pathlib import Path

from tension.cache import records

__all__ = ["cache_with", "key", "many_verdicts", "score_argv", "verdict", "verdict_records"]


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
