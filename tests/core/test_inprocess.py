"""Pipelines driven in process (tests/testing/inprocess.py) through the API: the
whole run, from the settings to the outputs, with the transport the only part
replaced (a server `serving` is reached by its base URL)."""

from __future__ import annotations

import json
from pathlib import Path

import tension
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer

CHAT = "/v1/chat/completions"


def _cfg(server: InProcessServer, tmp_path: Path, **kw):
    base = {"base_url": server.base_url, "model": "gen", "judge_model": "judge",
            "cache": str(tmp_path / "cache"), "endings": 4, "progress": False, "seed": 5, "report": False}
    base.update(kw)
    return base  # the API's keywords


def test_score_runs_in_process_and_its_rerun_sends_nothing(tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2)
    server = InProcessServer(models=["gen", "judge"])
    with server.serving():
        s = tension.score(corpus, out=tmp_path / "a", **_cfg(server, tmp_path)).summary
    assert s.status == "complete" and s.exit_status == 0 and s.positions > 0
    # the engine's counts are what the server saw
    assert server.count(CHAT) == s.requests["generation"] + s.requests["judge"]
    assert s.requests["generation"] == s.positions
    lines = [json.loads(x) for x in (tmp_path / "a" / "positions.jsonl").read_text().splitlines()]
    assert len(lines) == s.positions and all(len(x["endings_key"]) > 0 and x["judged_key"] for x in lines)
    record = json.loads((tmp_path / "a" / "run.json").read_text())
    assert record["command"] == "score" and record["requests"] == s.requests
    assert record["usage_this_run"]["requests"] == server.count(CHAT)

    again = InProcessServer(models=["gen", "judge"])
    with again.serving():
        r = tension.score(corpus, out=tmp_path / "b", **_cfg(again, tmp_path)).summary
    assert r.status == "complete" and again.count(CHAT) == 0 and again.count("/tokenize") == 0
    assert (tmp_path / "b" / "positions.jsonl").read_bytes() == (tmp_path / "a" / "positions.jsonl").read_bytes()
    assert r.cache_hits["endings"] == s.positions


def test_a_server_error_mid_run_is_retried_and_changes_no_output(tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    with InProcessServer(models=["gen", "judge"]).serving() as server:
        clean = tension.score(corpus, out=tmp_path / "a", **_cfg(server, tmp_path, cache=str(tmp_path / "c1"))).summary
    faulty = InProcessServer(models=["gen", "judge"])
    faulty.fail_next(503, times=2)
    with faulty.serving():
        s = tension.score(corpus, out=tmp_path / "b", **_cfg(faulty, tmp_path, cache=str(tmp_path / "c2"),
                                                             retries=4)).summary
    assert s.status == clean.status == "complete"
    assert (tmp_path / "b" / "positions.jsonl").read_bytes() == (tmp_path / "a" / "positions.jsonl").read_bytes()
    assert json.loads((tmp_path / "b" / "run.json").read_text())["http"]["retries"] == 2


def test_an_unknown_model_is_a_usage_error_before_any_chat_request(tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    server = InProcessServer(models=["other"])
    try:
        with server.serving():
            tension.score(corpus, out=tmp_path / "a", **_cfg(server, tmp_path))
    except Exception as e:  # the CLI maps it to exit 2
        assert "gen" in str(e) and "other" in str(e)
    else:
        raise AssertionError("expected a usage error")
    assert server.count(CHAT) == 0


def test_generate_runs_in_process(tmp_path):
    ideas = tmp_path / "ideas.jsonl"
    ideas.write_text(json.dumps({"id": "i1", "idea": "A keeper finds a letter."}) + "\n")
    server = InProcessServer(models=["gen"])
    # the fake model's rules are the HTTP server's: a story prompt is scripted (tests/core/test_generate.py)
    server.script("Write the story now.", "The keeper read the letter twice and then burned it.")
    with server.serving():
        s = tension.generate(ideas, out=tmp_path / "s.jsonl", base_url=server.base_url, model="gen", mode="vanilla",
                             cache=str(tmp_path / "cache"), progress=False, min_chars=10).summary
    assert s.status == "complete" and s.stories == 1 and s.requests == {"generation": server.count(CHAT)}
    record = json.loads((tmp_path / "s.run.json").read_text())
    assert record["command"] == "generate" and record["models"] == {"generation": "gen"}


def test_the_cli_runs_in_process_against_a_served_server_and_other_roots_go_over_http(tmp_path, capsys):
    """`main([...])` takes no transport: a server `serving` is reached by its base URL
    (core/llm/transport.py `served_in_process`), here the generation server, while the
    judge's root, not served in process, is the loopback server over HTTP."""
    from tension.core.cli import main
    from tension.testing.openai_server import LoopbackServer

    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    with InProcessServer(models=["gen"]).serving() as gen, LoopbackServer(model=["judge"]) as judge:
        rc = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", gen.base_url, "--model", "gen",
                   "--judge-base-url", judge.base_url, "--judge-model", "judge", "--endings", "4",
                   "--cache", str(tmp_path / "cache"), "--no-progress", "--no-report"])
        assert rc == 0, capsys.readouterr().err
        record = json.loads((tmp_path / "out" / "run.json").read_text())
        assert gen.count(CHAT) == record["requests"]["generation"] > 0 and gen.count("/tokenize") > 0
        assert judge.count(CHAT) == record["requests"]["judge"] > 0
        assert gen.count(kind="judge") == 0 and judge.count(kind="generation") == 0
    # outside `serving`, its root is a host like any other: a client made now sends over HTTP
    from tension.core.llm.transport import AiohttpTransport, default_transport

    assert isinstance(default_transport(connect=1, request=1), AiohttpTransport)


def test_one_root_is_served_in_process_by_one_server_at_a_time():
    server = InProcessServer(models=["gen"])
    with server.serving():
        try:
            with server.serving():
                pass
        except RuntimeError as e:
            assert server.base_url in str(e)
        else:
            raise AssertionError("expected a RuntimeError")
    assert InProcessServer().base_url != server.base_url
