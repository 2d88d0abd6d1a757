"""The judge's batched path (core/llm/batch.py, issue 19): a position's judge
prompts as one /v1/completions request, on the loopback server with vLLM's extras
(`batching=True`) and without them, through `tension-run score` as a user runs it.
The requests are the subject, not the wire: the server is the test server's
in-process door (tension.testing.inprocess, the same answers, faults and records),
served for the CLI's clients in this process.

What must hold: the same verdicts, outputs, cache keys and records as one chat
request per ending; a server that cannot take it gets chat requests (`auto`) or a
clear refusal (`on`); faults on the batched request are survived like a chat
request's. The same proof on the embedded vLLM server: tests/core/test_embedded_judge_batch.py.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.testing.cache_records import verdict_records
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer
from tension.testing.openai_server import CHAT_PATH, COMPLETIONS_PATH

SCORE_FILES = ("positions.jsonl", "stories.csv", "groups.csv", "texts.jsonl")


def _score(base: str, tmp: Path, name: str, *extra: str, corpus: Path | None = None, cache: Path | None = None) -> int:
    corpus = corpus or make_corpus(tmp / "corpus.jsonl", 3, seed=11)
    return main(["score", str(corpus), "--out", str(tmp / name), "--base-url", base, "--model", "test-gen",
                 "--judge-model", "test-judge", "--endings", "6", "--seed", "5", "--save-texts", "--no-progress",
                 "--no-report", "--cache", str(cache or tmp / f"{name}.lmdb"), *extra])


def _same_outputs(a: Path, b: Path) -> None:
    for name in SCORE_FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def _verdicts(path: Path) -> dict[bytes, tuple]:
    """Every verdict record of a cache: key -> (text, finish reason, model, logprobs)."""
    return {k: (r.text, r.finish_reason, r.model, r.first_logprobs) for k, r in verdict_records(path).items()}


@contextlib.contextmanager
def _server(**knobs) -> Iterator[InProcessServer]:
    """The test server (models test-gen and test-judge) with `knobs`, in process."""
    with InProcessServer(["test-gen", "test-judge"], **knobs).serving() as srv:
        yield srv


@pytest.fixture(scope="module")
def _chat_reference(tmp_path_factory):
    """A run with one chat request per ending (the reference) on a plain server, once a module."""
    d = tmp_path_factory.mktemp("chat-reference")
    with _server() as plain:
        assert _score(plain.base_url, d, "chat", "--judge-batch", "off") == 0
        assert plain.count(kind="judge") == 522
    return d


@pytest.fixture
def pair(_chat_reference, tmp_path):
    """The reference run (its corpus, outputs and cache) copied into the test's folder."""
    shutil.copytree(_chat_reference, tmp_path, dirs_exist_ok=True)
    return tmp_path


def test_batched_run_sends_one_request_per_position_and_writes_the_same_outputs(pair, capsys):
    with _server(batching=True) as srv:
        assert _score(srv.base_url, pair, "batched") == 0
        # warm_judge: one prompt alone, then the other five together, per position (87)
        assert srv.count(path=COMPLETIONS_PATH) == 2 * 87
        assert srv.count(kind="judge") == 0
    _same_outputs(pair / "chat", pair / "batched")
    run = json.loads((pair / "batched" / "run.json").read_text())
    chat_run = json.loads((pair / "chat" / "run.json").read_text())
    assert run["judge_batch"] == {"mode": "auto", "batched": True, "why_not": None, "requests": 174, "prompts": 522}
    assert chat_run["judge_batch"]["why_not"] == "--judge-batch off"
    # the prompts are counted as the judge requests they replace; usage totals are the same
    assert run["requests"] == chat_run["requests"]
    # cached tokens are the fake's prefix cache, which sees requests in whatever order
    # the lanes deliver them: CI found the two runs a 16-token block apart
    ours, theirs = dict(run["usage_this_run"]), dict(chat_run["usage_this_run"])
    cached, chat_cached = ours.pop("cached_tokens", 0), theirs.pop("cached_tokens", 0)
    assert ours == theirs
    assert abs(cached - chat_cached) <= 0.01 * chat_cached
    assert run["http"]["attempts"] < chat_run["http"]["attempts"] - 300
    # the lane holds one slot per prompt: in flight never above --judge-concurrency
    assert run["lanes"]["judge"]["finished"] == 522
    assert "one chat request per prompt" not in capsys.readouterr().err


def test_the_cache_records_are_the_same_and_serve_either_path(pair):
    with _server(batching=True) as srv:
        assert _score(srv.base_url, pair, "batched") == 0
    assert _verdicts(pair / "batched.lmdb") == _verdicts(pair / "chat.lmdb")
    # a cache written by batches answers a chat-path rerun (and the other way round): nothing is sent
    for cache, mode in ((pair / "batched.lmdb", "off"), (pair / "chat.lmdb", "on")):
        with _server(batching=True) as srv:
            assert _score(srv.base_url, pair, f"rerun-{mode}", "--judge-batch", mode, cache=cache) == 0
            assert srv.count(path=CHAT_PATH) == srv.count(path=COMPLETIONS_PATH) == 0
        _same_outputs(pair / "chat", pair / f"rerun-{mode}")


def test_a_server_that_is_not_vllm_gets_chat_requests_without_a_probe(tmp_path, capsys):
    """Any OpenAI-compatible server (its /v1/models does not say owned_by vllm) is
    sent chat requests, as it expects, and is not asked for vLLM's endpoints."""
    with _server() as srv:
        assert _score(srv.base_url, tmp_path, "auto") == 0
        assert srv.count(kind="judge") == 522
        assert {r.path for r in srv.requests} == {CHAT_PATH, "/tokenize", "/v1/models"}
    assert "judge-batch" not in capsys.readouterr().err
    why = json.loads((tmp_path / "auto" / "run.json").read_text())["judge_batch"]
    assert why["batched"] is False and "does not say it is vLLM" in why["why_not"]


def test_a_vllm_server_that_cannot_render_its_template_gets_chat_requests_and_says_so(tmp_path, capsys):
    with _server(batching=True, serve_tokenize=False) as srv:
        assert _score(srv.base_url, tmp_path, "auto", "--tokenizer", "words") == 0
        judged = json.loads((tmp_path / "auto" / "run.json").read_text())["requests"]["judge"]
        assert srv.count(kind="judge") == judged > 500 and srv.count(path=COMPLETIONS_PATH) == 0
    err = capsys.readouterr().err
    assert err.count("note: judge: one chat request per prompt") == 1, err
    assert f"the server {srv.base_url} cannot take batched prompts" in err and "(--judge-batch auto)" in err
    why = json.loads((tmp_path / "auto" / "run.json").read_text())["judge_batch"]
    assert why["batched"] is False and "could not be rendered" in why["why_not"] and "404" in why["why_not"]


def test_judge_batch_on_refuses_a_server_that_cannot_take_it(tmp_path, capsys):
    with _server() as srv:
        rc = _score(srv.base_url, tmp_path, "on", "--judge-batch", "on")
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"--judge-batch on: the judge server {srv.base_url} cannot take batched prompts" in err
    assert "use --judge-batch auto or off" in err and "Traceback" not in err


def test_a_template_that_edits_the_text_is_found_and_the_run_uses_chat(pair, capsys):
    """The check on the first prompt: a template that changes the user text (here it
    folds blank lines) makes prefix + text + suffix differ from the chat prompt."""
    with _server(batching=True, template_quirk="newlines") as srv:
        assert _score(srv.base_url, pair, "quirk") == 0
        assert srv.count(path=COMPLETIONS_PATH) == 0 and srv.count(kind="judge") == 522
    assert "differs from the chat prompt at token" in capsys.readouterr().err
    for name in ("positions.jsonl", "stories.csv"):  # the test server's verdicts ignore the folding
        assert (pair / "quirk" / name).read_bytes() == (pair / "chat" / name).read_bytes()


@pytest.mark.parametrize("fault", ["503", "drop", "truncate", "few_choices", "empty_content"])
def test_faults_on_the_batched_request_are_survived(pair, fault):
    with _server(batching=True) as srv:
        srv.fail_next(fault, times=3, path=COMPLETIONS_PATH)
        assert _score(srv.base_url, pair, f"fault-{fault}") == 0
        assert srv.pending_faults(COMPLETIONS_PATH) == 0
    _same_outputs(pair / "chat", pair / f"fault-{fault}")
    run = json.loads((pair / f"fault-{fault}" / "run.json").read_text())
    if fault in ("few_choices", "empty_content"):  # the missing or empty prompts asked again
        assert run["http"]["followups"] == 3
    else:
        assert run["http"]["retries"] == 3


@pytest.mark.parametrize("constraint", ["choice", "logprobs"])
def test_constrained_judges_give_the_same_verdicts_batched(tmp_path, constraint):
    out = {}
    for batching in (False, True):
        with _server(batching=batching) as srv:
            name = f"{constraint}-{batching}"
            assert _score(srv.base_url, tmp_path, name, "--judge-constraint", constraint) == 0
            assert srv.count(path=COMPLETIONS_PATH) == (174 if batching else 0)
            if batching:
                body = next(r.body for r in srv.requests if r.path == COMPLETIONS_PATH)
                assert body["add_special_tokens"] is False and isinstance(body["prompt"], list)
                if constraint == "choice":
                    assert body["structured_outputs"] == {"choice": ["Y", "N"]}
                else:
                    assert body["logprobs"] == 20
        out[batching] = tmp_path / name
    _same_outputs(out[False], out[True])
    assert _verdicts(out[False].with_suffix(".lmdb")) == _verdicts(out[True].with_suffix(".lmdb"))


def test_the_prompts_are_exactly_the_chat_prompts(tmp_path):
    """Each batched prompt, read back by the server, is the chat request's messages
    rendered by its template, for the judge's template kwargs (enable_thinking off)."""
    from tension.testing.openai_server import parse_rendered, render_template

    with _server(batching=True) as srv:
        assert _score(srv.base_url, tmp_path, "b") == 0
        bodies = [r.body for r in srv.requests if r.path == COMPLETIONS_PATH]
    assert bodies
    for body in bodies:
        for prompt in body["prompt"]:
            msgs = parse_rendered(prompt)
            assert [m["role"] for m in msgs] == ["system", "user"] and "literary judge" in msgs[0]["content"]
            assert prompt == render_template(msgs, True, {"enable_thinking": False})
            assert prompt.endswith("<|assistant|>\n<think>\n\n</think>\n\n")


def test_a_probe_that_fails_costs_the_batches_not_a_story(pair, capsys):
    """The template check's /tokenize failing for good (here: 503 past the probe's two
    tries) falls back to chat requests; every story is still scored."""
    with _server(batching=True) as srv:
        srv.fail_next("503", times=2, path="/tokenize")  # the probe's first /tokenize, both tries
        assert _score(srv.base_url, pair, "probe", "--tokenizer", "words") == 0
        assert srv.count(path=COMPLETIONS_PATH) == 0 and srv.count(kind="judge") > 0
    assert "could not be rendered" in capsys.readouterr().err
    run = json.loads((pair / "probe" / "run.json").read_text())
    assert run["stories"]["failed"] == [] and run["judge_batch"]["batched"] is False
