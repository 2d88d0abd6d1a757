"""`cache merge` on the paths the review of 2026-12-02 took (issue 36): two runs of one
seeded command are the same answers whatever their token counts (M3), a hard-linked
copy of DST is DST (M10), SIGTERM stops a merge as Ctrl-C does (M12), and the way on
after a damaged source or a full disk is said for the merge, not for `score` (M7, M11).

The commands run in this process (`main`, `tension_run`; the runs against in-process
servers: their answers are the subject, not the wire) except two specs of the process:
the SIGTERM one (the signal, and its rerun, stay `python -m tension.core.cli`) and the
full disk's merge, whose `ulimit -f` is a limit of its process (set in the pytest worker,
it would hold every file the worker writes); its rerun with room again runs in process."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from tension.cache import records
from tension.cache.merge import same_answer
from tension.cache.store import Store
from tension.cache.verify import verify
from tension.core.cli import main
from tension.testing.answers import classify, expected_endings
from tension.testing.cache_records import (
    cache_with,
    key,
    many_verdicts,
    previous_form,
    record_keys,
    score_argv,
    verdict,
)
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer

MODELS = ["test-gen", "test-judge"]
CLI = [sys.executable, "-m", "tension.core.cli"]


def _usages(path: Path) -> dict[tuple[str, bytes], records.Usage]:
    out = {}
    with Store(path, readonly=True) as store:
        for db in ("endings", "verdicts", "positions"):
            for k, rec in store.keys(db):
                out[(db, k)] = rec.usage
    return out


def test_merge_of_two_identical_seeded_runs_reports_no_conflict(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3, words=(520, 560))
    with InProcessServer(MODELS).serving() as srv:  # one server: its prefix cache is cold, then warm
        for name in ("m1", "m2"):
            assert main(score_argv(corpus, tmp_path / name, tmp_path / f"{name}.lmdb", srv.base_url)) == 0
    for out in ("positions.jsonl", "stories.csv"):
        assert (tmp_path / "m1" / out).read_bytes() == (tmp_path / "m2" / out).read_bytes()
    a, b = _usages(tmp_path / "m1.lmdb"), _usages(tmp_path / "m2.lmdb")
    assert a.keys() == b.keys()
    # the ground of the finding: the same answers, with other token counts (the server's prefix cache)
    assert any(a[k].cached_tokens != b[k].cached_tokens for k in a), "the two runs' usage did not differ"
    capsys.readouterr()
    assert main(["cache", "merge", str(tmp_path / "m1.lmdb"), str(tmp_path / "m2.lmdb"),
                 str(tmp_path / "m12.lmdb")]) == 0
    got = capsys.readouterr()
    rows = {line.split()[0]: line.split()[1:] for line in got.out.splitlines()[2:6]}
    assert all(r[2] == "0" for r in rows.values()), got.out  # not one conflicting
    assert int(rows["verdicts"][1]) == len([k for k in a if k[0] == "verdicts"])  # every one already there
    assert "conflict" not in got.out.replace("conflicting", "") and "error" not in got.err


def _usage(n: int) -> records.Usage:
    return records.Usage(prompt_tokens=100, completion_tokens=4, cached_tokens=n, requests=1)


RECORDS = {
    "endings": records.Endings(texts=["a", "b"], finish_reasons=["stop", "length"], model="m", usage=_usage(0),
                               created=1.0, seconds=2.0),
    "verdict": records.Verdict(text="Y", finish_reason="stop", model="m", usage=_usage(0), created=1.0,
                               first_logprobs={"Y": -0.1, "N": -2.3}),
    "judged": records.JudgedPosition(texts=["Y", None], first_logprobs=[{"Y": -0.1}, None], usage=_usage(0),
                                     judged=1, created=1.0),
}
ANSWER_CHANGES = {
    "endings": [{"texts": ["a", "c"]}, {"finish_reasons": ["stop", "stop"]}, {"model": "other"}],
    "verdict": [{"text": "N"}, {"first_logprobs": {"Y": -0.2, "N": -2.3}}, {"finish_reason": "length"}],
    "judged": [{"texts": ["N", None]}, {"first_logprobs": [{"Y": -0.3}, None]}, {"judged": 2}],
}


@pytest.mark.parametrize("kind", RECORDS)
def test_every_record_is_the_same_answer_whatever_its_bookkeeping(kind):
    rec = RECORDS[kind]
    other = msgspec.structs.replace(rec, usage=_usage(672), created=99.0)
    assert same_answer(rec, other)
    for change in ANSWER_CHANGES[kind]:
        assert not same_answer(rec, msgspec.structs.replace(rec, **change)), change


def _hard_linked_copy(src: Path, dst: Path) -> None:
    """`cp -al SRC DST`: another folder whose files are the same files."""
    dst.mkdir()
    for f in src.iterdir():
        os.link(f, dst / f.name)


def test_a_hard_linked_copy_of_dst_is_refused_as_dst(tmp_path, capsys):
    dst = cache_with(tmp_path / "dst", {key(1): verdict("Y")})
    _hard_linked_copy(dst, tmp_path / "linked")
    other = cache_with(tmp_path / "other", {key(2): verdict("N")})
    assert main(["cache", "merge", str(other), str(tmp_path / "linked"), str(dst)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'linked'} is DST (the same data.mdb, hard-linked)" in err and "Traceback" not in err
    # two names of one source: given twice
    _hard_linked_copy(other, tmp_path / "other2")
    assert main(["cache", "merge", str(other), str(tmp_path / "other2"), str(tmp_path / "new")]) == 2
    assert "is given twice" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()  # refused before anything was made


def test_sigterm_stops_a_merge_as_ctrl_c_does_and_the_same_command_completes_it(tmp_path):
    n = 300_000
    src = many_verdicts(tmp_path / "big", n)
    dst = tmp_path / "dst"
    argv = [*CLI, "cache", "merge", str(src), str(dst)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while proc.poll() is None and not (dst / "data.mdb").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the merge ended before it could be stopped: give it more records"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Resume with the same command" in err and "cache merge" in err, err
    assert "Traceback" not in err
    assert verify(dst).sound
    assert subprocess.run(argv, capture_output=True).returncode == 0
    with Store(dst, readonly=True) as store:
        assert store.stats()["verdicts"]["entries"] == n


def test_a_damaged_source_is_said_with_the_merges_own_way_on(tmp_path, capsys):
    good = cache_with(tmp_path / "good", {key(1): verdict("Y")})
    bad = cache_with(tmp_path / "bad", {key(i): verdict("Y") for i in range(2, 2000)})
    data = bad / "data.mdb"
    with open(data, "r+b") as f:  # a copy cut short
        f.truncate(data.stat().st_size // 2)
    rc = main(["cache", "merge", str(good), str(bad), str(tmp_path / "dst")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"cache recover {bad} NEW" in err and f"then run the merge again with NEW in place of {bad}" in err
    assert "--cache" not in err and "Traceback" not in err


def test_a_full_disk_under_a_merge_is_said_with_the_merges_own_way_on(tmp_path, tension_run):
    src = many_verdicts(tmp_path / "src", 60_000)
    dst = tmp_path / "dst"
    limit = 512 * 1024  # `ulimit -f 512`: DST cannot hold them

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = subprocess.run([*CLI, "cache", "merge", str(src), str(dst)], capture_output=True, text=True, timeout=120,
                       preexec_fn=small_files)
    assert r.returncode == 1, r.stderr
    assert f"cannot write to the cache at {dst}" in r.stderr and "(or give another DST)" in r.stderr
    assert "--cache" not in r.stderr and "Traceback" not in r.stderr
    assert tension_run("cache", "merge", str(src), str(dst)).returncode == 0  # room again: the same command


def _conflicting_runs(tmp_path: Path) -> tuple[Callable[[str, str, str], list[str]], InProcessServer]:
    """Two runs of one command on servers that answer it otherwise (the second one's
    odd endings go on with a sentence more, its even ones are the first's): other
    endings under the same keys, a real conflict, and verdicts of both kinds (of an
    ending DST keeps, of one it does not). Runs "a" (a.lmdb) and "b" (b.lmdb); the
    server of "a" is returned, no longer served."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=5, words=(520, 560))

    def argv(name: str, cache: str, url: str) -> list[str]:
        return ["score", str(corpus), "--out", str(tmp_path / name), "--cache", str(tmp_path / cache),
                "--base-url", url, "--model", "test-gen", "--judge-model", "test-judge", "--endings", "4",
                "--seed", "3", "--no-progress", "--no-report"]

    srv = InProcessServer(MODELS)
    with srv.serving(), InProcessServer(MODELS).serving() as other:
        other.respond(lambda msgs, n, seed: None if classify(msgs) != "generation" else
                      [e + (" Then the wind turned." if i % 2 else "")
                       for i, e in enumerate(expected_endings(msgs, n, seed))])
        assert main(argv("a", "a.lmdb", srv.base_url)) == 0
        assert main(argv("b", "b.lmdb", other.base_url)) == 0
    assert (tmp_path / "a" / "positions.jsonl").read_bytes() != (tmp_path / "b" / "positions.jsonl").read_bytes()
    return argv, srv


def _merged_run_is_the_first_sources(tmp_path: Path, argv, srv: InProcessServer, merged: str) -> None:
    """A run on the merged cache sends nothing and gives run "a"'s numbers, byte for
    byte, never a mix of one source's endings with the other's verdicts."""
    sent = len(srv.requests)
    assert main(argv("m", merged, srv.base_url)) == 0
    assert len(srv.requests) == sent, [r.path for r in srv.requests[sent:]]  # every answer found
    for name in ("positions.jsonl", "stories.csv", "groups.csv"):
        assert (tmp_path / "m" / name).read_bytes() == (tmp_path / "a" / name).read_bytes(), name


def test_after_a_conflict_of_endings_the_losing_sources_verdicts_and_judged_records_are_left_out(tmp_path, capsys):
    """M4: DST keeps the first source's endings; the second's verdicts and judged
    records of its own endings (which DST does not keep) are not copied, and the
    report counts them."""
    argv, srv = _conflicting_runs(tmp_path)
    with srv.serving():
        capsys.readouterr()
        assert main(["cache", "merge", str(tmp_path / "a.lmdb"), str(tmp_path / "b.lmdb"),
                     str(tmp_path / "m.lmdb")]) == 1  # conflicts are reported, the exit says so
        said = capsys.readouterr()
        assert "conflict: endings" in said.out
        va, vb = record_keys(tmp_path / "a.lmdb", "verdicts"), record_keys(tmp_path / "b.lmdb", "verdicts")
        pa, pb = record_keys(tmp_path / "a.lmdb", "positions"), record_keys(tmp_path / "b.lmdb", "positions")
        assert vb - va and pb - pa  # the ground of the finding: the losing source judged endings of its own
        assert record_keys(tmp_path / "m.lmdb", "verdicts") == va
        assert record_keys(tmp_path / "m.lmdb", "positions") == pa
        assert (f"{len(vb - va)} verdicts and {len(pb - pa)} judged positions of the losing endings left out"
                in said.out), said.out
        assert main(["cache", "stats", str(tmp_path / "m.lmdb")]) == 0
        assert f"{len(vb - va) + len(pb - pa)} left out (of losing endings)" in capsys.readouterr().out
        _merged_run_is_the_first_sources(tmp_path, argv, srv, "m.lmdb")


def test_a_cache_of_the_previous_format_is_still_read_and_merged(tmp_path, capsys):
    """A source written by the release reading up to format 2 (verdicts without the
    link to their ending): merged as before, its losing verdicts copied since nothing
    tells their endings, never read; a run from it and from the merge sends nothing."""
    argv, srv = _conflicting_runs(tmp_path)
    with srv.serving():
        previous_form(tmp_path / "b.lmdb", tmp_path / "old.lmdb")
        capsys.readouterr()
        assert main(["cache", "merge", str(tmp_path / "a.lmdb"), str(tmp_path / "old.lmdb"),
                     str(tmp_path / "m.lmdb")]) == 1
        said = capsys.readouterr()
        assert "conflict: endings" in said.out and "left out" not in said.out
        va, vb = record_keys(tmp_path / "a.lmdb", "verdicts"), record_keys(tmp_path / "b.lmdb", "verdicts")
        assert record_keys(tmp_path / "m.lmdb", "verdicts") == va | vb
        _merged_run_is_the_first_sources(tmp_path, argv, srv, "m.lmdb")
        sent = len(srv.requests)
        shutil.rmtree(tmp_path / "m")
        shutil.copytree(tmp_path / "old.lmdb", tmp_path / "old-run.lmdb")
        assert main(argv("m", "old-run.lmdb", srv.base_url)) == 0  # the old cache read as it is: nothing asked
        assert len(srv.requests) == sent
        assert (tmp_path / "m" / "positions.jsonl").read_bytes() == (tmp_path / "b" / "positions.jsonl").read_bytes()
