"""Compressed records (issue 28): every kind round-trips compressed; the frames written
before (checksummed msgpack, and plain msgpack before checksums) still read; a damaged
compressed record is found by `cache verify` and left out by `cache recover`; a cache
holding every form at once gives a rerun the same outputs without a request."""

from __future__ import annotations

import hashlib
import struct
import zlib
from pathlib import Path

import lmdb
import msgspec
import pytest

from tension.cache import codec, records
from tension.cache.keys import request_key
from tension.cache.records import Endings, JudgedPosition, TokenCount, Usage, Verdict
from tension.cache.store import DBS, Store
from tension.cache.verify import recover, verify
from tension.testing.corpus import make_corpus

USAGE = Usage(prompt_tokens=3012, completion_tokens=1, cached_tokens=2400, requests=1)
PROSE = ("The lamp went out before she reached the stair, and she stood a long while listening to the house. "
         "In the morning the letter was gone from the table, and nobody would say who had taken it.")


def every_kind() -> list[records.Record]:
    return [
        Endings(texts=[f"{PROSE} ({i})" for i in range(100)], finish_reasons=["stop"] * 99 + ["length"],
                model="Qwen/Qwen3-32B", usage=Usage(prompt_tokens=2000, completion_tokens=15_000, requests=1),
                created=1764590000.25, seconds=12.5),
        Verdict(text="Y", finish_reason="stop", model="Qwen/Qwen3-8B", usage=USAGE, created=1764590001.5,
                seconds=0.3187),
        Verdict(text="N", finish_reason="stop", model="judge", usage=USAGE, created=1764590002.0, seconds=0.4,
                first_logprobs={"Y": -3.2, "N": -0.04, "Yes": -7.5}),
        JudgedPosition(texts=["Y", None, "N"] * 30, first_logprobs=[], usage=USAGE, judged=60, created=1764590003.0),
        TokenCount(count=1234, model="Qwen/Qwen3-32B", created=1764590004.0),
    ]


def old_frame(rec: records.Record) -> bytes:
    """A value as records.encode framed it before issue 28, built here from its parts:
    0xC1, the CRC-32 of the msgpack, the msgpack."""
    packed = msgspec.msgpack.encode(rec)
    return b"\xc1" + struct.pack("<I", zlib.crc32(packed)) + packed


# A verdict as the code before issue 28 wrote it (bytes taken from such a cache): the
# fixture does not depend on anything in this repository.
OLD_VERDICT = (b"\xc1\x10!Sc\x86\xa4type\xa7verdict\xa4text\xa1Y\xadfinish_reason\xa4stop\xa5model\xa5judge"
               b"\xa5usage\x81\xadprompt_tokens\x07\xa7created\xcb@\x00\x00\x00\x00\x00\x00\x00")


def key(i: int) -> bytes:
    return request_key("chat", {"i": i})


def test_every_record_kind_round_trips_compressed():
    for rec in every_kind():
        value = records.encode(rec)
        assert records.is_checked(value) and records.is_compressed(value), type(rec).__name__
        assert len(value) < len(msgspec.msgpack.encode(rec))
        assert records.decode(value) == rec
        assert records.decode(memoryview(bytes(value))) == rec  # as LMDB hands it (buffers=True)
    endings, verdict = every_kind()[:2]
    assert records.encode(endings)[5] == records.ZSTD and records.encode(verdict)[5] == records.ZSTD_DICT
    assert len(records.encode(endings)) * 4 < len(msgspec.msgpack.encode(endings))
    assert len(records.encode(verdict)) * 3 < len(msgspec.msgpack.encode(verdict))  # the dictionary's work


def test_the_dictionary_is_frozen():
    # Records compressed with it can be read only with exactly these bytes: a new
    # dictionary needs a new codec byte beside records.ZSTD_DICT, never a change here.
    assert hashlib.blake2b(codec._DICTIONARY, digest_size=16).hexdigest() == "079f7e2a82a2265a8243b1ada9122c1c"


def test_a_record_compression_would_not_shrink_is_stored_as_msgpack():
    rec = TokenCount(count=1, model="\U0001f600" * 3 + "x9Qz", created=0.0)
    value = records.encode(rec)
    if not records.is_compressed(value):
        assert value[5:] == msgspec.msgpack.encode(rec)
    assert records.decode(value) == rec
    plain = records.encode(every_kind()[0], compress=False)
    assert not records.is_compressed(plain) and bytes(plain) == old_frame(every_kind()[0])


def test_records_framed_before_compression_still_read(tmp_path):
    recs = every_kind()
    assert records.decode(OLD_VERDICT) == Verdict(text="Y", finish_reason="stop", model="judge",
                                                  usage=Usage(prompt_tokens=7), created=2.0)
    path = tmp_path / "cache"
    Store(path).close()
    env = lmdb.open(str(path), max_dbs=8)
    with env.begin(write=True) as txn:
        for i, rec in enumerate(recs):
            db = env.open_db({Endings: b"endings", Verdict: b"verdicts", JudgedPosition: b"positions",
                              TokenCount: b"tokens"}[type(rec)], txn=txn)
            txn.put(key(i), old_frame(rec), db=db)
        txn.put(key(99), OLD_VERDICT, db=env.open_db(b"verdicts", txn=txn))
    env.close()
    with Store(path) as s:
        assert s.get("endings", key(0)) == recs[0]
        assert s.get_many("verdicts", [key(1), key(2), key(99)])[:2] == recs[1:3]
        assert s.get("positions", key(3)) == recs[3] and s.get("tokens", key(4)) == recs[4]
        assert sum(s.counts.damaged.values()) == 0
    report = verify(path)
    assert report.sound
    assert report.databases["verdicts"].records == 3 and report.databases["verdicts"].compressed == 0
    # recover rewrites them compressed
    rep = recover(path, tmp_path / "new")
    assert rep.written == {"endings": 1, "verdicts": 3, "tokens": 1, "positions": 1}
    again = verify(tmp_path / "new")
    assert again.sound and all(again.databases[db].compressed == again.databases[db].records for db in DBS)


def _put_raw(path: Path, db: str, k: bytes, value: bytes) -> None:
    env = lmdb.open(str(path), max_dbs=8)
    with env.begin(write=True) as txn:
        txn.put(k, value, db=env.open_db(db.encode(), txn=txn))
    env.close()


def test_a_damaged_compressed_record_is_found_and_left_out_by_recover(tmp_path):
    path = tmp_path / "cache"
    recs = every_kind()
    with Store(path) as s:
        s.put_many([("endings", key(0), recs[0]), ("verdicts", key(1), recs[1]), ("verdicts", key(2), recs[2])])
    flipped = bytearray(records.encode(recs[1]))
    flipped[len(flipped) // 2] ^= 0x10
    _put_raw(path, "verdicts", key(1), bytes(flipped))
    # a frame whose CRC matches but whose zstd frame is not one (written by something else)
    body = bytes([records.ZSTD]) + b"(\xb5/\xfd not zstd at all"
    _put_raw(path, "endings", key(0), b"\xc1" + struct.pack("<I", zlib.crc32(body)) + body)
    for codec_byte in (records.ZSTD, records.ZSTD_DICT):
        junk = bytes([codec_byte]) + b"(\xb5/\xfd not zstd at all"
        with pytest.raises(records.DamagedRecord, match="does not decompress"):
            records.decode(b"\xc1" + struct.pack("<I", zlib.crc32(junk)) + junk)

    report = verify(path)
    assert not report.sound
    bad = {(b.database, b.key): b.reason for b in report.bad}
    assert "checksum mismatch" in bad[("verdicts", key(1).hex())]
    assert "does not decompress" in bad[("endings", key(0).hex())]
    assert report.databases["verdicts"].records == 1 and report.databases["verdicts"].compressed == 1

    rep = recover(path, tmp_path / "new")
    with Store(tmp_path / "new", readonly=True) as s:
        assert s.get("verdicts", key(2)) == recs[2]
        # a damaged record is left out unless an older good copy of it is found in the file
        for db, k, rec in (("verdicts", key(1), recs[1]), ("endings", key(0), recs[0])):
            assert s.get(db, k) in (None, rec)
    assert verify(tmp_path / "new").sound and rep.written["verdicts"] >= 1
    with Store(path) as s:  # a run takes it as a miss, and writes the new answer over it
        assert s.get("verdicts", key(1)) is None and s.counts.damaged["verdicts"] == 1
        assert s.put_many([("verdicts", key(1), recs[1])]) == 1
        assert s.get("verdicts", key(1)) == recs[1]


@pytest.mark.in_process
def test_a_mixed_cache_gives_a_rerun_the_same_outputs_and_no_request(server, tmp_path, capsys):
    import tension

    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=5)
    cfg = {"base_url": server.base_url, "model": "test-gen", "cache": str(tmp_path / "cache"), "endings": 4,
           "seed": 2, "progress": False, "report": False}
    assert tension.score(corpus, out=tmp_path / "cold", **cfg).status == "complete"
    # rewrite two thirds of every database's records in the older forms
    env = lmdb.open(str(tmp_path / "cache"), max_dbs=8)
    forms = {0: "compressed", 1: "checksummed msgpack", 2: "plain msgpack"}
    seen = dict.fromkeys(forms.values(), 0)
    held: dict[str, tuple[int, int, int]] = {}  # per database: good, checksummed, compressed
    with env.begin(write=True) as txn:
        for name in DBS:
            db = env.open_db(name.encode(), txn=txn)
            for i, (k, v) in enumerate(list(txn.cursor(db))):
                assert records.is_compressed(v) or name == "tokens"
                rec = records.decode(v)
                form = forms[i % 3]
                if form != "compressed":
                    txn.put(k, old_frame(rec) if form == "checksummed msgpack" else msgspec.msgpack.encode(rec), db=db)
                seen[form] += 1
            n = txn.stat(db)["entries"]
            held[name] = (n, sum(j % 3 != 2 for j in range(n)), sum(j % 3 == 0 for j in range(n)))
    env.close()
    assert min(seen.values()) > 3
    assert verify(tmp_path / "cache").sound
    # `cache verify` says how many records of each form it read
    from tension.core.cli import main

    capsys.readouterr()
    assert main(["cache", "verify", str(tmp_path / "cache")]) == 0
    lines = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines() if line.split()}
    assert lines["database"] == ["good", "checksummed", "compressed", "bad"]
    for name, (good, checked, packed) in held.items():
        assert lines[name] == [str(good), str(checked), str(packed), "0"], name
    server.reset_records()
    warm = tension.score(corpus, out=tmp_path / "warm", **cfg)
    assert warm.status == "complete" and server.count() == 0
    for name in ("positions.jsonl", "stories.jsonl", "groups.jsonl"):
        if (tmp_path / "cold" / name).exists():
            assert (tmp_path / "warm" / name).read_bytes() == (tmp_path / "cold" / name).read_bytes(), name
