"""`cache stats` says how many records each database holds and what the last run
hit, missed and wrote; the plain `lmdb` package's count of the records and the
runs' own run.json prove it, after a first run, a drop and a rerun (issue 58, item
3's class: every verb that reports a count of what it did, against a rerun that
proves it). The runs are `score` in this process against an in-process server."""

from __future__ import annotations

from pathlib import Path

from tension.cache.store import DBS
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer

COLUMNS = ("entries", "MB", "hits", "misses", "writes")


def _stats(tension_run, cache: Path) -> dict[str, dict[str, float]]:
    done = tension_run("cache", "stats", cache)
    assert done.returncode == 0, done.stderr
    rows = {}
    for line in done.stdout.splitlines():
        cells = line.split()
        if len(cells) == 6 and cells[0] in DBS:
            rows[cells[0]] = dict(zip(COLUMNS, map(float, cells[1:]), strict=True))
    assert set(rows) == set(DBS), done.stdout
    return rows


def _column(rows: dict[str, dict[str, float]], what: str) -> dict[str, int]:
    return {db: int(row[what]) for db, row in rows.items()}


def test_cache_stats_counts_are_what_lmdb_reads_and_what_the_last_run_did(tmp_path, tension_run, score_run,
                                                                          lmdb_records):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    cache = tmp_path / "cache"
    with InProcessServer(["test-gen"]).serving() as srv:
        first = score_run(corpus, tmp_path / "a", cache, srv.base_url)
        rows = _stats(tension_run, cache)
        assert _column(rows, "entries") == {db: len(v) for db, v in lmdb_records(cache).items()}
        assert _column(rows, "entries") == first["cache"]["writes"]  # a first run on a new cache wrote them all
        for what in ("hits", "misses", "writes"):
            assert _column(rows, what) == first["cache"][what], what

        dropped = tension_run("cache", "drop", cache, "--role", "judge", "--yes")
        assert dropped.returncode == 0, dropped.stderr
        rows = _stats(tension_run, cache)
        assert _column(rows, "entries") == {db: len(v) for db, v in lmdb_records(cache).items()}
        assert (_column(rows, "entries")["verdicts"], _column(rows, "entries")["positions"]) == (0, 0)

        rerun = score_run(corpus, tmp_path / "b", cache, srv.base_url)
    rows = _stats(tension_run, cache)
    for what in ("hits", "misses", "writes"):
        assert _column(rows, what) == rerun["cache"][what], what
    # the rerun asked again for what was dropped, and wrote it: the cache holds it again
    assert _column(rows, "writes")["verdicts"] == first["cache"]["writes"]["verdicts"]
    assert _column(rows, "entries") == {db: len(v) for db, v in lmdb_records(cache).items()} == \
        first["cache"]["writes"]
