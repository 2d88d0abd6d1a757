"""The LMDB store: write-once records, counters, map growth, read-only, format version,
checksums and a damaged file."""

from __future__ import annotations

import base64
import random

import lmdb
import msgspec
import pytest

from tension.cache import codec, pages, records
from tension.cache import store as store_mod
from tension.cache.keys import request_key
from tension.cache.records import Endings, TokenCount, Usage, Verdict
from tension.cache.run_counts import RunCounts
from tension.cache.store import DBS, FORMAT_VERSION, Store, default_path
from tension.cache.verify import verify
from tension.core.errors import CacheDamagedError, CacheError, TensionError


def endings(i: int, text: str = "The end.", n: int = 2) -> Endings:
    return Endings(texts=[f"{text} {i}.{j}" for j in range(n)], finish_reasons=["stop"] * n, model="gen",
                   usage=Usage(prompt_tokens=10 + i, completion_tokens=5, requests=1), created=1000.0 + i,
                   seconds=0.5)


def verdict(i: int, text: str = "Y") -> Verdict:
    return Verdict(text=text, finish_reason="stop", model="judge", usage=Usage(prompt_tokens=i), created=2.0)


def tokens(i: int) -> TokenCount:
    return TokenCount(count=i, model="gen", created=3.0)


def key(kind: str, i: int) -> bytes:
    return request_key(kind, {"model": "m", "i": i})


@pytest.fixture
def path(tmp_path):
    return tmp_path / "cache.lmdb"


def test_all_is_exported():
    for name in store_mod.__all__:
        assert hasattr(store_mod, name), name


def test_default_path_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "tension-run" / "llm.lmdb"


def test_put_many_then_get_and_get_many(path):
    items = ([("endings", key("chat", i), endings(i)) for i in range(5)]
             + [("verdicts", key("judge", i), verdict(i)) for i in range(3)]
             + [("tokens", key("tok", i), tokens(i)) for i in range(2)])
    with Store(path) as s:
        assert s.put_many(items) == 10
        for db, k, rec in items:
            got = s.get(db, k)
            assert got == rec
            assert type(got) is type(rec)
        keys = [k for db, k, _ in items if db == "endings"]
        assert s.get_many("endings", keys) == [rec for db, _, rec in items if db == "endings"]
        # a key lives in its own database only
        assert s.get("verdicts", key("chat", 0)) is None
        assert s.get_many("tokens", []) == []


def test_get_many_mixes_hits_and_misses_in_order(path):
    with Store(path) as s:
        s.put_many([("tokens", key("tok", 1), tokens(1)), ("tokens", key("tok", 3), tokens(3))])
        got = s.get_many("tokens", [key("tok", i) for i in range(5)])
        assert got == [None, tokens(1), None, tokens(3), None]


def test_put_many_of_nothing(path):
    with Store(path) as s:
        assert s.put_many([]) == 0
        assert s.put_many(iter(())) == 0


def test_write_once(path):
    k = key("chat", 1)
    with Store(path) as s:
        assert s.put_many([("endings", k, endings(1, "first"))]) == 1
        # a second put of the same key with another value keeps the first
        assert s.put_many([("endings", k, endings(1, "second"))]) == 0
        assert s.get("endings", k) == endings(1, "first")
        # a batch of old and new keys counts only the new ones
        n = s.put_many([("endings", k, endings(1, "third")), ("endings", key("chat", 2), endings(2)),
                        ("verdicts", k, verdict(1))])
        assert n == 2
        assert s.get("endings", k) == endings(1, "first")
        assert s.get("verdicts", k) == verdict(1)


def test_duplicate_key_inside_one_batch_keeps_the_first(path):
    k = key("chat", 1)
    with Store(path) as s:
        assert s.put_many([("endings", k, endings(1, "a")), ("endings", k, endings(1, "b"))]) == 1
        assert s.get("endings", k) == endings(1, "a")


def test_hit_miss_write_counters(path):
    with Store(path) as s:
        assert s.counts.hits == dict.fromkeys(DBS, 0)
        s.put_many([("endings", key("chat", i), endings(i)) for i in range(3)])
        s.put_many([("endings", key("chat", 0), endings(0)), ("tokens", key("tok", 0), tokens(0))])
        s.get_many("endings", [key("chat", 0), key("chat", 1), key("chat", 9)])
        s.get("tokens", key("tok", 0))
        s.get("verdicts", key("judge", 0))
        assert s.counts.writes == {"endings": 3, "verdicts": 0, "tokens": 1, "positions": 0}
        assert s.counts.hits == {"endings": 2, "verdicts": 0, "tokens": 1, "positions": 0}
        assert s.counts.misses == {"endings": 1, "verdicts": 1, "tokens": 0, "positions": 0}


def test_stats_entries(path):
    with Store(path) as s:
        s.put_many([("endings", key("chat", i), endings(i)) for i in range(4)]
                   + [("verdicts", key("judge", 0), verdict(0))])
        st = s.stats()
        assert set(st) == set(DBS)
        assert {db: st[db]["entries"] for db in DBS} == {"endings": 4, "verdicts": 1, "tokens": 0, "positions": 0}
        assert st["endings"]["bytes"] > 0
        assert st["tokens"]["bytes"] == 0
        assert s.file_bytes() > 0


def _big_batch(n: int = 1000, size: int = 3000):
    # > 2 MB of records as stored: 1000 verdicts of 3000 random base64 characters each
    # (6 bits a character, which compression cannot take away: records are stored compressed)
    return [("verdicts", key("judge", i), verdict(i, base64.b64encode(random.Random(i).randbytes(size)).decode()[:size]))
            for i in range(n)]


def test_map_grows_when_full(path):
    small = 64 * 1024
    items = _big_batch()
    with Store(path, map_size=small) as s:
        assert s.env.info()["map_size"] == small
        assert s.put_many(items) == len(items)
        grown = s.env.info()["map_size"]
        assert grown > small
        assert grown >= 2_000_000
        assert s.stats()["verdicts"]["entries"] == len(items)
        assert s.get_many("verdicts", [k for _, k, _ in items]) == [r for _, _, r in items]
        # more batches keep working
        assert s.put_many([("tokens", key("tok", i), tokens(i)) for i in range(100)]) == 100
    # reopened with the small map size: the data is all there
    with Store(path, map_size=small) as s:
        assert s.get_many("verdicts", [k for _, k, _ in items[::97]]) == [r for _, _, r in items[::97]]


def test_write_counter_is_exact_after_map_growth(path):
    items = _big_batch()
    with Store(path, map_size=64 * 1024) as s:
        assert s.put_many(items) == len(items)
        assert s.counts.writes["verdicts"] == len(items)


def test_last_run_counts_round_trip(path):
    with Store(path) as s:
        assert s.last_run_counts() is None
        s.put_many([("tokens", key("tok", 1), tokens(1))])
        s.get_many("tokens", [key("tok", 1), key("tok", 2)])
        s.save_run_counts()
        saved = s.last_run_counts()
        assert isinstance(saved, RunCounts)
        assert saved == s.counts
        assert saved.finished > 0
        assert saved.hits["tokens"] == 1 and saved.misses["tokens"] == 1 and saved.writes["tokens"] == 1
    with Store(path) as s2:
        again = s2.last_run_counts()
        assert again == saved
        # a new store starts its own counts at zero
        assert s2.counts.hits == dict.fromkeys(DBS, 0)


def test_reopen_persists(path):
    items = [("endings", key("chat", i), endings(i)) for i in range(3)]
    with Store(path) as s:
        s.put_many(items)
    with Store(path) as s:
        assert [s.get(db, k) for db, k, _ in items] == [r for _, _, r in items]
        assert s.put_many(items) == 0  # still written once


def test_close_is_idempotent(path):
    s = Store(path)
    s.close()
    s.close()


def test_readonly_store_reads_and_refuses_writes(path):
    k = key("chat", 1)
    with Store(path) as s:
        s.put_many([("endings", k, endings(1))])
        s.save_run_counts()
    with Store(path, readonly=True) as r:
        assert r.readonly
        assert r.get("endings", k) == endings(1)
        assert r.last_run_counts() is not None
        assert r.stats()["endings"]["entries"] == 1
        with pytest.raises(CacheError) as ei:
            r.put_many([("endings", key("chat", 2), endings(2))])
        assert str(path) in str(ei.value) and "read-only" in str(ei.value)
        before = r.last_run_counts()
        r.save_run_counts()  # a run on a cache that cannot be written keeps no counts there (issue 25)
        assert r.last_run_counts() == before
        assert r.get("endings", key("chat", 2)) is None
    with Store(path) as s:
        assert s.get("endings", key("chat", 2)) is None


def test_readonly_store_that_does_not_exist(tmp_path):
    p = tmp_path / "missing.lmdb"
    with pytest.raises(CacheError) as ei:
        Store(p, readonly=True)
    assert str(p) in str(ei.value)
    assert not p.exists()  # read-only never creates


def test_cache_path_that_is_a_regular_file(tmp_path):
    p = tmp_path / "not-a-dir"
    p.write_text("hello", encoding="utf-8")
    with pytest.raises(CacheError) as ei:
        Store(p)
    assert str(p) in str(ei.value)
    assert isinstance(ei.value, TensionError)
    assert isinstance(ei.value.__cause__, (OSError, lmdb.Error))
    assert p.read_text(encoding="utf-8") == "hello"


def test_format_version_is_written(path):
    with Store(path) as s:
        with s.env.begin() as txn:
            meta = txn.get(b"meta")
        assert meta is not None  # the named database exists
    env = lmdb.open(str(path), max_dbs=8, readonly=True)
    try:
        with env.begin(db=env.open_db(b"meta", create=False)) as txn:
            assert int(txn.get(b"format")) == FORMAT_VERSION
    finally:
        env.close()


def _set_format(path, value: bytes) -> None:
    env = lmdb.open(str(path), max_dbs=8)
    try:
        meta = env.open_db(b"meta")
        with env.begin(write=True, db=meta) as txn:
            txn.put(b"format", value)
    finally:
        env.close()


@pytest.mark.parametrize("readonly", [False, True])
def test_newer_format_is_refused(path, readonly):
    with Store(path) as s:
        s.put_many([("tokens", key("tok", 1), tokens(1))])
    _set_format(path, str(FORMAT_VERSION + 1).encode())
    with pytest.raises(CacheError) as ei:
        Store(path, readonly=readonly)
    msg = str(ei.value)
    assert str(path) in msg
    assert f"format {FORMAT_VERSION + 1}" in msg
    assert f"up to {FORMAT_VERSION}" in msg


def test_current_format_is_accepted(path):
    Store(path).close()
    _set_format(path, str(FORMAT_VERSION).encode())
    with Store(path) as s:
        assert s.get("tokens", key("tok", 1)) is None


def test_records_round_trip_through_msgpack():
    for rec in (endings(1), verdict(2, "N"), tokens(3)):
        assert records.decode(records.encode(rec)) == rec


# --- checksums and damage ------------------------------------------------------------

def _raw_put(path, db: str, k: bytes, value: bytes) -> None:
    env = lmdb.open(str(path), max_dbs=8)
    with env.begin(write=True) as txn:
        txn.put(k, value, db=env.open_db(db.encode(), txn=txn))
    env.close()


def test_every_value_carries_a_checksum(path):
    rec = endings(1)
    with Store(path) as s:
        s.put_many([("endings", key("chat", 1), rec)])
        with s.env.begin(db=s._dbs["endings"]) as txn:
            value = txn.get(key("chat", 1))
    assert records.is_checked(value) and records.decode(value) == rec
    # the frame, then the codec byte and the msgpack compressed
    assert records.is_compressed(value) and value[5] == records.ZSTD_DICT  # a small record: the dictionary
    assert codec.decompress(value[6:], dictionary=True) == msgspec.msgpack.encode(rec)


def test_records_written_before_checksums_are_still_read(path):
    Store(path).close()
    old = msgspec.msgpack.encode(verdict(7))  # how values were written before checksums
    _raw_put(path, "verdicts", key("judge", 7), old)
    with Store(path) as s:
        assert s.get("verdicts", key("judge", 7)) == verdict(7)
        assert s.counts.hits["verdicts"] == 1 and s.counts.damaged["verdicts"] == 0
    report = verify(path)
    assert report.sound and report.databases["verdicts"].records == 1 and report.databases["verdicts"].checked == 0


@pytest.mark.parametrize("value", [b"", b"\xc1\x00", b"\xc1\x00\x00\x00\x00\x80", b"\x93\x01\x02\x03", b"\xff" * 40])
def test_a_damaged_value_is_a_miss_counted_and_written_over(path, value):
    k = key("chat", 1)
    with Store(path) as s:
        s.put_many([("endings", k, endings(1))])
    good = records.encode(endings(1))
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 1
    for bad in (value, bytes(flipped)):
        _raw_put(path, "endings", k, bad)
        with pytest.raises(records.DamagedRecord):
            records.decode(bad)
        with Store(path) as s:
            assert s.get_many("endings", [k, key("chat", 2)]) == [None, None]
            assert s.counts.damaged["endings"] == 1 and s.counts.misses["endings"] == 2
            assert s.put_many([("endings", k, endings(1, "again"))]) == 1  # the bad value is replaced
            assert s.counts.writes["endings"] == 1
            assert s.get("endings", k) == endings(1, "again")
            assert s.put_many([("endings", k, endings(1, "third"))]) == 0  # a good value is written once


def test_a_record_of_the_wrong_kind_is_bad_for_verify(path):
    with Store(path) as s:
        s.put_many([("endings", key("chat", 1), tokens(1))])
    report = verify(path)
    assert not report.sound and [b.reason for b in report.bad] == ["a TokenCount record in the endings database"]


def test_check_passes_new_and_empty_files_and_refuses_short_or_foreign_ones(tmp_path):
    pages.check(tmp_path / "none")
    (tmp_path / "data.mdb").write_bytes(b"")
    pages.check(tmp_path)
    with Store(tmp_path / "c") as s:
        s.put_many([("endings", key("chat", i), endings(i, "x" * 3000)) for i in range(20)])
    pages.check(tmp_path / "c")
    data = (tmp_path / "c" / "data.mdb").read_bytes()
    for cut, why in ((len(data) - 4096, "but its last transaction needs"), (100, "too short for a meta page")):
        (tmp_path / "c" / "data.mdb").write_bytes(data[:cut])
        with pytest.raises(pages.PageError, match=why):
            pages.check(tmp_path / "c")
        with pytest.raises(CacheDamagedError, match="is damaged: .*cache recover"):
            Store(tmp_path / "c")
    (tmp_path / "c" / "data.mdb").write_bytes(b"\x00" * 8192)
    with pytest.raises(pages.PageError, match="not an LMDB file"):
        pages.check(tmp_path / "c")


def test_a_cache_opened_to_read_before_its_writer_committed_says_so(tmp_path):
    """Another process made the folder and its file, no database yet (`cache merge`
    or a run just starting): a reader gets the reason, not LMDB's MDB_NOTFOUND."""
    import lmdb

    from tension.core.errors import CacheError

    lmdb.open(str(tmp_path / "c"), max_dbs=8).close()
    with pytest.raises(CacheError, match=r"holds no databases yet \(another process may be creating it"):
        Store(tmp_path / "c", readonly=True)
