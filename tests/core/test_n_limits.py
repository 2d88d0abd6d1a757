"""`n` limits as a class (issue 35): a server that refuses a request of n > 1, in
any wording that names n and its bound (llama.cpp's, OpenAI's, one the code never
saw), or in a wording that names neither while a smaller n is answered, is asked
in smaller chunks: learned within a handful of refusals per server, said once,
recorded in run.json, and shared by `score`, `bench` (streamed too) and the rest.
Before, only llama.cpp's wording was read, so at the default 100 endings every
request was a 400; and `bench` did not chunk at all (H2 of
../shared/reviews/external-servers-2026-12-02.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.core.llm.choices import N_PROBES
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer
from tension.testing.openai_server import CHAT_PATH

# the answers, not the wire: a refusal's status and wording are the answer model's
# (tension.testing.answers), the same over HTTP (test_answer_model.py)
pytestmark = pytest.mark.in_process

LIMIT = 8
# The wordings a server may refuse n above its limit with ({max_n}, {n} filled in by the test server).
WORDINGS = {
    "openai": "Invalid 'n': integer above maximum value. Expected a value <= {max_n}, but got {n} instead.",
    "never seen": "parameter n={n} exceeds this deployment's ceiling ({max_n} completions per call)",
    "no number": "the request asks for more completions than this deployment serves at once",
}
# A wording with no number is found by halving 100: 50, 25, 12, 6 answered.
LEARNED = {"openai": LIMIT, "never seen": LIMIT, "no number": 6}


def _server(wording: str) -> InProcessServer:
    return InProcessServer(model="test-gen", max_n=LIMIT, n_refusal=WORDINGS[wording])


def _score(base_url: str, corpus, out, cache) -> int:
    return main(["score", str(corpus), "--out", str(out), "--base-url", base_url, "--model", "test-gen",
                 "--cache", str(cache), "--seed", "7", "--no-progress", "--save-texts"])


@pytest.fixture(scope="module")
def want(tmp_path_factory) -> tuple[Path, Path]:
    """(corpus, run folder): the default 100 endings on a server that takes any n, the
    bytes every wording's run must give; one run for the module (it is the same for each)."""
    root = tmp_path_factory.mktemp("want")
    corpus = make_corpus(root / "c.jsonl", 2, seed=3)  # the `corpus` fixture's stories
    with pytest.MonkeyPatch.context() as m, InProcessServer(model="test-gen").serving() as srv:
        m.setenv("HOME", str(root / "home"))  # a module fixture runs outside the test's own home
        m.setenv("XDG_CACHE_HOME", str(root / "home" / ".cache"))
        assert _score(srv.base_url, corpus, root / "want", root / "cache-want") == 0
    return corpus, root / "want"


@pytest.mark.parametrize("wording", list(WORDINGS))
def test_score_with_default_endings_completes_on_a_server_that_refuses_n_in_any_wording(
        tmp_path, want, capsys, wording):
    """The default 100 endings on a server taking 8 a request: the run completes, with
    the bytes a vLLM-flavoured server gives (chunks seeded seed + offset), the limit
    said once and in run.json, and the 400s bounded per server, not per request."""
    corpus, wanted = want
    with _server(wording).serving() as srv:
        got = _score(srv.base_url, corpus, tmp_path / "got", tmp_path / "cache-got")
        gens = [r for r in srv.requests if r.path == CHAT_PATH and r.kind == "generation"]
    err = capsys.readouterr().err
    assert got == 0, err
    for f in ("positions.jsonl", "texts.jsonl"):
        assert (wanted / f).read_bytes() == (tmp_path / "got" / f).read_bytes(), f
    learned = LEARNED[wording]
    assert err.count(f"answers at most {learned} choice(s) per request") == 1
    (server,) = json.loads((tmp_path / "got" / "run.json").read_text())["servers"]
    assert server["max_n"] == learned and server["max_n_from"].startswith("HTTP 400")
    refused = [r.body["n"] for r in gens if r.status == 400]
    positions = len((tmp_path / "got" / "positions.jsonl").read_text().splitlines())
    # requests sent at 100 before the first refusal came back are each refused once; past those, a handful
    assert refused.count(100) <= positions and len([n for n in refused if n < 100]) <= N_PROBES
    assert all(r.body["n"] <= learned for r in gens if r.status == 200)


def test_a_400_that_a_smaller_n_gets_too_is_the_requests_own_and_teaches_nothing(tmp_path, corpus, capsys):
    """A content filter's 400 is not an n limit: asked smaller down to n = 1, then the
    request's error, with nothing learned, and the server's other requests unharmed."""
    with InProcessServer(model="test-gen", refuse="Ines").serving() as srv:
        got = _score(srv.base_url, corpus, tmp_path / "out", tmp_path / "cache")
        refused = [r for r in srv.requests if r.path == CHAT_PATH and r.status == 400]
    err = capsys.readouterr().err
    assert got != 0 and "content filter" in err and "answers at most" not in err
    smaller = [r for r in refused if r.kind == "generation" and r.body["n"] < 100]
    assert 0 < len(smaller) <= 2 * N_PROBES  # per server (each search ends at n = 1), not 7 halvings a request
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert all(s["max_n"] is None for s in run["servers"])


@pytest.mark.parametrize("wording", ["openai", "never seen"])
def test_bench_and_estimate_with_default_endings_complete_on_a_server_that_refuses_n(tmp_path, corpus, capsys,
                                                                                     wording):
    """H2: bench streams n in chunks of what the server takes (learned from its 400),
    with the figures of a server that takes them all; estimate completes too."""
    figures = {}
    for name, srv in (("vllm", InProcessServer(model="test-gen")), ("limited", _server(wording))):
        with srv.serving():
            got = main(["bench", "--base-url", srv.base_url, "--positions", "2", "--no-variants", "--no-progress",
                        "--save", str(tmp_path / f"{name}.json")])
            assert got == 0, capsys.readouterr().err
            assert main(["estimate", str(corpus), "--base-url", srv.base_url, "--no-progress",
                         "--cache", str(tmp_path / f"cache-{name}")]) == 0
            gens = [r.body for r in srv.requests if r.path == CHAT_PATH and r.kind == "generation"
                    and r.status == 200]
        figures[name] = json.loads((tmp_path / f"{name}.json").read_text())
        if name == "limited":
            assert gens and all(b["n"] <= LIMIT and b["stream"] for b in gens)
    assert figures["limited"]["failed"] == 0
    # unseeded endings differ run to run; a chunk counted as the whole answer would be 1/12 of it
    assert figures["limited"]["mean_ending_tokens"] == pytest.approx(figures["vllm"]["mean_ending_tokens"], rel=0.2)


def test_bench_above_llamacpp_slots_streams_chunks(tmp_path, capsys):
    """H2 as measured: bench --endings 20 on a 4-slot llama.cpp server was 12 of 12
    requests refused, right after the tool said "n asked in chunks of 4"."""
    with InProcessServer(model="test-gen", dialect="llamacpp", slots=4).serving() as srv:
        got = main(["bench", "--base-url", srv.base_url, "--positions", "2", "--endings", "20", "--no-variants",
                    "--no-progress", "--save", str(tmp_path / "b.json")])
        gens = [r for r in srv.requests if r.path == CHAT_PATH and r.kind == "generation"]
    assert got == 0, capsys.readouterr().err
    assert gens and all(r.status == 200 and r.body["n"] <= 4 for r in gens)
    assert json.loads((tmp_path / "b.json").read_text())["failed"] == 0
