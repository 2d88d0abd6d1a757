"""What the count specs of the cache verbs (issue 58, item 3's class) share: the
records of a cache as the plain `lmdb` package reads them, independently of the
product's Store and of its page reader, and a `score` run whose run.json a rerun is
compared with."""

from __future__ import annotations

import json
from pathlib import Path

import lmdb
import pytest

from tension.cache.store import DBS


def read_with_lmdb(cache: Path) -> dict[str, dict[bytes, bytes]]:
    """Every stored value of each database of the cache, by key, read with LMDB's own
    cursor (no Store: the count under test is not the one counting)."""
    env = lmdb.open(str(cache), max_dbs=8, readonly=True, lock=False)
    try:
        out: dict[str, dict[bytes, bytes]] = {}
        with env.begin() as txn:
            for db in DBS:
                try:
                    handle = env.open_db(db.encode(), txn=txn, create=False)
                except lmdb.NotFoundError:
                    out[db] = {}
                    continue
                out[db] = {bytes(k): bytes(v) for k, v in txn.cursor(handle)}
        return out
    finally:
        env.close()


@pytest.fixture
def lmdb_records():
    """`lmdb_records(cache)`: {database: {key: stored value}}, read by plain LMDB."""
    return read_with_lmdb


@pytest.fixture
def score_run(tension_run):
    """`score_run(corpus, out, cache, url, *extra)`: `score` with the test generator
    (4 seeded endings, no report), which must succeed; its run.json."""
    def run(corpus: Path, out: Path, cache: Path, url: str, *extra: str) -> dict:
        done = tension_run("score", corpus, "--out", out, "--cache", cache, "--base-url", url, "--model", "test-gen",
                           "--endings", "4", "--seed", "1", "--no-progress", "--no-report", *extra)
        assert done.returncode == 0, done.stderr
        return json.loads((Path(out) / "run.json").read_text())

    return run
