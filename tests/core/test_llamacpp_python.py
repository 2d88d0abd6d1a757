"""llama-cpp-python's own server (issue 35 M1, L2; ../shared/reviews/external-servers-2026-12-02.md
section 1), taught to the loopback server as `dialect="llamacpp_python"`: /v1/models
says ``owned_by: "me"``, `n` is dropped, `grammar` and `response_format` are
honoured but vLLM's `structured_outputs` ignored, and tokens are counted at
``/extras/tokenize/count`` (no /tokenize). The review measured 92 % malformed
verdicts with `--judge-constraint choice` and a run that needed `--tokenizer words`;
the server is recognised (owned_by "me" and a counter that answers), so its
constraint form and its counter are used."""

from __future__ import annotations

import json

from tension.core.cli import main
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import CHAT_PATH, COUNT_PATH, LoopbackServer


def _score(srv: LoopbackServer, tmp_path, name: str, *extra: str) -> int:
    corpus = tmp_path / "c.jsonl"
    if not corpus.exists():
        make_corpus(corpus, 2, seed=3)
    return main(["score", str(corpus), "--out", str(tmp_path / name), "--base-url", srv.base_url,
                 "--cache", str(tmp_path / f"cache-{name}"), "--endings", "4", "--seed", "7", "--no-progress",
                 "--no-report", *extra])


def test_llamacpp_python_is_recognised_its_grammar_and_token_counter_used(tmp_path, capsys):
    """The default tokenizer (the server's) and `--judge-constraint choice` on a model
    that answers free text unconstrained (malformed_rate 0.6): the run completes with
    no malformed verdict, every judge request carries its grammar, the tokens are
    counted by its counter, and what it is is said once (run.json `servers`)."""
    with LoopbackServer(model="test-gen", dialect="llamacpp_python", malformed_rate=0.6) as srv:
        rc = _score(srv, tmp_path, "py", "--judge-constraint", "choice")
        judges = [r.body for r in srv.requests if r.path == CHAT_PATH and r.kind == "judge"]
        gens = [r.body for r in srv.requests if r.path == CHAT_PATH and r.kind == "generation"]
        counted, tokenize = srv.count(path=COUNT_PATH), srv.count(path="/tokenize")
    err = capsys.readouterr().err
    assert rc == 0, err
    assert judges and all(b.get("grammar") == 'root ::= "Y" | "N"' and "structured_outputs" not in b
                          for b in judges)
    positions = [json.loads(line) for line in (tmp_path / "py" / "positions.jsonl").read_text().splitlines()]
    assert positions and sum(p["n_malformed"] for p in positions) == 0
    assert counted > 0 and tokenize == 0
    assert gens and all(b.get("n", 1) == 1 for b in gens)  # it drops n: asked one at a time from the start
    (server,) = json.loads((tmp_path / "py" / "run.json").read_text())["servers"]
    assert (server["kind"], server["tokenize"], server["constraint"], server["max_n"]) == (
        "llamacpp_python", "count", "grammar", 1)
    assert err.count(f"{srv.base_url} is llama-cpp-python's server") == 1, err
    assert "neither vLLM nor llama.cpp" not in err and "--tokenizer" not in err


def test_a_path_model_id_on_llamacpp_python_names_its_own_flag(tmp_path, capsys):
    """L2: the way out is the server's own flag, `--model_alias`, not llama-server's `--alias`."""
    path = "/home/someone/models/smollm2.gguf"
    with LoopbackServer(model=path, dialect="llamacpp_python") as srv:
        rc = _score(srv, tmp_path, "alias")
    err = capsys.readouterr().err
    assert rc == 0, err
    assert err.count("the model id is a file path") == 1
    assert "--model_alias NAME" in err and "--alias NAME" not in err and "llama-server" not in err


def test_a_server_that_says_owned_by_me_without_the_counter_is_another_server(tmp_path, capsys):
    """owned_by "me" alone is not enough (any server may say it): without a counter
    that answers, it stays `other` and /tokenize is asked as before."""
    with LoopbackServer(model="test-gen", owned_by="me") as srv:
        rc = _score(srv, tmp_path, "me")
        counted = sum(1 for r in srv.requests if r.path == COUNT_PATH)
    assert rc == 0, capsys.readouterr().err
    (server,) = json.loads((tmp_path / "me" / "run.json").read_text())["servers"]
    assert server["kind"] == "other" and counted == 1  # the one look that told it is not llama-cpp-python


def test_a_cached_rerun_sends_nothing_though_the_server_says_no_context_length(tmp_path, capsys):
    """Its counter never says a context length; the run kept none, so each rerun asked again
    (/v1/models, the kind probe and an empty count: found on the real server,
    tests/core/test_foreign_real_llamacpp_python.py). That it said none is kept too."""
    with LoopbackServer(model="test-gen", dialect="llamacpp_python") as srv:
        assert _score(srv, tmp_path, "a", "--model", "test-gen") == 0
        first = len(srv.requests)
        corpus = tmp_path / "c.jsonl"
        rc = main(["score", str(corpus), "--out", str(tmp_path / "b"), "--base-url", srv.base_url, "--cache",
                   str(tmp_path / "cache-a"), "--endings", "4", "--seed", "7", "--no-progress", "--no-report",
                   "--model", "test-gen"])
        again = [(r.method, r.path) for r in srv.requests[first:]]
    err = capsys.readouterr().err
    assert rc == 0, err
    assert again == [], again
    assert json.loads((tmp_path / "b" / "run.json").read_text())["http"]["attempts"] == 0
    assert (tmp_path / "a" / "positions.jsonl").read_bytes() == (tmp_path / "b" / "positions.jsonl").read_bytes()
