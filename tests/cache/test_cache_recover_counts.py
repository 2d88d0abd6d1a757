"""`cache verify` and `cache recover` say what they found and what they copied, and
an independent reading and a rerun prove it (issue 58, item 3's class: every verb
that reports a count of what it did, against a rerun that proves it).

`verify`'s table is checked against the records the plain `lmdb` package reads;
`recover`'s "recovered N records …: a endings, b verdicts, …; left behind: …"
against the new cache read with `lmdb`, and against a rerun from it, which asks
again for exactly what was said lost and for nothing said recovered. Records a
`cache drop` deleted stay in pages LMDB keeps as free until it reuses them; before,
`verify` counted them as "good records found in pages no database reaches" on a
sound cache, and `recover` brought every one back: a rerun from the recovered cache
reused the very answers the user had dropped.

The caches are written by `score` runs in this process against in-process servers;
verify and recover read the data file without LMDB, so they run in this process on
a damaged copy too (the rerun is on the recovered cache, which is sound)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import lmdb

from tension.cache import records
from tension.cache.store import DBS, Store
from tension.testing.cache_records import cache_with, key, verdict
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer

_RECOVERED = re.compile(r"^recovered (\d+) records into (.+?): (.*); left behind: (\d+) bad records(?: \(.*\))?, "
                        r"(\d+) damaged pages", re.M)


def _verify_table(stdout: str) -> dict[str, dict[str, int]]:
    """The rows `cache verify` (and `recover`) printed: good, checksummed, compressed, bad."""
    rows = {}
    for line in stdout.splitlines():
        cells = line.split()
        if len(cells) == 5 and cells[0] in DBS:
            rows[cells[0]] = dict(zip(("good", "checksummed", "compressed", "bad"), map(int, cells[1:]), strict=True))
    assert set(rows) == set(DBS), stdout
    return rows


def _recovered(stdout: str) -> tuple[int, dict[str, int], int, int]:
    """What `cache recover` said: the total, per database, bad records and damaged pages left behind."""
    m = _RECOVERED.search(stdout)
    assert m, stdout
    per_db = {db: int(n) for n, db in (part.split() for part in m.group(3).split(", "))}
    return int(m.group(1)), per_db, int(m.group(4)), int(m.group(5))


def _independent_table(stored: dict[str, dict[bytes, bytes]]) -> dict[str, dict[str, int]]:
    """`verify`'s table, counted from the values LMDB reads, decoded by the records module."""
    out = {}
    for db, values in stored.items():
        good = [v for v in values.values() if _decodes(v)]
        out[db] = {"good": len(good), "checksummed": sum(records.is_checked(v) for v in good),
                   "compressed": sum(records.is_compressed(v) for v in good), "bad": len(values) - len(good)}
    return out


def _decodes(value: bytes) -> bool:
    try:
        records.decode(value)
    except records.DamagedRecord:
        return False
    return True


def _misses(run: dict) -> dict[str, int]:
    return run["cache"]["misses"]


def test_cache_recover_after_a_drop_brings_back_none_of_the_dropped_records(tmp_path, tension_run, score_run,
                                                                             lmdb_records):
    """`cache drop --role judge --yes`, then `verify` (sound, and nothing "found in
    pages no database reaches") and `recover`: the recovered cache holds what the
    dropped cache holds, no more, and a rerun from it asks the judge again for every
    verdict dropped."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    cache = tmp_path / "cache"
    with InProcessServer(["test-gen"]).serving() as srv:
        first = score_run(corpus, tmp_path / "a", cache, srv.base_url)
        dropped = tension_run("cache", "drop", "--cache", cache, "--role", "judge", "--yes")
        assert dropped.returncode == 0, dropped.stderr
        kept = lmdb_records(cache)
        assert kept["verdicts"] == {} and kept["positions"] == {} and kept["endings"]

        verified = tension_run("cache", "verify", cache)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert "is sound" in verified.stdout
        assert "no database reaches" not in verified.stdout, verified.stdout  # before: 330 records "found"
        assert _verify_table(verified.stdout) == _independent_table(kept)

        recovered = tension_run("cache", "recover", cache, tmp_path / "new")
        assert recovered.returncode == 0, recovered.stderr
        total, per_db, bad, pages = _recovered(recovered.stdout)
        new = lmdb_records(tmp_path / "new")
        assert {db: set(v) for db, v in new.items()} == {db: set(v) for db, v in kept.items()}
        assert per_db == {db: len(v) for db, v in kept.items()} and total == sum(per_db.values())
        assert (bad, pages) == (0, 0)
        rerun = score_run(corpus, tmp_path / "b", tmp_path / "new", srv.base_url)
    # asked again: exactly the dropped verdicts (the judged positions are rebuilt from them), nothing else
    assert _misses(rerun) == {"endings": 0, "verdicts": first["cache"]["writes"]["verdicts"], "tokens": 0,
                              "positions": first["cache"]["writes"]["positions"]}
    assert rerun["requests"].get("judge", 0) == first["requests"]["judge"]
    assert rerun["requests"].get("generation", 0) == 0


def test_cache_verify_counts_are_what_lmdb_reads(tmp_path, tension_run, lmdb_records):
    """A cache of many records (a tree of several levels), values too big for a page
    (overflow pages), values written before checksums and one damaged value: each
    row of `verify` is what LMDB's own cursor finds, decoded."""
    cache = tmp_path / "cache"
    big = records.Endings(texts=[os.urandom(3000).hex() for _ in range(3)], finish_reasons=["stop"] * 3,
                          model="test-gen", usage=records.Usage(requests=1), created=1.0)
    with Store(cache) as store:
        store.put_many(("verdicts", key(i), verdict(f"v{i}")) for i in range(5000))
        store.put_many(("endings", key(i), big) for i in range(40))
    env = lmdb.open(str(cache), max_dbs=8)
    db = env.open_db(b"verdicts")
    with env.begin(write=True) as txn:
        txn.put(key(9_000), records._encoder.encode(verdict("plain")), db=db)  # written before checksums
        damaged = bytearray(txn.get(key(17), db=db))
        damaged[-1] ^= 0xFF
        txn.put(key(17), bytes(damaged), db=db)
    env.close()
    verified = tension_run("cache", "verify", cache)
    assert verified.returncode == 1
    table = _verify_table(verified.stdout)
    assert table == _independent_table(lmdb_records(cache))
    assert table["verdicts"] == {"good": 5000, "checksummed": 4999, "compressed": table["verdicts"]["compressed"],
                                 "bad": 1}
    assert table["endings"]["good"] == 40


def test_cache_recover_counts_are_what_a_rerun_asks_again(tmp_path, tension_run, score_run, lmdb_records):
    """A cache cut to half its size (a partial copy): `recover` says how many records
    of each database it kept; the new cache holds that many, each the record the
    whole cache held under its key, and a rerun from it reads every ending, token
    count and judged position said recovered and asks again for exactly the others
    (a verdict is read only where its position's judged record is missing)."""
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=21)
    cache = tmp_path / "cache"
    with InProcessServer(["test-gen"]).serving() as srv:
        first = score_run(corpus, tmp_path / "a", cache, srv.base_url)
        whole = lmdb_records(cache)
        assert {db: len(v) for db, v in whole.items()} == first["cache"]["writes"]
        cut = tmp_path / "cut"
        shutil.copytree(cache, cut)
        with (cut / "data.mdb").open("r+b") as f:
            f.truncate(os.path.getsize(cut / "data.mdb") // 2)
        recovered = tension_run("cache", "recover", cut, tmp_path / "new")
        assert recovered.returncode == 0, recovered.stderr
        total, per_db, _, pages = _recovered(recovered.stdout)
        assert pages > 0 and 0 < total < sum(len(v) for v in whole.values())
        new = lmdb_records(tmp_path / "new")
        assert per_db == {db: len(v) for db, v in new.items()}
        for db in DBS:  # each the whole cache's record: nothing made up, nothing the whole cache no longer held
            assert all(records.decode(v) == records.decode(whole[db][k]) for k, v in new[db].items()), db
        sent = srv.count(kind="generation")
        rerun = score_run(corpus, tmp_path / "b", tmp_path / "new", srv.base_url)
        assert srv.count(kind="generation") - sent == len(whole["endings"]) - per_db["endings"]
    for db in ("endings", "tokens", "positions"):
        assert rerun["cache"]["hits"][db] == per_db[db], db
        assert _misses(rerun)[db] == len(whole[db]) - per_db[db], db
    assert _misses(rerun)["verdicts"] <= len(whole["verdicts"]) - per_db["verdicts"]
    assert rerun["requests"].get("judge", 0) == _misses(rerun)["verdicts"]
    assert (tmp_path / "b" / "positions.jsonl").read_bytes() == (tmp_path / "a" / "positions.jsonl").read_bytes()


def test_cache_recover_counts_a_bad_record_with_a_good_older_copy_as_recovered_not_left_behind(
        tmp_path, tension_run, score_run, lmdb_records):
    """A record damaged where the database reaches it, while an older copy of its
    page (copy-on-write) still holds it whole: recover keeps that copy, and says
    so; "left behind" counts only what a rerun asks again."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    cache = tmp_path / "cache"
    with InProcessServer(["test-gen"]).serving() as srv:
        score_run(corpus, tmp_path / "a", cache, srv.base_url)
        whole = lmdb_records(cache)
        env = lmdb.open(str(cache), max_dbs=8)
        db = env.open_db(b"endings")
        with env.begin(write=True) as txn:  # the page is copied, the older copy kept among LMDB's free pages
            bad_key, value = next(iter(whole["endings"].items()))
            damaged = bytearray(value)
            damaged[-1] ^= 0xFF
            txn.put(bad_key, bytes(damaged), db=db)
        env.close()
        verified = tension_run("cache", "verify", cache)
        assert verified.returncode == 1 and f"bad record: endings {bad_key.hex()}" in verified.stdout
        recovered = tension_run("cache", "recover", cache, tmp_path / "new")
        assert recovered.returncode == 0, recovered.stderr
        total, per_db, bad, _ = _recovered(recovered.stdout)
        assert lmdb_records(tmp_path / "new")["endings"][bad_key] == value
        assert per_db == {db: len(v) for db, v in whole.items()}
        assert bad == 0, recovered.stdout  # before: "left behind: 1 bad records", which a rerun never asked again
        assert "1 more had a good older copy" in recovered.stdout
        rerun = score_run(corpus, tmp_path / "b", tmp_path / "new", srv.base_url)
    assert _misses(rerun) == dict.fromkeys(DBS, 0) and rerun["requests"].get("generation", 0) == 0


def test_cache_recover_takes_a_damaged_pages_records_from_its_older_copy_and_none_deleted(tmp_path, tension_run,
                                                                                         lmdb_records):
    """Verdicts written, then (while another process reads, so LMDB reuses no page
    it frees) the first 50 deleted and one more added; then the live page holding
    the added one zeroed. `recover` takes the records of that page from its older
    copy among the free pages (they are in the key range the damaged page held),
    leaves the added one behind, and brings back none of the 50 deleted, whose older
    pages are free too: what it says it recovered is what the new cache holds."""
    cache = cache_with(tmp_path / "cache", {key(i): verdict(f"v{i}") for i in range(600)})
    hold = ("import lmdb, sys\nenv = lmdb.open(sys.argv[1], max_dbs=8, readonly=True)\ntxn = env.begin()\n"
            "print('reading', flush=True)\nsys.stdin.read()\n")
    with subprocess.Popen([sys.executable, "-c", hold, str(cache)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as reader:
        assert reader.stdout is not None and reader.stdin is not None
        assert reader.stdout.readline() == "reading\n"
        with Store(cache) as store:
            assert store.delete_many(("verdicts", key(i)) for i in range(50))["verdicts"] == 50
            store.put_many([("verdicts", key(10_000), verdict("added"))])
        reader.stdin.close()
    added = lmdb_records(cache)["verdicts"][key(10_000)]
    data = bytearray((cache / "data.mdb").read_bytes())
    at = data.find(added)
    assert at > 0 and data.find(added, at + 1) == -1  # one copy: the live page (its older copy lacks it)
    page = at // 4096 * 4096
    data[page:page + 4096] = bytes(4096)
    (cache / "data.mdb").write_bytes(bytes(data))

    recovered = tension_run("cache", "recover", cache, tmp_path / "new")
    assert recovered.returncode == 0, recovered.stderr
    total, per_db, bad, pages = _recovered(recovered.stdout)
    new = lmdb_records(tmp_path / "new")
    assert set(new["verdicts"]) == {key(i) for i in range(50, 600)}  # before: the 50 deleted came back too
    assert per_db == {db: len(v) for db, v in new.items()} and total == 550 and (bad, pages) == (0, 1)



def test_cache_recover_says_how_many_records_it_took_from_freed_pages_when_the_database_list_is_damaged(
        tmp_path, tension_run, score_run, lmdb_records):
    """The root page of the database list zeroed, after a drop of the token counts:
    nothing tells which records each database held, so every record of the file is
    carved back, the dropped ones among them, and `recover` says how many came from
    pages LMDB had freed (here the dropped ones, exactly)."""
    from tension.cache.pages import DataFile

    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    cache = tmp_path / "cache"
    with InProcessServer(["test-gen"]).serving() as srv:
        first = score_run(corpus, tmp_path / "a", cache, srv.base_url)
        dropped = tension_run("cache", "drop", cache, "--role", "tokenize", "--yes")
        assert dropped.returncode == 0, dropped.stderr
        with DataFile(cache) as f:
            root, size = f.meta.main_root, f.meta.psize
        with (cache / "data.mdb").open("r+b") as f:
            f.seek(root * size)
            f.write(bytes(size))
        recovered = tension_run("cache", "recover", cache, tmp_path / "new")
        assert recovered.returncode == 0, recovered.stderr
        total, per_db, _, pages = _recovered(recovered.stdout)
        assert per_db == {db: len(v) for db, v in lmdb_records(tmp_path / "new").items()} == first["cache"]["writes"]
        assert pages == 1
        assert (f"note: {first['cache']['writes']['tokens']} of them are from pages LMDB had freed, in the key range "
                "of a damaged page") in recovered.stdout, recovered.stdout
        rerun = score_run(corpus, tmp_path / "b", tmp_path / "new", srv.base_url)
    assert _misses(rerun) == dict.fromkeys(DBS, 0)  # every record said recovered is read back
