"""Which release reads which cache (issue 36, M14), and who may read it (S12).

Compressed records came without a format change, so a release reading up to format
1 took a merged cache's records for damaged ones and asked everything again. A cache
this release writes records into is format 2, which such a release refuses
("upgrade tension-run"), the rule it has always had: format > its own. Every cache
verb keeps that: those that only read or only delete leave the format as it was.
A cache folder this release makes is private (0700, files 0600): it holds every
story and ending, and a shared node's other users must not read them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import lmdb
import pytest

from tension.cache import records
from tension.cache.store import FORMAT_VERSION, Store
from tension.core.cli import main
from tension.testing.cache_records import cache_with, key, score_argv, verdict
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

PREVIOUS = 1  # the format the release before compressed records reads up to


def _format(path: Path) -> int:
    env = lmdb.open(str(path), max_dbs=8, readonly=True, lock=False)
    try:
        with env.begin(db=env.open_db(b"meta", create=False)) as txn:
            return int(txn.get(b"format"))
    finally:
        env.close()


def _previous_release_refuses(path: Path) -> bool:
    """The previous release's check at every open (cache/store.py at dd7b894^): a
    format above its own is refused with "upgrade tension-run", never read."""
    return _format(path) > PREVIOUS


def _format_1_cache(path: Path) -> Path:
    """A cache as the previous release wrote it: format 1, records uncompressed."""
    with Store(path) as store:
        store.put_values([("verdicts", key(1), bytes(records.encode(verdict("Y"), compress=False)))])
    _set_format(path, 1)
    return path


def _set_format(path: Path, n: int) -> None:
    env = lmdb.open(str(path), max_dbs=8)
    try:
        with env.begin(write=True, db=env.open_db(b"meta")) as txn:
            txn.put(b"format", str(n).encode())
    finally:
        env.close()


def test_the_format_is_2_since_records_may_be_compressed():
    assert FORMAT_VERSION == 2 > PREVIOUS


def test_a_cache_written_by_a_run_is_one_the_previous_release_refuses(tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    with LoopbackServer(model=["test-gen", "test-judge"]) as srv:
        assert main(score_argv(corpus, tmp_path / "out", tmp_path / "cache", srv.base_url)) == 0
    with Store(tmp_path / "cache", readonly=True) as store:
        compressed = any(records.is_compressed(v) for _, v in store.values("verdicts"))
    assert compressed and _previous_release_refuses(tmp_path / "cache")


def _verbs(tmp_path: Path, src: Path) -> dict[str, tuple[list[str], Path, int]]:
    """Every cache verb on a format-1 cache: its argv, the cache it leaves, and that cache's format then."""
    old_dst = _format_1_cache(tmp_path / "old-dst")
    return {"stats": (["cache", "stats", str(src)], src, 1),
            "verify": (["cache", "verify", str(src)], src, 1),
            "drop": (["cache", "drop", str(src), "--role", "judge", "--yes"], src, 1),  # deletes: writes no record
            "recover": (["cache", "recover", str(src), str(tmp_path / "new")], tmp_path / "new", FORMAT_VERSION),
            "merge": (["cache", "merge", str(src), str(old_dst)], old_dst, FORMAT_VERSION),
            "merge into a new DST": (["cache", "merge", str(src), str(tmp_path / "m")], tmp_path / "m",
                                     FORMAT_VERSION)}


@pytest.mark.parametrize("verb", ["stats", "verify", "drop", "recover", "merge", "merge into a new DST"])
def test_every_cache_verb_leaves_a_format_the_release_reading_it_can_trust(tmp_path, verb):
    src = _format_1_cache(tmp_path / "src")
    cache_with(tmp_path / "other", {key(2): verdict("N")})
    argv, left, want = _verbs(tmp_path, src)[verb]
    assert main(argv) == 0
    assert _format(left) == want
    if want > PREVIOUS:  # it holds this release's records: the previous release refuses it, not misreads it
        assert _previous_release_refuses(left)
    assert _format(src) == 1  # a source is only read (drop only deletes)


def test_a_format_1_cache_is_marked_2_when_a_run_first_writes_to_it_and_not_before(tmp_path):
    path = _format_1_cache(tmp_path / "c")
    with Store(path) as store:  # opened to write, only read
        assert store.get("verdicts", key(1)) is not None
    assert _format(path) == 1
    with Store(path) as store:
        store.put_many([("verdicts", key(3), verdict("Y"))])
    assert _format(path) == FORMAT_VERSION


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize("made_by", ["a run", "cache recover", "cache merge"])
def test_a_cache_folder_made_is_private_to_its_user(tmp_path, made_by):
    before = os.umask(0o022)
    try:
        src = cache_with(tmp_path / "src", {key(1): verdict("Y")})
        made = tmp_path / "deep" / "made"
        if made_by == "a run":
            with Store(made) as store:
                store.put_many([("verdicts", key(2), verdict("N"))])
        else:
            verb = "recover" if made_by == "cache recover" else "merge"
            assert main(["cache", verb, str(src), str(made)]) == 0
    finally:
        os.umask(before)
    assert _mode(made) == 0o700
    assert {f.name: _mode(f) for f in made.iterdir()} == {"data.mdb": 0o600, "lock.mdb": 0o600}
