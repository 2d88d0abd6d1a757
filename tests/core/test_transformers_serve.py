"""Hugging Face's real `transformers serve` (5.25, CPU) serving the bundled model (issue 61;
section 1 of ../shared/reviews/external-servers-2026-12-07.md), installed once into the user
cache by tension.testing.transformers_serve (slow: .ci/run's step 3). It drops `n` (one
choice per request), has no /tokenize (the model folder's tokenizer.json counts), answers
422 to fields OpenAI's API does not have, and decodes greedily unless the model's
generation_config.json sets `do_sample`, whatever the request's temperature. Two model
folders: `smollm2` as shipped (greedy) and `smollm2-sample` (`"do_sample": true`, the
operator's fix). At 2–12 tokens/s on 2 shared cores, the review's small settings: 3
endings of 20 tokens at the positions past 85 % of the story (one, in the embedded story).

Requests are counted twice: by the tool (run.json `http`) and by the server's own
access log (uvicorn's line for each HTTP request it answered).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tension.testing.corpus import EMBEDDED_STORY as STORY
from tension.testing.foreign_procs import access_log
from tension.testing.llamacpp import real_cache
from tension.testing.transformers_serve import GREEDY, SAMPLE, Served, serve

pytestmark = pytest.mark.slow

ENDINGS = 3
SMALL = ["--endings", str(ENDINGS), "--max-tokens", "20", "--pct-min", "0.85", "--min-words", "100",
         "--timeout", "600", "--no-progress"]


def _served(model: str, log: Path) -> Iterator[Served]:
    """`serve(model)` with everything it resolves taken from the real cache (the one install
    and its model folders), then the test's private home back (serve resolves its paths
    before it yields)."""
    with contextlib.ExitStack() as cache:
        cache.enter_context(real_cache())
        with serve(model, log=log) as s:
            cache.close()
            yield s


@pytest.fixture
def sampling(tmp_path):
    yield from _served(SAMPLE, tmp_path / "serve-sample.log")


@pytest.fixture
def greedy(tmp_path):
    yield from _served(GREEDY, tmp_path / "serve-greedy.log")


def _requests(s: Served, path: str | None = None) -> list[tuple[str, str, int]]:
    """The HTTP requests the server answered so far, from its access log: (method, path, status)."""
    return [r for r in access_log(s.log) if path is None or r[1] == path]


def _story(tmp_path: Path) -> Path:
    p = tmp_path / "story.jsonl"
    p.write_text(json.dumps({"id": "baker", "text": STORY}) + "\n")
    return p


def _score(tension_run, s: Served, tmp_path: Path, out: str, *extra: str):
    return tension_run("score", _story(tmp_path), "--out", tmp_path / out, "--base-url", s.url, "--model", s.model,
                       "--tokenizer", s.model_dir / "tokenizer.json", "--cache", tmp_path / "cache", *SMALL, *extra)


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_score_on_the_sampling_model_and_its_cached_rerun(sampling, tmp_path, tension_run):
    """(a) The operator's fix: `score` completes, each position's endings differ, and the
    cached rerun sends no request (by the tool's count and the server's) and writes the
    same bytes."""
    ready = len(_requests(sampling))  # serve()'s own look at /v1/models
    first = _score(tension_run, sampling, tmp_path, "a", "--seed", "1", "--save-texts")
    assert first.returncode == 0, first.stderr
    assert "endings_identical" not in first.stderr and "decodes greedily" not in first.stderr
    rows = _lines(tmp_path / "a" / "positions.jsonl")
    assert rows and all(r["n_endings"] == ENDINGS for r in rows)
    texts = _lines(tmp_path / "a" / "texts.jsonl")
    assert texts
    for t in texts:
        endings = t["endings"]
        assert len(endings) == ENDINGS and len(set(endings)) > 1, endings  # sampled, not one greedy text

    rec = json.loads((tmp_path / "a" / "run.json").read_text())
    (server,) = rec["servers"]
    assert server["kind"] == "other" and server["max_n"] == 1  # it drops n: one ending per request, learned
    chats = _requests(sampling, "/v1/chat/completions")
    # every ending and every verdict is a request of its own, and so is each of the seed probe's
    # (issue 61 M4: whether a seeded answer holds, asked once before the first seeded ending; served one
    # request at a time, its seeds hold); all of them 200
    probes = server["probe_requests"]
    assert server["seeds"] == "held" and probes == 3, server
    assert len(chats) == len(rows) * ENDINGS * 2 + probes and {c[2] for c in chats} == {200}, (chats, rec["requests"])
    # the tool's count is the server's: the verdicts, the endings and one look at /v1/models (the probe's
    # requests are in no count of the run's: run.json `servers[].probe_requests` alone)
    assert rec["http"]["attempts"] == len(_requests(sampling)) - ready - probes, (rec["http"], _requests(sampling))

    before = _requests(sampling)
    again = _score(tension_run, sampling, tmp_path, "b", "--seed", "1", "--save-texts")
    assert again.returncode == 0, again.stderr
    assert _requests(sampling) == before  # the server saw nothing
    assert json.loads((tmp_path / "b" / "run.json").read_text())["http"]["attempts"] == 0
    for name in ("positions.jsonl", "texts.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_a_default_like_score_on_the_greedy_model_stops_at_the_first_position(greedy, tmp_path, tension_run):
    """(b) H1: the model as shipped decodes greedily whatever the temperature. A run with the
    defaults (temperature 1.2, unseeded) on the small settings stops once the first
    position's endings are in, before they are judged, saying what fixes it (`do_sample`)."""
    ready = len(_requests(greedy))
    r = _score(tension_run, greedy, tmp_path, "g")
    err = r.stderr
    assert r.returncode != 0, err
    assert "greedily" in err and "do_sample" in err, err
    rec = json.loads((tmp_path / "g" / "run.json").read_text())
    assert rec["status"] == "failed" and rec["positions"] == 0
    assert rec["requests"]["judge"] == 0  # stopped before the copies were judged
    # the endings of the positions in flight at most (here one position's), by both counts
    chats = _requests(greedy, "/v1/chat/completions")
    assert 2 <= len(chats) <= 3 * ENDINGS and rec["servers"][0]["probe_requests"] == 0, (chats, rec["requests"])
    assert rec["http"]["attempts"] == len(_requests(greedy)) - ready, (rec["http"], _requests(greedy))


def test_generate_with_defaults_gets_the_422_on_min_p(greedy, tmp_path, tension_run):
    """(c) M2: `generate` sends vLLM's `min_p` (0.1) by default, which the server refuses with a
    422 "Unexpected fields"; the tool stops at once, quotes the server's reason and names the
    flag that leaves the field out (`--min-p 0`: dropping the papers' min_p samples another
    distribution, so it is the user's choice, not a fallback)."""
    ideas = tmp_path / "ideas.jsonl"
    ideas.write_text(json.dumps({"id": "ferry", "idea": "A ferry that crosses a river nobody can see."}) + "\n")
    r = tension_run("generate", ideas, "--out", tmp_path / "stories.jsonl", "--base-url", greedy.url, "--model",
                    greedy.model, "--cache", tmp_path / "cache", "--no-progress")
    assert r.returncode != 0, r.stderr
    assert "422" in r.stderr and "min_p" in r.stderr and "--min-p 0" in r.stderr, r.stderr
    chats = _requests(greedy, "/v1/chat/completions")
    assert len(chats) == 1 and chats[0][2] == 422, chats  # one request, not retried


def test_a_judge_constraint_it_refuses_falls_back_to_the_papers_free_answers(sampling, tmp_path, tension_run):
    """(d) M2: `--judge-constraint choice` sends vLLM's `structured_outputs`, which it refuses (422);
    the judge falls back to free answers read as the paper reads them, says so once, records
    the constraint used, and the run completes; a rerun with `--judge-constraint none` finds
    every verdict in the cache (the fallback's requests are the unconstrained ones)."""
    r = _score(tension_run, sampling, tmp_path, "c", "--seed", "2", "--judge-constraint", "choice")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("structured_outputs") >= 1 and "free answers" in r.stderr, r.stderr
    rec = json.loads((tmp_path / "c" / "run.json").read_text())
    assert rec["judge_constraint_used"] == "none", rec.get("judge_constraint_used")
    rows = _lines(tmp_path / "c" / "positions.jsonl")
    assert rows and all(r["n_endings"] == ENDINGS for r in rows)
    refused = [c for c in _requests(sampling, "/v1/chat/completions") if c[2] == 422]
    assert len(refused) == 1, refused  # refused once, then never sent again
    before = _requests(sampling)
    again = _score(tension_run, sampling, tmp_path, "n", "--seed", "2", "--judge-constraint", "none")
    assert again.returncode == 0, again.stderr
    assert _requests(sampling) == before
    assert (tmp_path / "c" / "positions.jsonl").read_bytes() == (tmp_path / "n" / "positions.jsonl").read_bytes()
