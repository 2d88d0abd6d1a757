"""A server that ignores the request's sampling (issue 61 H1; docs/servers.md,
transformers serve): it decodes greedily whatever the temperature, so a default
run would spend its whole length judging n copies of one ending. The run stops
within the first position's answers, before they are judged, with the fix; the
fix it prints is a command that works; and `--extra-body` is how a user sends a
server's own switch. Every case runs the real CLI against the test server taught
that behaviour (`sampling="greedy"`: one text per generation request unless its
body's `generation_config` switches sampling on, as transformers serve reads it).
"""

from __future__ import annotations

import json
import re
import shlex

import pytest

from tension.core.pipelines.score.watch import GREEDY_PREFIX
from tension.testing.answers import classify
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer
from tension.testing.openai_server import CHAT_PATH, LoopbackServer


@pytest.fixture
def argv(tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)

    def make(url: str, *flags: str) -> list[str]:
        return ["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", url, "--model", "test-gen",
                "--endings", "4", "--seed", "1", "--cache", str(tmp_path / "cache"), "--no-progress", *flags]

    return make


def test_a_greedy_server_stops_the_run_at_its_first_position_with_the_fix(tension_run, argv):
    with LoopbackServer(model="test-gen", sampling="greedy") as srv:
        r = tension_run(*argv(srv.base_url))
        kinds = [classify(q.body["messages"]) for q in srv.requests if q.path == CHAT_PATH and q.body]
    assert r.returncode == 1, r.stderr
    err = r.stderr
    assert f"error: {GREEDY_PREFIX}: the first position's 4 endings at temperature 1.2 are one text" in err
    assert "do_sample" in err and "--extra-body '" in err and "--refresh generation" in err
    assert "rerun the same command" not in err  # it would stop again
    # stopped before the copies were judged: the positions in flight were asked for endings (the lane's
    # concurrency), and none or a position's prompts at most were judged while the run was stopping
    assert kinds.count("generation") > 0 and kinds.count("judge") <= 4, (kinds.count("generation"),
                                                                        kinds.count("judge"))


def test_the_printed_extra_body_is_a_command_that_works(tension_run, argv, tmp_path):
    """The advice, run as printed: the flag it names, added to the same command."""
    with LoopbackServer(model="test-gen", sampling="greedy") as srv:
        first = tension_run(*argv(srv.base_url))
        flag = re.search(r"(--extra-body '[^']*')", first.stderr)
        assert flag is not None, first.stderr
        again = tension_run(*argv(srv.base_url), *shlex.split(flag.group(1)))
        bodies = [q.body for q in srv.requests if q.path == CHAT_PATH and q.body and q.body.get("n", 1) > 1]
    assert again.returncode == 0, again.stderr
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert "endings_identical" not in [w["check"] for w in run.get("warnings", [])]
    sent = [b for b in bodies if "generation_config" in b]
    assert sent and all(b["generation_config"] == '{"do_sample": true}' and "extra_body" not in b for b in sent)


def test_the_printed_refresh_works_once_the_server_is_fixed(tension_run, argv):
    with LoopbackServer(model="test-gen", sampling="greedy") as srv:
        first = tension_run(*argv(srv.base_url))
    assert first.returncode == 1
    with LoopbackServer(model="test-gen") as fixed:  # the operator switched sampling on
        stuck = tension_run(*argv(fixed.base_url))  # the cache holds the copies: the same stop
        assert stuck.returncode == 1 and GREEDY_PREFIX in stuck.stderr
        again = tension_run(*argv(fixed.base_url), "--refresh", "generation")
    assert again.returncode == 0, again.stderr


def test_keep_going_scores_the_copies_and_says_so_at_the_end(tension_run, argv, tmp_path):
    with InProcessServer(["test-gen"], sampling="greedy").serving() as srv:
        r = tension_run(*argv(srv.base_url, "--keep-going"))
    assert r.returncode == 0, r.stderr
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert "endings_identical" in [w["check"] for w in run["warnings"]]


def test_a_sampling_server_is_not_stopped_and_greedy_at_temperature_0_is_no_sign(tension_run, argv):
    with InProcessServer(["test-gen"]).serving() as srv:
        assert tension_run(*argv(srv.base_url)).returncode == 0
    with InProcessServer(["test-gen"], sampling="greedy").serving() as srv:
        assert tension_run(*argv(srv.base_url, "--temperature", "0", "--refresh", "generation")).returncode == 0


@pytest.mark.parametrize(("value", "said"), [
    ('{"temperature": 1}', "temperature is set by the tool itself; use --temperature instead"),
    ("[1]", "expected a JSON object"),
    ("{nope", "expected a JSON object"),
])
def test_an_extra_body_the_tool_cannot_send_is_refused_naming_the_flag(tension_run, argv, value, said):
    r = tension_run(*argv("http://127.0.0.1:9", "--extra-body", value))  # said before any request
    assert r.returncode == 2 and r.stderr.startswith("error: extra-body: ") and said in r.stderr, r.stderr
    r = tension_run(*argv("http://127.0.0.1:9", "--judge-extra-body", value))
    assert r.returncode == 2 and r.stderr.startswith("error: judge-extra-body: ") and said in r.stderr, r.stderr


def test_an_unseeded_run_on_a_one_choice_server_is_not_taken_for_greedy(tension_run, tmp_path):
    """Unseeded, a server that gives one choice a request (llama-cpp-python drops n) is
    asked in chunks of 1, each a draw of its own: different texts, no stop; the
    same server decoding greedily gives copies, and the run stops."""
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    for sampling, code in (("seeded", 0), ("greedy", 1)):
        with InProcessServer(["test-gen"], dialect="llamacpp_python", sampling=sampling).serving() as srv:
            r = tension_run("score", str(corpus), "--out", str(tmp_path / sampling), "--base-url", srv.base_url,
                            "--model", "test-gen", "--endings", "3", "--cache", str(tmp_path / f"c-{sampling}"),
                            "--no-progress")
        assert r.returncode == code, (sampling, r.stderr)
        assert (GREEDY_PREFIX in r.stderr) == (sampling == "greedy")
