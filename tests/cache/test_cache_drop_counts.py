"""`cache drop` says what it dropped, and a rerun proves it (issue 58 item 3: M3, M4 of
../shared/reviews/newuser-2026-12-07.md). `--model M` matches the requests that asked
for M, whatever name the server answered under (an alias, vLLM's --served-model-name,
a proxy): before, it matched the name the answers carried, said "dropped 96 records …
the next run asks again", and the rerun reused them all; and it matched every judged-
position record whatever the name. The class: every filter (--model, --role, --run)
is checked against a rerun that misses exactly the records dropped, and sends the
requests again.

Every command runs in this process (`tension_run`); the servers are in-process ones
(the loopback server's answers, no socket), on a real LMDB cache."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest

from tension.cache import records
from tension.cache.store import DBS, Store
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer

WHAT = {"endings": "endings records", "verdicts": "verdict records", "tokens": "token counts",
        "positions": "judged-position records"}


def _score(run, url: str, corpus: Path, out: Path, cache: Path, model: str = "test-gen") -> dict:
    """`score` by `run` (the test's `tension_run`); its run.json."""
    done = run("score", str(corpus), "--out", str(out), "--base-url", url, "--model", model, "--endings", "4",
               "--seed", "1", "--no-progress", "--no-report", "--cache", str(cache))
    assert done.returncode == 0, done.stderr
    return json.loads((out / "run.json").read_text())


def _matched(stdout: str) -> dict[str, int]:
    """The per-database counts `cache drop` printed."""
    return {db: int(m.group(1)) for db, what in WHAT.items()
            if (m := re.search(rf"^\s+(\d+) {what}", stdout, re.M))}


def _entries(cache: Path) -> dict[str, int]:
    with Store(cache, readonly=True) as store:
        return {db: st["entries"] for db, st in store.stats().items()}


def _dropped(stdout: str) -> int:
    m = re.search(r"dropped (\d+) records from ", stdout)
    assert m, stdout
    return int(m.group(1))


def _check_rerun(first: dict, rerun: dict, matched: dict[str, int], before: dict[str, int],
                 after: dict[str, int]) -> None:
    """The rerun misses exactly what was dropped, sends those requests again, and
    the cache holds them again."""
    assert {db: before[db] - after[db] for db in DBS} == {db: matched.get(db, 0) for db in DBS}
    for db in DBS:
        assert rerun["cache"]["misses"][db] == matched.get(db, 0), (db, rerun["cache"])
    assert rerun["requests"].get("generation", 0) == matched.get("endings", 0)
    assert rerun["requests"].get("judge", 0) == matched.get("verdicts", 0)
    assert first["cache"]["misses"]["endings"] == before["endings"]  # the first run asked for every one


def test_cache_drop_model_drops_the_requests_asked_for_it_when_the_server_answers_under_another_name(
        tmp_path, tension_run):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    cache = tmp_path / "cache"
    with InProcessServer(["test-gen"], answer_model="stub").serving() as srv:
        first = _score(tension_run, srv.base_url, corpus, tmp_path / "a", cache)
        before = _entries(cache)
        dry = tension_run("cache", "drop", "--cache", str(cache), "--model", "stub")
        assert dry.returncode == 0 and f"cache {cache}: 0 records match (model stub)\n" == dry.stdout, dry.stdout
        dropped = tension_run("cache", "drop", "--cache", str(cache), "--model", "test-gen", "--yes")
        assert dropped.returncode == 0, dropped.stderr
        matched = _matched(dropped.stdout)
        assert matched == before  # every record of the run: endings, verdicts, judged positions, token counts
        assert "note:" not in dropped.stdout  # every record names the model asked for
        assert _dropped(dropped.stdout) == sum(before.values())
        assert dropped.stdout.rstrip().endswith("the next run asks again for those it needs")
        after = _entries(cache)
        rerun = _score(tension_run, srv.base_url, corpus, tmp_path / "b", cache)
    _check_rerun(first, rerun, matched, before, after)
    assert rerun["cache"]["hits"] == dict.fromkeys(DBS, 0)


def test_cache_drop_model_on_a_cache_the_model_never_touched_matches_nothing(tmp_path, tension_run):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    cache = tmp_path / "cache"
    with InProcessServer(["test-gen"]).serving() as srv:
        _score(tension_run, srv.base_url, corpus, tmp_path / "a", cache)
    before = _entries(cache)
    done = tension_run("cache", "drop", "--cache", str(cache), "--model", "Qwen/Qwen3-8B", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"cache {cache}: 0 records match (model Qwen/Qwen3-8B)\n"  # judged positions too
    assert _entries(cache) == before


def _judge_flags(url: str) -> tuple[str, ...]:
    return ("--judge-base-url", url, "--judge-model", "test-judge")


@pytest.mark.parametrize(("what", "dbs"), [
    (["--model", "test-gen"], {"endings", "tokens"}), (["--model", "test-judge"], {"verdicts", "positions"}),
    (["--role", "generation"], {"endings"}), (["--role", "judge"], {"verdicts", "positions"}),
    (["--role", "tokenize"], {"tokens"}), (["--run", "a"], {"endings", "verdicts", "positions"}),
    (["--run", "a", "--role", "judge"], {"verdicts", "positions"}),
    (["--model", "test-gen", "--role", "generation"], {"endings"})])
def test_cache_drop_counts_what_a_rerun_asks_again(tmp_path, what, dbs, tension_run):
    """Each filter's count, checked by a rerun with a generator and a judge of their
    own names (the judge's answers named otherwise), which misses exactly those."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    cache = tmp_path / "cache"
    with InProcessServer(["test-gen"]).serving() as gen, \
            InProcessServer(["test-judge"], answer_model="judge-alias").serving() as judge:
        def score(out: str) -> dict:
            done = tension_run("score", str(corpus), "--out", str(tmp_path / out), "--base-url", gen.base_url,
                               "--model", "test-gen", *_judge_flags(judge.base_url), "--endings", "4", "--seed",
                               "1", "--no-progress", "--no-report", "--cache", str(cache))
            assert done.returncode == 0, done.stderr
            return json.loads((tmp_path / out / "run.json").read_text())

        first = score("a")
        before = _entries(cache)
        argv = [str(tmp_path / w) if w == "a" else w for w in what]
        dropped = tension_run("cache", "drop", "--cache", str(cache), *argv, "--yes")
        assert dropped.returncode == 0, dropped.stderr
        matched = _matched(dropped.stdout)
        assert set(matched) == dbs and _dropped(dropped.stdout) == sum(matched.values())
        after = _entries(cache)
        rerun = score("b")
    _check_rerun(first, rerun, matched, before, after)


def _as_written_before(src: Path, dst: Path) -> None:
    """A copy of the cache `src` as a release before issue 58 wrote it: its records
    without the model asked for."""
    items = []
    with Store(src, readonly=True) as s:
        for db in DBS:
            for k, rec in s.keys(db):
                assert rec is not None
                if isinstance(rec, (records.Endings, records.Verdict, records.JudgedPosition)):
                    rec = msgspec.structs.replace(rec, asked="")
                items.append((db, k, bytes(records.encode(rec))))
    with Store(dst) as s:
        s.put_values(items)


def test_cache_drop_model_on_records_written_before_they_named_the_model_asked_says_how_it_matched(
        tmp_path, tension_run):
    """Records that name only the model that answered are matched by it, and said
    so; the judged-position records, which name none, go with the verdicts dropped,
    and a rerun rebuilds them from the verdicts kept with no request."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    with InProcessServer(["test-gen"]).serving() as gen, InProcessServer(["test-judge"]).serving() as judge:
        def score(out: str, cache: Path) -> dict:
            done = tension_run("score", str(corpus), "--out", str(tmp_path / out), "--base-url", gen.base_url,
                               "--model", "test-gen", *_judge_flags(judge.base_url), "--endings", "4", "--seed",
                               "1", "--no-progress", "--no-report", "--cache", str(cache))
            assert done.returncode == 0, done.stderr
            return json.loads((tmp_path / out / "run.json").read_text())

        first = score("a", tmp_path / "new")
        cache = tmp_path / "old"
        _as_written_before(tmp_path / "new", cache)
        before = _entries(cache)
        untouched = tension_run("cache", "drop", "--cache", str(cache), "--model", "Qwen/Qwen3-8B")
        assert untouched.stdout == f"cache {cache}: 0 records match (model Qwen/Qwen3-8B)\n"
        dropped = tension_run("cache", "drop", "--cache", str(cache), "--model", "test-judge", "--yes")
        assert dropped.returncode == 0, dropped.stderr
        matched = _matched(dropped.stdout)
        assert (matched["verdicts"], matched["positions"]) == (before["verdicts"], before["positions"])
        assert "endings" not in matched
        assert (f"note: {before['verdicts']} of them were written before records named the model asked for: they "
                "are matched by the model that answered (test-judge)") in dropped.stdout
        assert (f"note: {before['positions']} of the judged-position records name no model (written before records "
                "named it): they go with the verdicts dropped, and a run rebuilds those it needs from the verdicts "
                "kept, with no request") in dropped.stdout
        after = _entries(cache)
        rerun = score("b", cache)
    _check_rerun(first, rerun, matched, before, after)
