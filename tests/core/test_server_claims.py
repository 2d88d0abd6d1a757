"""Servers that say less than they seem (issue 36 items 5 and 6; review 2026-12-02
F1, F7, F10, F15, F17), on the loopback server and the real `vllm-router`:

- F17: behind the router, a worker without the batched path (/v1/completions):
  the run falls back to chat requests, names the worker, never exits 2;
- F1: several models listed and no --model: which one is used is said once;
- F7: a body that streams though `stream` was not asked: refused at once;
- F10: a Retry-After past the longest wait: the wait taken is said;
- F15: an answer naming another model than the one asked: recorded, said once.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.core.llm.client import Client
from tension.core.llm.failures import RetryPolicy
from tension.core.llm.protocol import ChatRequest
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import CHAT_PATH, COMPLETIONS_PATH, LoopbackServer

MODELS = ["test-gen", "test-judge"]
COMPARED = ("positions.jsonl", "stories.csv")


def _score(urls: str, tmp: Path, name: str, *extra: str, models: bool = True) -> int:
    corpus = tmp / "corpus.jsonl"
    if not corpus.exists():
        make_corpus(corpus, 2, seed=11)
    given = ["--model", "test-gen", "--judge-model", "test-judge"] if models else []
    return main(["score", str(corpus), "--out", str(tmp / name), "--base-url", urls, *given, "--endings", "4",
                 "--seed", "5", "--no-progress", "--no-report", "--retries", "3",
                 "--cache", str(tmp / f"{name}.lmdb"), *extra])


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The reference: one server, one chat request per ending."""
    tmp = tmp_path_factory.mktemp("clean")
    with LoopbackServer(model=MODELS) as srv:
        assert _score(srv.base_url, tmp, "clean", "--judge-batch", "off") == 0
    return tmp


def _copy_corpus(clean: Path, tmp: Path) -> None:
    (tmp / "corpus.jsonl").write_bytes((clean / "corpus.jsonl").read_bytes())


def _same_as_clean(clean: Path, tmp: Path, name: str) -> None:
    for f in COMPARED:
        assert (tmp / name / f).read_bytes() == (clean / "clean" / f).read_bytes(), f


def _router_port(tmp: Path, name: str) -> str:
    run = json.loads((tmp / name / "run.json").read_text())
    return run["replicas"]["judge"][0]["router"].rsplit(":", 1)[1]


# --- F17: a worker without the batched path behind the router ------------------------

def test_a_worker_that_is_not_vllm_behind_the_router_gets_chat_requests_and_is_named(clean, tmp_path, capsys):
    """The review's case: a vLLM-like server (batching) and one without
    /v1/completions. Checked on every worker before the first batch: the run goes
    by chat requests, names that worker, and ends as a one-server run."""
    _copy_corpus(clean, tmp_path)
    with LoopbackServer(model=MODELS, batching=True) as vllm, LoopbackServer(model=MODELS) as other:
        rc = _score(f"{vllm.base_url},{other.base_url}", tmp_path, "mixed")
        assert vllm.count(path=COMPLETIONS_PATH) == other.count(path=COMPLETIONS_PATH) == 0
    err = capsys.readouterr().err
    assert rc == 0, err
    _same_as_clean(clean, tmp_path, "mixed")
    assert err.count("one chat request per prompt") == 1, err
    assert f"the server {other.base_url} does not say it is vLLM" in err and f"unlike {vllm.base_url}" in err
    assert f"127.0.0.1:{_router_port(tmp_path, 'mixed')}" not in err


def test_a_worker_lacking_v1_completions_found_mid_run_is_named_and_the_run_goes_on_by_chat(clean, tmp_path, capsys):
    """A worker that renders the template but has no /v1/completions (HTTP 404):
    found when a batch lands on it; the rest of the run goes by chat, said once,
    naming the worker, not the router's private port; exit 0, the clean verdicts."""
    _copy_corpus(clean, tmp_path)
    with (LoopbackServer(model=MODELS, batching=True) as good,
          LoopbackServer(model=MODELS, batching=True, serve_completions=False) as lacking):
        rc = _score(f"{good.base_url},{lacking.base_url}", tmp_path, "mid")
        refused = sum(1 for r in lacking.requests if r.path == COMPLETIONS_PATH and r.status == 404)
    err = capsys.readouterr().err
    assert rc == 0, err
    _same_as_clean(clean, tmp_path, "mid")
    assert refused >= 1
    assert err.count("one chat request per prompt from now on") == 1, err
    assert f"the judge server {lacking.base_url} has no /v1/completions" in err
    assert f"127.0.0.1:{_router_port(tmp_path, 'mid')}" not in err
    run = json.loads((tmp_path / "mid" / "run.json").read_text())
    assert run["status"] == "complete" and "has no /v1/completions" in run["judge_batch"]["why_not"]


# --- F1: several models listed, no --model -----------------------------------------

def test_several_models_listed_and_no_model_given_says_which_is_used_once(tmp_path, capsys):
    with LoopbackServer(model=["alpha", "stub", "omega"]) as srv:
        rc = _score(srv.base_url, tmp_path, "pick", models=False)
    err = capsys.readouterr().err
    assert rc == 0, err
    said = f"--model not given: the generation uses model alpha, the first of the 3 models {srv.base_url} " \
           "lists (alpha, stub, omega); pass --model to choose"
    assert err.count(said) == 1, err
    assert err.count("not given:") == 1  # the judge on the same server takes the generation model
    run = json.loads((tmp_path / "pick" / "run.json").read_text())
    assert run["models"] == {"generation": "alpha", "judge": "alpha"}
    server = next(s for s in run["servers"] if s["url"] == srv.base_url)
    assert server["default_model"] == "alpha" and server["models"] == ["alpha", "stub", "omega"]


def test_one_model_listed_needs_no_word(tmp_path, capsys):
    with LoopbackServer(model="solo") as srv:
        assert _score(srv.base_url, tmp_path, "solo", models=False) == 0
    assert "not given:" not in capsys.readouterr().err


# --- F7: a stream that was not asked for ---------------------------------------------

def test_a_server_that_streams_unasked_is_refused_at_once_with_the_reason(tmp_path, capsys):
    """No retry reads a stream: the first such answer stops the run (exit 2, the URL
    must change), saying what came and what to do, instead of 8 attempts over 37 s."""
    with LoopbackServer(model=MODELS, stream_always=True) as srv:
        rc = _score(srv.base_url, tmp_path, "sse")
        streamed = srv.count(path=CHAT_PATH)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "server-sent event stream" in err and "did not ask to stream" in err and "Traceback" not in err
    assert "gave up after" not in err and "retrying" not in err
    run = json.loads((tmp_path / "sse" / "run.json").read_text())
    assert run["http"]["retries"] == 0 and streamed >= 1


def test_a_streaming_worker_behind_the_router_is_taken_out_and_the_run_ends_on_the_other(clean, tmp_path, capsys):
    _copy_corpus(clean, tmp_path)
    with LoopbackServer(model=MODELS) as good, LoopbackServer(model=MODELS, stream_always=True) as sse:
        rc = _score(f"{good.base_url},{sse.base_url}", tmp_path, "pair", "--judge-batch", "off")
    err = capsys.readouterr().err
    assert rc == 0, err
    _same_as_clean(clean, tmp_path, "pair")
    assert f"server {sse.base_url} sent an unreadable answer (HTTP 200 with a server-sent event stream" in err


# --- F10: Retry-After past the longest wait -----------------------------------------

def test_a_retry_after_past_the_cap_says_the_wait_taken_and_what_was_asked():
    told: list[str] = []
    req = ChatRequest(model="test-gen", n=1, max_tokens=8,
                      messages=[{"role": "system", "content": "x"}, {"role": "user", "content": "hello"}])

    async def go(srv: LoopbackServer) -> None:
        policy = RetryPolicy(attempts=3, backoff=0.01, backoff_cap=1.0)
        async with Client(retry=policy, notice=told.append) as client:
            srv.fail_next("429", times=1)
            # the 429 first; meanwhile another request is answered at once
            first = asyncio.create_task(client.chat(client.server(srv.base_url), req))
            await asyncio.sleep(0.3)
            await client.chat(client.server(srv.base_url), msgspec_replace(req))
            await first

    with LoopbackServer(model=MODELS, retry_after="999999") as srv:
        asyncio.run(go(srv))
    assert any("it asked to wait 999,999 s (Retry-After), waiting 1 s, the longest wait between tries" in t
               for t in told), told
    again = [t for t in told if "answering again" in t]
    assert len(again) == 1 and "(after 1 s)" in again[0], told  # counted from the wait, not another request


def msgspec_replace(req: ChatRequest) -> ChatRequest:
    import msgspec

    return msgspec.structs.replace(req, messages=[req.messages[0], {"role": "user", "content": "another"}])


# --- F15: an answer that names another model ----------------------------------------

def test_an_answer_naming_another_model_is_recorded_and_said_once(tmp_path, capsys):
    """A proxy substituting models: every answer (chat and batched) names
    `some-other-model`. Said once per model asked, kept in run.json `servers`."""
    with LoopbackServer(model=MODELS, batching=True, answer_model="some-other-model") as srv:
        rc = _score(srv.base_url, tmp_path, "sub")
        assert srv.count(path=COMPLETIONS_PATH) > 0
    err = capsys.readouterr().err
    assert rc == 0, err
    for asked in MODELS:
        assert err.count(f"answers requests for model {asked} as model some-other-model") == 1, err
    run = json.loads((tmp_path / "sub" / "run.json").read_text())
    server = next(s for s in run["servers"] if s["url"] == srv.base_url)
    assert server["answered_as"] == {"test-gen": "some-other-model", "test-judge": "some-other-model"}


def test_a_refusal_through_the_router_names_the_servers_not_the_routers_port(tmp_path, capsys):
    """Any 4xx through the router the run started (here a content filter's 400 on
    every generation request) names the servers behind it, as unreadable answers do."""
    corpus = make_corpus(tmp_path / "corpus.jsonl", 1, seed=11)
    with (LoopbackServer(model=MODELS, refuse="fiction writer") as a,
          LoopbackServer(model=MODELS, refuse="fiction writer") as b):
        rc = _score(f"{a.base_url},{b.base_url}", tmp_path, "refused")
    err = capsys.readouterr().err
    assert rc == 1 and corpus.exists(), err
    assert f"HTTP 400 from the generation and judge servers (via vllm-router over {a.base_url}, {b.base_url}), " \
           "POST /v1/chat/completions" in err, err
    assert f"127.0.0.1:{_router_port(tmp_path, 'refused')}" not in err


# --- L2 (issue 35): a router the run started is several servers --------------------

def test_a_router_named_by_its_workers_takes_plural_verbs():
    from tension.core.llm.servers import Server

    told: list[str] = []
    one, front = Server("http://a:1", told.append), Server("http://127.0.0.1:9", told.append)
    front.behind_router("the judge servers (via vllm-router over http://a:1, http://b:2)", None,
                        ["http://a:1", "http://b:2"])
    one.learned_n(4, "HTTP 400")
    front.learned_n(4, "HTTP 400")
    front.answered_by("test-judge", "other")
    assert told[0].startswith("http://a:1 answers at most 4 choice(s)")
    assert told[1].startswith("the judge servers (via vllm-router over http://a:1, http://b:2) answer at most 4")
    assert " answer requests for model test-judge as model other" in told[2]
    assert front.workers == ["http://a:1", "http://b:2"]
