"""H1 of ../shared/reviews/external-servers-2026-12-02.md: on a server that takes `n`
in chunks (llama.cpp's slots), nothing was cached until a position had all its
endings; the server's capacity served chunks first come first served, so every
position advanced in lockstep and none completed for ≈ 40 minutes; a stop then kept
0 of 312 generated endings while it said "completed work is in the cache".

Now a chunk is a request: each is kept as it arrives (under the key a seeded
follow-up has), so a rerun asks only for the chunks that are missing; a position
started earlier gets the server's slots before a later one, so positions complete
one after another and their lines are written as they do; and a stop says what was
kept, counted from what was written."""

from __future__ import annotations

import contextlib
import json
import re

import pytest
from sigterm import run_until_sigterm

import tension
from tension.cache import records
from tension.cache.store import Store
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer
from tension.testing.interrupt import cancel_midway
from tension.testing.openai_server import LoopbackServer

SLOTS = 4
N = 20  # endings: 5 chunks of 4 on a 4-slot llama.cpp server


@pytest.fixture
def llama():
    """`llama(**knobs)`: an in-process llama.cpp server of SLOTS slots, served for the
    test (the API reaches it by its base_url)."""
    with contextlib.ExitStack() as stack:
        yield lambda **knobs: stack.enter_context(
            InProcessServer(["test-gen", "test-judge"], dialect="llamacpp", slots=SLOTS, **knobs).serving())


def _cfg(srv, cache, **kw):
    return {"base_url": srv.base_url, "model": "test-gen", "cache": str(cache), "endings": N, "progress": False,
            "seed": 7, "report": False, **kw}  # no test here reads the report


def _gen(srv) -> list:
    return [r for r in srv.requests if r.kind == "generation"]


def _endings_records(cache) -> list[records.Endings]:
    with Store(cache, readonly=True) as st:
        return [r for _, r in st.keys("endings") if isinstance(r, records.Endings)]


def _partial(out) -> list[str]:
    path = out / "positions.partial.jsonl"
    return path.read_text().splitlines() if path.exists() else []


def test_a_stopped_run_keeps_every_chunk_and_the_rerun_asks_only_the_missing_ones(tmp_path, llama):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=4)
    srv = llama()
    clean = tension.score(corpus, out=tmp_path / "clean", **_cfg(srv, tmp_path / "clean-cache")).summary
    assert clean.status == "complete", clean.error
    total = len(_gen(srv))
    assert total == clean.positions * N // SLOTS  # every request a chunk of 4

    srv.reset_records()
    srv.delay = 0.002
    cfg = _cfg(srv, tmp_path / "cache")
    out = tmp_path / "out"
    cancel_midway(lambda: tension.score_async(corpus, out=out, **cfg),
                  lambda: len([r for r in _gen(srv) if r.status == 200]) >= total // 2)
    answered = len([r for r in _gen(srv) if r.status == 200])
    assert json.loads((out / "run.json").read_text())["status"] == "interrupted"
    # every chunk that came back is in the cache (before: none, no position had all its endings)
    chunks = [r for r in _endings_records(tmp_path / "cache") if len(r.texts) < N]
    assert len(chunks) == answered and all(len(r.texts) == SLOTS for r in chunks)
    # positions completed one after another: half the chunks are whole positions written out
    assert len(_partial(out)) >= total // 2 // (N // SLOTS) - 2

    srv.delay = 0.0
    srv.reset_records()
    resumed = tension.score(corpus, out=out, **cfg).summary
    assert resumed.status == "complete", resumed.error
    assert len(_gen(srv)) == total - answered
    for name in ("positions.jsonl", "stories.csv"):
        assert (out / name).read_bytes() == (tmp_path / "clean" / name).read_bytes(), name


def test_unseeded_chunks_are_kept_apart(tmp_path, llama):
    """Without a seed every chunk is the same request (n = 4, no seed): kept under
    one key they would be one chunk read back five times. Each is kept under its
    place in the whole request."""
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    srv = llama(delay=0.002)
    cfg = _cfg(srv, tmp_path / "cache", seed=None)
    cancel_midway(lambda: tension.score_async(corpus, out=tmp_path / "out", **cfg),
                  lambda: len([r for r in _gen(srv) if r.status == 200]) >= 8)
    answered = len([r for r in _gen(srv) if r.status == 200])
    chunks = [r for r in _endings_records(tmp_path / "cache") if len(r.texts) < N]
    assert len(chunks) == answered
    srv.reset_records()
    srv.delay = 0.0
    done = tension.score(corpus, out=tmp_path / "out", **cfg).summary
    assert done.status == "complete" and len(_gen(srv)) == done.positions * N // SLOTS - answered


def test_a_position_started_earlier_gets_the_slots_first(tmp_path, llama):
    """On 4 slots (one chunk of 4 at a time) a position's chunks go one after
    another, then its verdicts, before a later position's: positions complete in
    the order they started, at most the next one begun meanwhile. Before, first
    come first served: every position's first chunk, then every position's second,
    and none was complete until the last round."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=4)
    srv = llama()
    s = tension.score(corpus, out=tmp_path / "out", **_cfg(srv, tmp_path / "cache")).summary
    assert s.status == "complete", s.error
    prompts = [r.body["messages"][1]["content"] for r in _gen(srv)]
    started = list(dict.fromkeys(prompts))  # positions in the order their first chunk went
    last = {p: i for i, p in enumerate(prompts)}
    assert sorted(started, key=last.__getitem__) == started  # they complete in the order they started
    assert len(started) == s.positions > 4
    for i in range(len(prompts)):
        begun = {p for p in prompts[: i + 1]}
        assert len([p for p in begun if last[p] >= i]) <= 2, "more than two positions under way at once"

def test_the_stop_message_says_what_was_kept(tmp_path):
    """The CLI's stop line counts what the run wrote: positions complete, endings kept
    in chunks of positions not yet complete; never "completed work is in the cache"
    for a run that kept nothing."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=4)
    out, cache = tmp_path / "out", tmp_path / "cache"
    with LoopbackServer(model="test-gen", dialect="llamacpp", slots=SLOTS, delay=0.03) as srv:
        argv = ["score", str(corpus), "--out", str(out), "--base-url", srv.base_url, "--model", "test-gen",
                "--endings", str(N), "--cache", str(cache), "--no-progress", "--seed", "7"]
        rc, err = run_until_sigterm(argv, lambda: len([r for r in _gen(srv) if r.status == 200]) >= 13)
    assert rc == 130, err
    assert "completed work is in the cache" not in err
    m = re.search(r"(\d+) positions? complete.*?(\d+) endings in (\d+) chunks?", err, re.S)
    assert m, err
    positions, endings, chunks = map(int, m.groups())
    assert positions == len(_partial(out)) >= 1
    kept = [r for r in _endings_records(cache) if len(r.texts) < N]
    whole = [r for r in _endings_records(cache) if len(r.texts) == N]
    # the chunks of positions whose endings are not whole yet
    assert chunks == len(kept) - len(whole) * (N // SLOTS) and endings == SLOTS * chunks
    assert "Resume with the same command" in err and "score" in err.split("Resume with the same command")[1]


def test_a_stop_before_anything_completed_says_nothing_was_kept(tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    out = tmp_path / "out"
    with LoopbackServer(model="test-gen", dialect="llamacpp", slots=SLOTS, delay=5.0) as srv:
        argv = ["score", str(corpus), "--out", str(out), "--base-url", srv.base_url, "--model", "test-gen",
                "--endings", str(N), "--cache", str(tmp_path / "cache"), "--no-progress"]
        rc, err = run_until_sigterm(argv, lambda: srv.count(path="/props") >= 1 and srv.count(path="/tokenize") >= 1)
    assert rc == 130, err
    assert "completed work is in the cache" not in err
    assert "this run kept nothing" in err, err


def test_cache_drop_of_a_stopped_runs_generation_drops_its_chunks_too(tmp_path, capsys, llama):
    """The way out of a broken generation setup (`cache drop --run OUT --role
    generation`) must drop the chunks as well: else the rerun reads them back."""
    from tension.core.cli import main

    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    srv = llama(delay=0.002)
    out, cache = tmp_path / "out", tmp_path / "cache"
    cancel_midway(lambda: tension.score_async(corpus, out=out, **_cfg(srv, cache)),
                  lambda: len([r for r in _gen(srv) if r.status == 200]) >= 12)
    assert [r for r in _endings_records(cache) if len(r.texts) < N]
    assert main(["cache", "drop", "--run", str(out), "--role", "generation", "--yes", "--cache", str(cache)]) == 0
    assert _endings_records(cache) == [], capsys.readouterr()


def _stopped_between_pieces_and_record(srv, corpus, out, cache) -> None:
    """A complete run whose whole endings records are then deleted, its chunks kept: what a
    stop after a position's last chunk came back, before its whole record was written,
    leaves. The server's records start afresh."""
    first = tension.score(corpus, out=out, **_cfg(srv, cache)).summary
    assert first.status == "complete", first.error
    with Store(cache) as st:
        whole = [k for k, r in st.keys("endings") if isinstance(r, records.Endings) and len(r.texts) == N]
        st.delete_many(("endings", k) for k in whole)
    assert whole
    srv.reset_records()


def test_an_answer_whose_chunks_are_all_kept_is_no_request(tmp_path, llama):
    """A run stopped after a position's last chunk came back but before its whole record was
    written: the rerun puts the answer together from the kept chunks and sends nothing for
    it, so run.json counts no request for it (it counted one, and `requests` disagreed with
    the HTTP attempts and the server's count)."""
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    srv = llama()
    cache = tmp_path / "cache"
    _stopped_between_pieces_and_record(srv, corpus, tmp_path / "a", cache)
    again = tension.score(corpus, out=tmp_path / "b", **_cfg(srv, cache)).summary
    rec = json.loads((tmp_path / "b" / "run.json").read_text())
    assert again.status == "complete", again.error
    assert _gen(srv) == []
    assert rec["requests"].get("generation", 0) == 0, rec["requests"]
    assert (tmp_path / "a" / "positions.jsonl").read_bytes() == (tmp_path / "b" / "positions.jsonl").read_bytes()


@pytest.mark.parametrize("knobs", [{}, {"dialect": None, "max_n": 3}, {"dialect": None, "max_n": 3, "n_refusal": "n"}],
                         ids=["llama.cpp slots", "short answers", "a 400 naming no number"])
def test_a_rerun_whose_answers_are_all_kept_in_pieces_sends_nothing_at_all(tmp_path, knobs):
    """The class of the spec above seen from the server: a rerun whose every missing answer the
    cache holds in pieces sends no request at all, the servers' check (GET /v1/models, /props)
    included, so it completes with the server down, as a fully cached rerun does. The check
    ran before the pieces were looked up: the rerun of a stopped run failed after 43 s of
    retries against a stopped server, with every answer in the cache. Whatever taught the
    count the pieces were asked in (a llama.cpp server's slots, short answers, a 400) is kept
    in the cache folder, so the pieces are found before the server is asked anything."""
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    cache = tmp_path / "cache"
    with InProcessServer(["test-gen", "test-judge"], **{"dialect": "llamacpp", "slots": SLOTS, **knobs}) as srv, \
            srv.serving():
        _stopped_between_pieces_and_record(srv, corpus, tmp_path / "a", cache)
        again = tension.score(corpus, out=tmp_path / "b", **_cfg(srv, cache)).summary
        assert again.status == "complete", again.error
        assert [(r.method, r.path) for r in srv.requests] == []
        assert srv.count(probes=True) == 0
    assert (tmp_path / "a" / "positions.jsonl").read_bytes() == (tmp_path / "b" / "positions.jsonl").read_bytes()


def test_a_constrained_first_request_is_judged_by_the_kind_the_check_told(tmp_path, capsys):
    """The servers' check now waits for the first request sent; what a request says of the
    server by its kind (a constrained answer on a server that is neither vLLM nor llama.cpp)
    must wait for it too. A judge-only rerun (another judge model, every ending cached), whose
    first request is a constrained verdict, said "neither vLLM nor llama.cpp" of a vLLM server."""
    from tension.core.cli import main

    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    with InProcessServer(["test-gen", "test-judge", "test-judge2"], owned_by="vllm").serving() as srv:
        for judge in ("test-judge", "test-judge2"):
            srv.reset_records()
            rc = main(["score", str(corpus), "--base-url", srv.base_url, "--model", "test-gen", "--judge-model", judge,
                       "--endings", "3", "--cache", str(tmp_path / "cache"), "--no-progress", "--no-report",
                       "--judge-constraint", "choice", "--judge-batch", "off", "--no-warm-judge",
                       "--tokenizer", "words", "--out", str(tmp_path / judge)])
            err = capsys.readouterr().err
            assert rc == 0, err
            assert "neither vLLM nor llama.cpp" not in err, (judge, err)
        assert srv.count(kind="generation") == 0 and srv.count(kind="judge") > 0  # the rerun: verdicts alone
