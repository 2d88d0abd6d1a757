"""A damaged cache, on the user's paths: real caches written by `score`, then
truncated (a partial copy, a full disk), scribbled over (a page of zeros), a byte
flipped inside a value, or replaced by a foreign file; the real CLI run on them in
subprocesses. Nothing may die of a signal ("Bus error") or print a traceback;
the message names the cache and the way out; a later run asks again only for
what was lost.

Every command over a damaged cache is the console script in a subprocess (`cli`): a
SIGBUS reading a damaged LMDB would kill the pytest worker, and "no signal" is what is
asserted. The commands over sound caches run in this process (`tension_run`): the
`cold` run that writes the cache, the runs on a recovered cache, and the verbs on a
missing cache or a sound one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

from tension.cache.store import Store
from tension.testing.corpus import make_corpus

ENDINGS = "4"


def cli(*args: str) -> subprocess.CompletedProcess:
    exe = str(Path(sys.executable).parent / "tension-run")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300, env=dict(os.environ))


def score(server, corpus: Path, cache: Path, out: Path, run=cli) -> subprocess.CompletedProcess:
    """`score` on `cache` by `run`: `cli` (a subprocess) or the test's `tension_run`."""
    return run("score", str(corpus), "--out", str(out), "--cache", str(cache), "--base-url", server.base_url,
               "--model", "test-gen", "--endings", ENDINGS, "--seed", "3", "--no-progress", "--no-report")


def assert_clean_failure(r: subprocess.CompletedProcess, status: int) -> None:
    """Exited with `status` on its own: no signal, no traceback."""
    assert r.returncode == status, (r.returncode, r.stdout, r.stderr)
    assert "Bus error" not in r.stderr and "Traceback" not in r.stderr and "Assertion" not in r.stderr


@pytest.fixture
def cold(server, tmp_path, tension_run):
    """A corpus, the cache a first run wrote, and that run's outputs (in process: the
    cache is sound yet)."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=21)
    r = score(server, corpus, tmp_path / "cache", tmp_path / "cold", run=tension_run)
    assert r.returncode == 0, r.stderr
    server.reset_records()
    return corpus, tmp_path / "cache", (tmp_path / "cold" / "positions.jsonl").read_bytes()


def damaged_copy(cache: Path, where: Path) -> Path:
    shutil.copytree(cache, where)
    return where


def endings_value(cache: Path) -> tuple[bytes, bytes]:
    """(key, stored value) of one endings record."""
    env = lmdb.open(str(cache), max_dbs=8, readonly=True, lock=False)
    with env.begin() as txn:
        db = env.open_db(b"endings", txn=txn, create=False)
        key, value = next(iter(txn.cursor(db)))
    env.close()
    return key, value


def leaf_keys(page: bytes) -> list[bytes]:
    """The keys of a leaf page's nodes (LMDB 0.9: a 16-byte header ending with
    `lower`, then 2-byte node offsets up to `lower`; a node is lo, hi, flags, ksize, key)."""
    lower = int.from_bytes(page[12:14], "little")
    keys = []
    for ptr in range(16, lower, 2):
        at = int.from_bytes(page[ptr:ptr + 2], "little")
        ksize = int.from_bytes(page[at + 6:at + 8], "little")
        keys.append(page[at + 8:at + 8 + ksize])
    return keys


def value_offsets(cache: Path, value: bytes) -> list[int]:
    """Where the value is in data.mdb: compressed, an endings record fits in a leaf
    page, and older copies of that page (copy-on-write) may still be in the file."""
    data = (cache / "data.mdb").read_bytes()
    at = [i for i in range(len(data)) if data.startswith(value, i)]
    assert at
    return at


def test_a_truncated_cache_is_refused_and_recovered(server, cold, tmp_path, tension_run):
    corpus, cache, cold_positions = cold
    bad = damaged_copy(cache, tmp_path / "truncated")
    with (bad / "data.mdb").open("r+b") as f:
        f.truncate(os.path.getsize(bad / "data.mdb") // 2)
    for r in (score(server, corpus, bad, tmp_path / "out"), cli("cache", "stats", "--cache", str(bad))):
        assert_clean_failure(r, 2)
        assert f"the cache at {bad} is damaged" in r.stderr and "partial copy or a full disk" in r.stderr
        assert f"tension-run cache recover {bad} NEW" in r.stderr and "rerun the same command" not in r.stderr
    assert server.count() == 0  # refused before anything was sent

    r = cli("cache", "verify", str(bad))
    assert_clean_failure(r, 1)
    assert "problem: data.mdb is" in r.stdout and "damaged page:" in r.stdout

    new = tmp_path / "recovered"
    before = (bad / "data.mdb").read_bytes()
    r = cli("cache", "recover", str(bad), str(new))
    assert r.returncode == 0, r.stderr
    assert (bad / "data.mdb").read_bytes() == before  # the damaged cache is left as it was
    with Store(new, readonly=True) as s:
        kept = {db: st["entries"] for db, st in s.stats().items()}
    assert 0 < sum(kept.values())
    r = score(server, corpus, new, tmp_path / "again", run=tension_run)  # a recovered cache is sound
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "again" / "positions.jsonl").read_bytes() == cold_positions
    with Store(cache, readonly=True) as s:
        total = {db: st["entries"] for db, st in s.stats().items()}
    # only what the truncation lost was asked again
    assert server.count(kind="generation") == total["endings"] - kept["endings"]


def test_a_page_of_zeros_stops_the_run_with_the_way_out(server, cold, tmp_path, tension_run):
    corpus, cache, cold_positions = cold
    bad = damaged_copy(cache, tmp_path / "zeroed")
    _, value = endings_value(bad)
    key, _ = endings_value(bad)
    zeroed = []
    with (bad / "data.mdb").open("r+b") as f:
        # every leaf page with a node of this record (the live page and older copies of it),
        # so none is left to carve; stale bytes in the free space of a page reused by
        # another database are not its nodes
        for page in sorted({at // 4096 for at in value_offsets(bad, value)}):
            f.seek(page * 4096)
            data = f.read(4096)
            if int.from_bytes(data[10:12], "little") & 0x02 and key in leaf_keys(data):
                zeroed.append(page)
                f.seek(page * 4096)
                f.write(bytes(4096))
    assert zeroed

    r = score(server, corpus, bad, tmp_path / "out")
    assert_clean_failure(r, 2)
    assert f"the cache at {bad} is damaged" in r.stderr and "MDB_CORRUPTED" in r.stderr
    assert "rerun the same command" not in r.stderr and f"cache recover {bad} NEW" in r.stderr
    assert json.loads((tmp_path / "out" / "run.json").read_text())["status"] == "failed"

    r = cli("cache", "verify", str(bad))
    assert_clean_failure(r, 1)
    assert any(f"damaged page: endings page {page}" in r.stdout for page in zeroed) and "cache recover" in r.stderr

    r = cli("cache", "recover", str(bad), str(tmp_path / "recovered"))
    assert r.returncode == 0, r.stderr
    with Store(tmp_path / "recovered", readonly=True) as s, Store(cache, readonly=True) as whole:
        lost = {db: whole.stats()[db]["entries"] - s.stats()[db]["entries"] for db in ("endings", "verdicts")}
    assert lost["endings"] > 0 and lost["verdicts"] == 0
    server.reset_records()
    r = score(server, corpus, tmp_path / "recovered", tmp_path / "again", run=tension_run)  # sound
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "again" / "positions.jsonl").read_bytes() == cold_positions
    assert server.count(kind="generation") == lost["endings"]  # seeded: the same endings, verdicts from the cache
    assert server.count(kind="judge") == 0


def test_a_flipped_byte_in_a_value_is_a_miss_asked_again(server, cold, tmp_path):
    corpus, cache, cold_positions = cold
    key, value = endings_value(cache)
    with (cache / "data.mdb").open("r+b") as f:
        for at in value_offsets(cache, value):  # (the copy the database reaches among them)
            at += len(value) // 2
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 0x20]))

    r = cli("cache", "verify", str(cache))
    assert_clean_failure(r, 1)
    assert f"bad record: endings {key.hex()}: checksum mismatch" in r.stdout

    r = score(server, corpus, cache, tmp_path / "again")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "again" / "positions.jsonl").read_bytes() == cold_positions
    assert server.count(kind="generation") == 1 and server.count(kind="judge") == 0
    run = json.loads((tmp_path / "again" / "run.json").read_text())
    assert run["cache"]["damaged"] == {"endings": 1, "verdicts": 0, "tokens": 0, "positions": 0}
    # the new answer was written over the bad one
    r = cli("cache", "verify", str(cache))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "is sound" in r.stdout


def test_a_foreign_file_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "data.mdb").write_bytes(b"PK\x03\x04 not a cache at all " * 400)
    r = cli("cache", "stats", "--cache", str(cache))
    assert_clean_failure(r, 2)
    assert f"the cache at {cache} is damaged" in r.stderr and "not an LMDB file" in r.stderr
    r = cli("cache", "verify", str(cache))
    assert_clean_failure(r, 1)
    assert "not an LMDB file" in r.stderr


def test_looking_at_a_missing_cache_creates_none(tmp_path, tension_run):
    for args in (("cache", "stats", "--cache", str(tmp_path / "none")), ("cache", "verify", str(tmp_path / "none")),
                 ("cache", "recover", str(tmp_path / "none"), str(tmp_path / "new"))):
        r = tension_run(*args)  # no cache to be damaged
        assert_clean_failure(r, 1)  # a missing input, as a missing corpus is (test_exit_statuses.py)
        assert f"{tmp_path / 'none'}: no cache here (no data.mdb in it)" in r.stderr
    assert not (tmp_path / "none").exists() and not (tmp_path / "new").exists()


def test_recover_refuses_a_destination_that_holds_something(server, cold, tmp_path, tension_run):
    _, cache, _ = cold
    r = tension_run("cache", "recover", str(cache), str(cache))  # a sound cache
    assert_clean_failure(r, 2)
    assert "is not an empty folder" in r.stderr
