"""The counts the verbs that run on the cache print, against the server's own record
of what it was asked, the files written, the cache read with the plain `lmdb`
package, and a rerun (issue 58, item 3's class: every verb that reports a count of
what it did, against a rerun that proves it): `score`'s "N stories, P positions;
requests sent: …; cache hits: …", `fairplay`'s "N stories; requests sent: …",
`subsample`'s "subsampling S stories, P positions" (and that it sends nothing),
`metrics`' "N stories -> …", and `view --export`'s "writing N pages and M endings
files" (and how many positions' endings it could not read).

The commands run in this process (`tension_run`) against in-process servers, on
real LMDB caches."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from fairplay_scripted import scripted, story_record, write_jsonl  # tests/

from tension.cache.store import DBS
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer

_SCORED = re.compile(r"^(\d+) stories \((\d+) skipped by the word filter\), (\d+) positions; requests sent: (\d+) "
                     r"generation, (\d+) judge, (\d+) tokenize; cache hits: (.*)$", re.M)
_EXPORT = re.compile(r"^writing (\d+) pages \(([\d.]+) MB\) and (\d+) endings files \(([\d.]+) MB\) to (.+)/$", re.M)


def _scored(stdout: str) -> dict:
    m = _SCORED.search(stdout)
    assert m, stdout
    hits = {db: int(n) for n, db in (part.split() for part in m.group(7).split(", "))}
    return {"stories": int(m.group(1)), "skipped": int(m.group(2)), "positions": int(m.group(3)),
            "generation": int(m.group(4)), "judge": int(m.group(5)), "tokenize": int(m.group(6)), "hits": hits}


def _sent(srv: InProcessServer) -> dict[str, int]:
    return {"generation": srv.count(kind="generation"), "judge": srv.count(kind="judge"),
            "tokenize": srv.count(path="/tokenize")}


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def _score(tension_run, corpus: Path, out: Path, cache: Path, url: str, endings: str = "6"):
    done = tension_run("score", corpus, "--out", out, "--cache", cache, "--base-url", url, "--model", "test-gen",
                       "--endings", endings, "--seed", "1", "--no-progress", "--no-report")
    assert done.returncode == 0, done.stderr
    return done


def test_score_counts_are_what_the_server_received_and_a_rerun_reads_back(tmp_path, tension_run, lmdb_records):
    """The first run's "requests sent" are the requests the server answered, its
    stories and positions the rows and lines it wrote; every answer it was sent is
    one record of the cache (by LMDB's own count); the rerun sends nothing and its
    "cache hits" are those records, each read back."""
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=3)
    cache = tmp_path / "cache"
    with InProcessServer(["test-gen"]).serving() as srv:
        first = _scored(_score(tension_run, corpus, tmp_path / "a", cache, srv.base_url).stdout)
        sent = _sent(srv)
        assert {k: first[k] for k in sent} == sent
        assert first["stories"] == 3 and first["skipped"] == 0
        assert first["positions"] == _lines(tmp_path / "a" / "positions.jsonl")
        with (tmp_path / "a" / "stories.csv").open() as f:
            assert len(list(csv.DictReader(f))) == first["stories"]
        assert first["hits"] == dict.fromkeys(DBS, 0)
        stored = {db: len(v) for db, v in lmdb_records(cache).items()}
        assert stored["endings"] == first["generation"] == first["positions"]  # one request a position
        assert stored["verdicts"] == first["judge"]
        again = _scored(_score(tension_run, corpus, tmp_path / "b", cache, srv.base_url).stdout)
        assert _sent(srv) == sent  # not one request more
    assert (again["generation"], again["judge"], again["tokenize"]) == (0, 0, 0)
    assert again["hits"] == stored, (again["hits"], stored)
    run = json.loads((tmp_path / "b" / "run.json").read_text())
    assert run["cache"]["hits"] == again["hits"] and run["cache"]["misses"] == dict.fromkeys(DBS, 0)
    assert (tmp_path / "b" / "positions.jsonl").read_bytes() == (tmp_path / "a" / "positions.jsonl").read_bytes()


def test_fairplay_counts_are_what_the_server_received_and_a_rerun_reads_back(tmp_path, tension_run):
    stories = write_jsonl(tmp_path / "s.jsonl", [story_record("s1", generator=False),
                                                  story_record("s2", generator=False)])
    srv = InProcessServer(["test-judge"])
    srv.respond(scripted)
    said = re.compile(r"^(\d+) stories; requests sent: (\d+) reader, (\d+) generation, (\d+) judge; cache hits: "
                      r"(.*)$", re.M)

    def fairplay(out: str) -> tuple[int, ...]:
        done = tension_run("fairplay", stories, "--out", tmp_path / out, "--reader-base-url", srv.base_url,
                           "--reader-model", "test-judge", "--cache", tmp_path / "cache", "--readers",
                           "gullible,experienced", "--no-progress", "--resamples", "50")
        assert done.returncode == 0, done.stdout + done.stderr
        m = said.search(done.stdout)
        assert m, done.stdout
        hits = sum(int(part.split()[0]) for part in m.group(5).split(", "))
        return int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), hits

    with srv.serving():
        first = fairplay("a")
        asked = srv.count(path="/v1/chat/completions")
        assert first[0] == 2 and _lines(tmp_path / "a" / "readers.jsonl") == 2
        assert sum(first[1:4]) == asked and first[1] > 0 and first[4] == 0
        again = fairplay("b")
        assert srv.count(path="/v1/chat/completions") == asked  # not one request more
    assert again[1:4] == (0, 0, 0) and again[4] == asked  # each answer read back from the cache
    assert (tmp_path / "b" / "readers.jsonl").read_bytes() == (tmp_path / "a" / "readers.jsonl").read_bytes()


def test_subsample_and_metrics_count_the_stories_and_positions_they_read_and_send_nothing(tmp_path, tension_run):
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=3)
    with InProcessServer(["test-gen"]).serving() as srv:
        _score(tension_run, corpus, tmp_path / "a", tmp_path / "cache", srv.base_url)
        asked = len(srv.requests)
        sub = tension_run("subsample", tmp_path / "a", "--ks", "2,4")
        assert sub.returncode == 0, sub.stderr
        assert len(srv.requests) == asked  # "no request is sent": the run's own cached verdicts
    positions = _lines(tmp_path / "a" / "positions.jsonl")
    assert f"subsampling 3 stories, {positions} positions, up to 6 endings each" in sub.stdout, sub.stdout
    metrics = tension_run("metrics", tmp_path / "a" / "positions.jsonl", "--out", tmp_path / "m")
    assert metrics.returncode == 0, metrics.stderr
    assert f"3 stories -> {tmp_path / 'm'}/stories.csv" in metrics.stdout
    with (tmp_path / "m" / "stories.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 3


def test_view_export_counts_the_files_it_writes(tmp_path, tension_run):
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=3)
    with InProcessServer(["test-gen"]).serving() as srv:
        _score(tension_run, corpus, tmp_path / "a", tmp_path / "cache", srv.base_url, endings="4")
    done = tension_run("view", tmp_path / "a", "--export", tmp_path / "x", "--endings")
    assert done.returncode == 0, done.stderr
    m = _EXPORT.search(done.stdout)
    assert m, done.stdout
    files = [p for p in (tmp_path / "x").rglob("*") if p.is_file()]
    endings = [p for p in files if p.parent.name == "endings"]
    assert int(m.group(3)) == len(endings) == 3  # one a story
    assert int(m.group(1)) == len(files) - len(endings)
    assert float(m.group(2)) == round(sum(p.stat().st_size for p in files if p not in endings) / 1e6, 1)
    assert float(m.group(4)) == round(sum(p.stat().st_size for p in endings) / 1e6, 1)


def test_view_export_endings_says_how_many_positions_endings_the_cache_no_longer_holds(tmp_path, tension_run):
    """Two runs on one cache (stories 0–1, then 0–2); the first run's endings dropped:
    the export of the second holds the endings of 29 positions of 95. It said "writing
    … 3 endings files", rc 0, with no word of the 66 positions whose endings are not in
    it; now it says how many, in which stories and why, and exits 1 (something asked
    for is missing), the export written with what could be read."""
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=3)
    (tmp_path / "c2.jsonl").write_text("".join(corpus.read_text().splitlines(keepends=True)[:2]))
    cache = tmp_path / "cache"
    with InProcessServer(["test-gen"]).serving() as srv:
        _score(tension_run, tmp_path / "c2.jsonl", tmp_path / "a", cache, srv.base_url, endings="4")
        _score(tension_run, corpus, tmp_path / "b", cache, srv.base_url, endings="4")
    dropped = tension_run("cache", "drop", "--run", tmp_path / "a", "--role", "generation", "--yes")
    assert dropped.returncode == 0, dropped.stderr
    lost = _lines(tmp_path / "a" / "positions.jsonl")
    done = tension_run("view", tmp_path / "b", "--export", tmp_path / "x", "--endings")
    assert done.returncode == 1, done.stdout + done.stderr
    said = next((line for line in done.stderr.splitlines() if line.startswith("error: ")), done.stderr)
    total = _lines(tmp_path / "b" / "positions.jsonl")
    assert f"error: {lost} of {total} positions' endings could not be read, in 2 stories: " in said, said
    for line in (tmp_path / "c2.jsonl").read_text().splitlines():  # the stories of the dropped run, each counted
        sid = json.loads(line)["id"]
        n = sum(json.loads(p)["id"] == sid for p in (tmp_path / "a" / "positions.jsonl").read_text().splitlines())
        assert f"{sid!r} ({n})" in said, said
    assert "the endings of this position are not in the cache" in said
    assert f"the other {total - lost} positions' endings" in said
    m = _EXPORT.search(done.stdout)
    assert m and int(m.group(3)) == 3 == len(list((tmp_path / "x").rglob("endings/*.js")))  # written all the same
