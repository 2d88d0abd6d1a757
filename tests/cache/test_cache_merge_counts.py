"""`cache merge` and the `cache stats` line of the last merge say how many records
were copied, already there, conflicting, damaged and left out, and an independent
reading and a rerun prove it (issue 58, item 3's class: every verb that reports a
count of what it did, against a rerun that proves it).

Each source's records are counted with the plain `lmdb` package: every one of them
is in exactly one column, DST holds exactly what was said copied, and a rerun from
DST asks again only for what the merge said lost. Before, a damaged source record
of which DST held a good copy anyway (its own, or another source's) was said to be
asked again by "a run from DST", which asked for nothing; and `cache stats` counted
the conflicts and damaged records of the last merge by the ones it keeps listed
(100), not by how many there were.

The runs are `score` in this process against in-process servers, on real LMDB caches."""

from __future__ import annotations

from pathlib import Path

import lmdb

from tension.cache.store import DBS
from tension.testing.cache_records import cache_with, key, verdict
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer

COLUMNS = ("copied", "present", "conflicting", "damaged")


def _table(stdout: str) -> dict[str, dict[str, int]]:
    """The rows `cache merge` printed, per database: copied, already there, conflicting, damaged."""
    rows = {}
    for line in stdout.splitlines():
        cells = line.split()
        if len(cells) == 5 and cells[0] in DBS:
            rows[cells[0]] = dict(zip(COLUMNS, map(int, cells[1:]), strict=True))
    assert set(rows) == set(DBS), stdout
    return rows


def _damage(cache: Path, db: str, keys: list[bytes]) -> None:
    """Flip the last byte of these records' stored values (their checksum fails)."""
    env = lmdb.open(str(cache), max_dbs=8)
    handle = env.open_db(db.encode())
    with env.begin(write=True) as txn:
        for k in keys:
            value = bytearray(txn.get(k, db=handle))
            value[-1] ^= 0xFF
            txn.put(k, bytes(value), db=handle)
    env.close()


def _stories(corpus: Path, ids: range, to: Path) -> Path:
    lines = corpus.read_text().splitlines()
    to.write_text("".join(lines[i] + "\n" for i in ids))
    return to


def test_cache_merge_counts_are_what_a_rerun_finds(tmp_path, tension_run, score_run, lmdb_records):
    """Two machines scored overlapping stories (A: 0–1, B: 1–2); B has a damaged
    ending only it holds and a damaged verdict A holds too. Every source record is
    in one column of the table, DST holds what was said copied, `cache stats` says
    the same, and a run of all the stories from DST asks again for the one ending
    lost and for nothing else."""
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=5)
    a, b, m = tmp_path / "a.lmdb", tmp_path / "b.lmdb", tmp_path / "m.lmdb"
    with InProcessServer(["test-gen"]).serving() as srv:
        score_run(_stories(corpus, range(0, 2), tmp_path / "ca.jsonl"), tmp_path / "ra", a, srv.base_url)
        score_run(_stories(corpus, range(1, 3), tmp_path / "cb.jsonl"), tmp_path / "rb", b, srv.base_url)
        in_a, in_b = lmdb_records(a), lmdb_records(b)
        only_b = sorted(set(in_b["endings"]) - set(in_a["endings"]))
        shared = sorted(set(in_b["verdicts"]) & set(in_a["verdicts"]))
        assert only_b and shared
        _damage(b, "endings", only_b[:1])
        _damage(b, "verdicts", shared[:1])
        in_b = lmdb_records(b)

        merged = tension_run("cache", "merge", a, b, m)
        assert merged.returncode == 1  # damaged records are an error, the rest is merged
        table = _table(merged.stdout)
        in_m = lmdb_records(m)
        for db in DBS:
            assert set(in_m[db]) == set(in_a[db]) | set(in_b[db]) - ({only_b[0]} if db == "endings" else set())
            assert table[db]["copied"] == len(in_m[db]), db  # DST was made by this merge
            assert table[db]["present"] == len(set(in_a[db]) & set(in_b[db])) - (db == "verdicts"), db
            assert sum(table[db].values()) == len(in_a[db]) + len(in_b[db]), db  # each record in one column
        assert (table["endings"]["damaged"], table["verdicts"]["damaged"]) == (1, 1)
        assert table["endings"]["conflicting"] == table["verdicts"]["conflicting"] == 0
        # the damaged verdict is in DST (A's copy): only the ending is asked again
        assert "2 damaged source records were skipped" in merged.stderr
        assert "a run from DST asks again for 1 of them" in merged.stderr, merged.stderr
        assert "DST holds a good copy of the other 1" in merged.stderr, merged.stderr

        stats = tension_run("cache", "stats", m)
        assert stats.returncode == 0, stats.stderr
        assert (f"last merge: {sum(len(v) for v in in_m.values())} records copied from {a}, {b}, 0 conflicting, "
                "2 damaged, 0 left out") in stats.stdout, stats.stdout
        sent = srv.count(kind="generation"), srv.count(kind="judge")
        rerun = score_run(corpus, tmp_path / "all", m, srv.base_url)
        assert (srv.count(kind="generation") - sent[0], srv.count(kind="judge") - sent[1]) == (1, 0)
    assert rerun["requests"].get("generation", 0) == 1 and rerun["requests"].get("judge", 0) == 0
    assert rerun["cache"]["misses"] == {"endings": 1, "verdicts": 0, "tokens": 0, "positions": 0}


def test_cache_stats_counts_every_conflict_and_damaged_record_of_the_last_merge(tmp_path, tension_run,
                                                                                 lmdb_records):
    """More conflicts and damaged records than a merge lists one by one (100 each):
    the merge and `cache stats` count them all."""
    a = cache_with(tmp_path / "a", {key(i): verdict("YES") for i in range(150)})
    b = cache_with(tmp_path / "b", {key(i): verdict("NO") for i in range(400)})
    _damage(b, "verdicts", [key(i) for i in range(200, 320)])
    merged = tension_run("cache", "merge", a, b, tmp_path / "m")
    assert merged.returncode == 1
    table = _table(merged.stdout)
    assert table["verdicts"] == {"copied": 150 + 130, "present": 0, "conflicting": 150, "damaged": 120}
    assert len(lmdb_records(tmp_path / "m")["verdicts"]) == 280
    listed = merged.stdout.count("\nconflict: "), merged.stdout.count("\ndamaged record: ")
    assert listed == (100, 100) and "… and 70 more conflicts or damaged records" in merged.stdout
    assert "150 keys have different records" in merged.stderr and "120 damaged source records" in merged.stderr
    stats = tension_run("cache", "stats", tmp_path / "m")
    assert f"last merge: 280 records copied from {a}, {b}, 150 conflicting, 120 damaged, 0 left out" in \
        stats.stdout, stats.stdout  # before: 100 conflicting, 100 damaged (those the cache's note lists)
