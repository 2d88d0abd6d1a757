"""`cache merge` (issue 28, several client machines): shards scored on caches of
their own, merged, give a final run that sends nothing and writes a one-process
run's bytes; conflicts and damaged records are reported, never silently chosen; a
merge killed mid-way leaves the destination sound, and a rerun completes it. The runs that
fill the caches are in this process against in-process servers (the answers, not the wire)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lmdb
import pytest

from tension.cache import records
from tension.cache.store import Store
from tension.cache.verify import verify
from tension.core.cli import main
from tension.core.errors import CacheError
from tension.testing.cache_records import cache_with, key, many_verdicts, score_argv, verdict
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer

MODELS = ["test-gen", "test-judge"]
COMPARED = ("positions.jsonl", "stories.csv", "groups.csv")


def test_shards_on_their_own_caches_merged_give_a_final_run_that_sends_nothing(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 4, seed=3, words=(520, 560))
    with InProcessServer(MODELS).serving() as one:
        assert main(score_argv(corpus, tmp_path / "one", tmp_path / "one.lmdb", one.base_url)) == 0
    with InProcessServer(MODELS).serving() as srv:
        for i in range(2):  # two "machines", each with its own local cache
            assert main(score_argv(corpus, tmp_path / f"out{i}", tmp_path / f"m{i}.lmdb", srv.base_url,
                                   "--shard", f"{i}/2")) == 0
        assert all(len((tmp_path / f"out{i}" / "stories.csv").read_text().splitlines()) > 1 for i in range(2))
        capsys.readouterr()
        assert main(["cache", "merge", str(tmp_path / "m0.lmdb"), str(tmp_path / "m1.lmdb"),
                     str(tmp_path / "merged.lmdb")]) == 0
        said = capsys.readouterr().out
        assert "merged 2 caches" in said and "conflicting" in said
        sent = len(srv.requests)
        assert main(score_argv(corpus, tmp_path / "all", tmp_path / "merged.lmdb", srv.base_url)) == 0
        assert len(srv.requests) == sent, [r.path for r in srv.requests[sent:]]  # not one request
    for name in COMPARED:
        assert (tmp_path / "all" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    # merging again finds everything there already
    capsys.readouterr()
    assert main(["cache", "merge", str(tmp_path / "m0.lmdb"), str(tmp_path / "m1.lmdb"),
                 str(tmp_path / "merged.lmdb")]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[2:6]}
    assert all(r[0] == "0" for r in rows.values()) and int(rows["endings"][1]) > 0
    assert main(["cache", "stats", "--cache", str(tmp_path / "merged.lmdb")]) == 0
    assert "last merge: 0 records copied from" in capsys.readouterr().out


def test_a_key_with_two_answers_is_reported_and_dst_keeps_the_first(tmp_path, capsys):
    a = cache_with(tmp_path / "a", {key(1): verdict("YES"), key(2): verdict("NO"), key(3): verdict("NO")})
    b = cache_with(tmp_path / "b", {key(1): verdict("NO"), key(2): verdict("NO", created=99.0), key(4): verdict("x")})
    dst = tmp_path / "dst"
    assert main(["cache", "merge", str(a), str(b), str(dst)]) == 1
    cap = capsys.readouterr()
    assert f"conflict: verdicts {key(1).hex()}: {b} holds another answer; DST keeps the record copied from {a}" \
        in cap.out
    assert "1 keys have different records" in cap.err
    verdicts = next(line for line in cap.out.splitlines() if line.startswith("verdicts")).split()
    assert verdicts[1:] == ["4", "1", "1", "0"]  # copied 1,2,3 from a and 4 from b; 2 is the same answer
    with Store(dst, readonly=True) as store:
        assert store.get("verdicts", key(1)).text == "YES"
        assert store.get("verdicts", key(4)).text == "x"
    # a conflict with DST's own record names DST
    assert main(["cache", "merge", str(b), str(dst)]) == 1
    assert "DST keeps DST's own record" in capsys.readouterr().out


def test_damaged_source_records_are_reported_and_skipped(tmp_path, capsys):
    src = cache_with(tmp_path / "src", {key(i): verdict(f"v{i}") for i in range(10)})
    env = lmdb.open(str(src), max_dbs=8)
    db = env.open_db(b"verdicts")
    with env.begin(write=True) as txn:
        bad = bytearray(txn.get(key(5), db=db))
        bad[-1] ^= 0xFF  # the checksum no longer matches
        txn.put(key(5), bytes(bad), db=db)
    env.close()
    dst = tmp_path / "dst"
    assert main(["cache", "merge", str(src), str(dst)]) == 1
    cap = capsys.readouterr()
    assert f"damaged record: {src} verdicts {key(5).hex()}: checksum mismatch" in cap.out
    assert "1 damaged source records were skipped" in cap.err
    report = verify(dst)
    assert report.sound and report.databases["verdicts"].records == 9


def test_values_are_copied_as_stored(tmp_path):
    """The bytes, not a re-encoding: a record format of another version (here a
    value written before checksums, plain msgpack) arrives as it was."""
    src = cache_with(tmp_path / "src", {key(1): verdict("a")})
    plain = records._encoder.encode(verdict("plain"))
    env = lmdb.open(str(src), max_dbs=8)
    db = env.open_db(b"verdicts")  # (before the write transaction: opening a database writes too)
    with env.begin(write=True) as txn:
        txn.put(key(2), plain, db=db)
    env.close()
    assert main(["cache", "merge", str(src), str(tmp_path / "dst")]) == 0
    with Store(tmp_path / "dst", readonly=True) as store:
        got = dict(store.values("verdicts"))
    assert got[key(2)] == plain and got[key(1)][0] == records.CHECKED


def test_merging_a_cache_into_itself_is_refused(tmp_path, capsys):
    a = cache_with(tmp_path / "a", {key(1): verdict("a")})
    (tmp_path / "link").symlink_to(a)
    assert main(["cache", "merge", str(a), str(tmp_path / "link")]) == 2
    assert "cannot be merged into itself" in capsys.readouterr().err
    assert main(["cache", "merge", str(a), str(tmp_path / "link"), str(tmp_path / "d")]) == 2
    assert "is given twice" in capsys.readouterr().err
    assert main(["cache", "merge", str(tmp_path / "nothing"), str(tmp_path / "d")]) == 1  # a missing input
    assert "nothing: no cache here" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert main(["cache", "merge", str(a), str(tmp_path / "full")]) == 2
    assert "neither a cache" in capsys.readouterr().err


def test_a_merge_killed_mid_way_leaves_dst_sound_and_a_rerun_completes_it(tmp_path):
    n = 300_000
    src = many_verdicts(tmp_path / "big", n)
    dst = tmp_path / "dst"
    argv = [sys.executable, "-m", "tension.core.cli", "cache", "merge", str(src), str(dst)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        held = 0
        while proc.poll() is None and held == 0:  # wait for the first batches to commit, then kill
            time.sleep(0.01)
            if (dst / "data.mdb").exists():
                try:
                    with Store(dst, readonly=True) as store:
                        held = store.stats()["verdicts"]["entries"]
                except CacheError as e:  # made, its first transaction not yet committed
                    assert "holds no databases yet" in str(e)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the merge ended before it could be killed: give it more records"
    with Store(dst, readonly=True) as store:
        assert 0 < store.stats()["verdicts"]["entries"] < n
    assert verify(dst).sound
    assert subprocess.run(argv, capture_output=True).returncode == 0
    with Store(dst, readonly=True) as store:
        assert store.stats()["verdicts"]["entries"] == n


# --- a cache on a network file system --------------------------------------------


@pytest.fixture
def on_nfs(monkeypatch):
    """The file system type as statfs would give it for an NFS mount, substituted
    at the one function that reads it."""
    from tension.cache import mounts

    monkeypatch.delenv(mounts.ALLOW_ENV, raising=False)
    monkeypatch.setattr(mounts, "filesystem_type", lambda path: 0x6969)


def cache_verbs(a: Path, tmp_path: Path) -> dict[str, list[str]]:
    return {"cache stats": ["cache", "stats", "--cache", str(a)], "cache verify": ["cache", "verify", str(a)],
            "cache recover": ["cache", "recover", str(a), str(tmp_path / "new")],
            "cache drop": ["cache", "drop", "--cache", str(a), "--role", "judge"],
            "cache merge": ["cache", "merge", str(a), str(tmp_path / "merged")]}


def test_a_cache_on_a_network_file_system_is_refused_by_every_cache_verb(tmp_path, capsys, on_nfs, monkeypatch):
    from tension.cache import mounts

    monkeypatch.setattr(mounts, "filesystem_type", lambda path: None)
    a = cache_with(tmp_path / "a", {key(1): verdict("a")})
    monkeypatch.setattr(mounts, "filesystem_type", lambda path: 0x6969)
    for name, argv in cache_verbs(a, tmp_path).items():
        capsys.readouterr()
        assert main(argv) == 2, name
        err = capsys.readouterr().err
        assert "is on a network file system (NFS)" in err and "tension-run cache merge" in err, name
        assert "--cache-on-network-fs" in err
        assert main([*argv, "--cache-on-network-fs"]) == 0, name  # the user insists
        assert mounts.ALLOW_ENV not in os.environ  # for that command only


def test_score_refuses_a_cache_on_a_network_file_system_before_any_request(tmp_path, capsys, on_nfs):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    with InProcessServer(MODELS).serving() as srv:
        assert main(score_argv(corpus, tmp_path / "out", tmp_path / "c.lmdb", srv.base_url)) == 2
        assert "is on a network file system (NFS)" in capsys.readouterr().err
        assert srv.requests == []


def test_every_verb_that_opens_a_cache_takes_the_flag():
    import argparse

    from tension.core.cli import VERBS
    from tension.core.cli.network_fs import OPENS_CACHE

    for verb in VERBS:
        p = argparse.ArgumentParser()
        verb.add_flags(p)
        dests = {a.dest for a in p._actions}
        opens = bool(dests & {"cache", "path", "src", "dst"})
        assert opens == (verb.name in OPENS_CACHE), verb.name
        assert ("cache_on_network_fs" in dests) == opens, verb.name


def test_the_file_system_type_is_read_from_the_kernel(tmp_path):
    """A real tmpfs mount (local: accepted); the disk the tests run on (local)."""
    from tension.cache.mounts import filesystem_type, network_filesystem

    assert network_filesystem(tmp_path / "not" / "yet") is None  # its nearest existing parent
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "none", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        assert filesystem_type(mnt) == 0x01021994  # TMPFS_MAGIC
        assert network_filesystem(mnt / "llm.lmdb") is None
        with Store(mnt / "llm.lmdb") as store:
            store.put_many([("verdicts", key(1), verdict("a"))])
    finally:
        subprocess.run(["umount", str(mnt)])


def test_the_api_refuses_a_cache_on_a_network_file_system_unless_the_process_insists(tmp_path, on_nfs, monkeypatch):
    """docs/python.md: the API raises the CLI's ConfigError; the environment variable
    the flag stands for lets a script insist."""
    import tension
    from tension.cache import mounts
    from tension.core.errors import ConfigError

    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    with InProcessServer(MODELS).serving() as srv:
        kw = {"base_url": srv.base_url, "model": "test-gen", "judge_model": "test-judge", "endings": 2,
              "cache": str(tmp_path / "c.lmdb"), "progress": False, "report": False}
        with pytest.raises(ConfigError, match=r"is on a network file system \(NFS\)"):
            tension.score(str(corpus), out=tmp_path / "a", **kw)
        assert srv.requests == []
        monkeypatch.setenv(mounts.ALLOW_ENV, "1")
        assert tension.score(str(corpus), out=tmp_path / "b", **kw).status == "complete"


def test_every_cache_verb_given_the_data_mdb_file_names_the_folder_to_give(tmp_path, capsys):
    """The file inside the folder is the usual slip (tab completion): each verb says
    which folder to give instead, exit 2, as score's --cache does."""
    a = cache_with(tmp_path / "a", {key(1): verdict("a")})
    file = a / "data.mdb"
    verbs = cache_verbs(file, tmp_path)
    verbs["cache merge DST"] = ["cache", "merge", str(a), str(file)]
    for name, argv in verbs.items():
        capsys.readouterr()
        assert main(argv) == 2, name
        err = capsys.readouterr().err
        assert f"{file} is a file; give the folder that holds data.mdb ({a})" in err, (name, err)
        assert "Traceback" not in err
    with Store(a, readonly=True) as store:
        assert store.stats()["verdicts"]["entries"] == 1  # nothing was written over it
