"""Several runs at once in one process, as a notebook makes them: two
``score_async`` awaited together, two blocking calls from two threads, on one
cache (a given one and the default one), each writing what a run alone writes;
and two runs writing one ``out`` refused by name, not blamed on this process."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import tension
from tension.cache.store import Store
from tension.core.errors import CacheError, TensionError
from tension.testing.corpus import make_corpus

OUTPUTS = ("positions.jsonl", "stories.csv", "groups.csv")


def settings(server, cache: Path | None, seed: int = 1) -> dict:
    kw = {"base_url": server.base_url, "model": "test-gen", "endings": 3, "seed": seed, "progress": False,
          "report": False}
    if cache is not None:
        kw["cache"] = str(cache)
    return kw


def same_outputs(a: Path, b: Path) -> None:
    for name in OUTPUTS:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture
def alone(server, tmp_path):
    """Two corpora, each scored by a run alone (its own cache): (corpora, out folders)."""
    corpora = [make_corpus(tmp_path / f"c{i}.jsonl", 2 + i, seed=40 + i) for i in range(2)]
    outs = []
    for i, c in enumerate(corpora):
        r = tension.score(c, out=tmp_path / f"alone{i}", **settings(server, tmp_path / f"alone-cache{i}", seed=i + 1))
        assert r.status == "complete", r.summary
        outs.append(tmp_path / f"alone{i}")
    return corpora, outs


@pytest.mark.parametrize("default_cache", [False, True], ids=["given-cache", "default-cache"])
@pytest.mark.in_process
def test_two_score_async_on_one_cache_gathered_write_what_runs_alone_write(server, tmp_path, alone, default_cache):
    corpora, outs = alone
    cache = None if default_cache else tmp_path / "shared"

    async def main():
        return await asyncio.gather(*(tension.score_async(c, out=tmp_path / f"g{i}",
                                                          **settings(server, cache, seed=i + 1))
                                      for i, c in enumerate(corpora)))

    results = asyncio.run(main())
    assert [r.status for r in results] == ["complete", "complete"], [r.summary for r in results]
    for i in range(2):
        same_outputs(outs[i], tmp_path / f"g{i}")


@pytest.mark.parametrize("default_cache", [False, True], ids=["given-cache", "default-cache"])
@pytest.mark.in_process
def test_two_blocking_scores_from_two_threads_on_one_cache_write_what_runs_alone_write(server, tmp_path, alone,
                                                                                       default_cache):
    corpora, outs = alone
    cache = None if default_cache else tmp_path / "shared"
    results: dict[int, object] = {}
    start = threading.Barrier(2)

    def call(i: int) -> None:
        start.wait()
        try:
            results[i] = tension.score(corpora[i], out=tmp_path / f"t{i}", **settings(server, cache, seed=i + 1))
        except BaseException as e:  # handed to the test's thread
            results[i] = e

    threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [getattr(results.get(i), "status", results.get(i)) for i in range(2)] == ["complete", "complete"]
    for i in range(2):
        same_outputs(outs[i], tmp_path / f"t{i}")
    from tension.cache import shared

    assert shared.open_paths() == []  # the shared store closed when the last run left


@pytest.mark.in_process
def test_the_cache_is_closed_when_the_last_run_leaves(server, tmp_path):
    from tension.cache import shared

    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    r = tension.score(corpus, out=tmp_path / "a", **settings(server, tmp_path / "cache"))
    assert r.status == "complete"
    assert shared.open_paths() == []


@pytest.mark.in_process
def test_two_runs_writing_one_out_in_one_process_are_refused_by_name(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=9)
    server.delay = 0.2  # the first run is still going when the second asks for the folder

    async def main():
        first = asyncio.create_task(tension.score_async(corpus, out=tmp_path / "same",
                                                        **settings(server, tmp_path / "cache")))
        await asyncio.sleep(0.3)
        try:
            with pytest.raises(TensionError) as caught:
                await tension.score_async(corpus, out=tmp_path / "same", **settings(server, tmp_path / "cache"))
        finally:
            await first
        return caught.value

    err = str(asyncio.run(main()))
    assert "another call in this process" in err and "pid" not in err, err
    assert str(tmp_path / "same") in err


def test_a_read_only_store_does_not_block_a_writing_run_later(tmp_path):
    """A store opened read-only in this process, then closed: a run may open it to write."""
    path = tmp_path / "cache"
    Store(path).close()
    with Store(path, readonly=True):
        with pytest.raises(CacheError, match="open read-only in this process"):
            Store(path)
    with Store(path) as s:
        assert not s.readonly
