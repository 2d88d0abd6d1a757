"""`cache drop --run DIR` after the run's endings were dropped already: the verdicts
of those endings cannot be found from the run any more (a verdict's key is its
judge request's, made of the ending's text), so they stay, and a rerun, which makes
the same seeded endings again, reads every one of them. Before, `--role judge`
counted only the judged-position records and said "the next run asks again for
those it needs", with no word of the verdicts left; the rerun asked the judge
nothing. The drop says how many of the run's endings records are gone, and the rerun proves
what it says (issue 58, item 3's class). In this process, against an in-process
server, on a real LMDB cache."""

from __future__ import annotations

import re

from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer


def test_cache_drop_run_judge_after_its_endings_were_dropped_says_the_verdicts_stay(tmp_path, tension_run,
                                                                                      score_run, lmdb_records):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    cache, run = tmp_path / "cache", tmp_path / "a"
    with InProcessServer(["test-gen"]).serving() as srv:
        first = score_run(corpus, run, cache, srv.base_url)
        positions = len((run / "positions.jsonl").read_text().splitlines())
        endings = tension_run("cache", "drop", "--run", run, "--role", "generation", "--yes")
        assert endings.returncode == 0, endings.stderr
        judge = tension_run("cache", "drop", "--run", run, "--role", "judge", "--yes")
        assert judge.returncode == 0, judge.stderr
        said = judge.stdout + judge.stderr
        m = re.search(r"note: (\d+) of the run's endings records are not in the cache", said)
        assert m, said
        assert int(m.group(1)) == positions  # one endings record a position
        stay = len(lmdb_records(cache)["verdicts"])
        assert stay == first["cache"]["writes"]["verdicts"]  # not one dropped: none could be found
        assert f"{stay} verdict records" not in said  # (not counted as dropped)
        rerun = score_run(corpus, tmp_path / "b", cache, srv.base_url)
    # as said: the endings are made again, and every verdict of them is read from the cache
    assert rerun["requests"].get("generation", 0) == positions
    assert rerun["requests"].get("judge", 0) == 0 and rerun["cache"]["hits"]["verdicts"] == stay
