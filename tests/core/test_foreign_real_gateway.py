"""A gateway path (issue 61): the tool through LiteLLM's proxy served under a path prefix
(`SERVER_ROOT_PATH=/gw`) with a master key, to the real llama-cpp-python server (slow:
.ci/run's step 3; both built once into the user cache by tension.testing.llamacpp_python).
A logging proxy in front of LiteLLM writes down each request as it arrived: LiteLLM
answers the same routes without the prefix too (`/v1/models` as `/gw/v1/models`), so only
what was on the wire shows the prefix kept. The reviews' gateway runs
(../shared/reviews/external-servers-2026-12-07.md section 3, 12-02's section 3), kept."""

from __future__ import annotations

import json
import os
import secrets
import urllib.request
from collections.abc import Iterator

import pytest

from tension.core.cli import main
from tension.core.llm.vllm_router import free_port
from tension.testing.corpus import EMBEDDED_STORY as STORY
from tension.testing.foreign_procs import running
from tension.testing.llamacpp_python import ENDINGS, SCALED, Served
from tension.testing.logging_proxy import LoggingProxy, logging_proxy

pytestmark = pytest.mark.slow

PREFIX = "/gw"


@pytest.fixture(scope="module")
def backend(tmp_path_factory) -> Iterator[Served]:
    from tension.testing.llamacpp_python import serve_built

    with serve_built(tmp_path_factory.mktemp("lcp") / "server.log") as s:
        yield s


@pytest.fixture
def gateway(backend, tmp_path) -> Iterator[tuple[LoggingProxy, str]]:
    """LiteLLM under PREFIX with a fresh master key, to `backend`, behind a logging proxy."""
    from tension.testing.llamacpp import ensure_litellm, real_cache

    with real_cache():
        exe = ensure_litellm()
    port = free_port()
    key = "sk-" + secrets.token_hex(24)  # the proxy refuses to start without a strong master key
    # OPENAI_API_KEY: what it sends upstream (llama-cpp-python checks none); the cost map is
    # read from the package, not fetched (no network)
    env = {**os.environ, "SERVER_ROOT_PATH": PREFIX, "OPENAI_API_KEY": "sk-upstream", "LITELLM_MASTER_KEY": key,
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    cmd = [str(exe), "--model", f"openai/{backend.model}", "--api_base", backend.url + "/v1",
           "--host", "127.0.0.1", "--port", str(port)]
    with running("LiteLLM", cmd, tmp_path / "litellm.log", f"http://127.0.0.1:{port}{PREFIX}/health/liveliness",
                 seconds=600, cwd=tmp_path, env=env), logging_proxy(f"http://127.0.0.1:{port}") as proxy:
        yield proxy, key


def test_score_through_a_path_prefixed_litellm_keeps_the_prefix_and_the_key(gateway, backend, tmp_path, capsys,
                                                                            monkeypatch):
    """LiteLLM says owned_by openai and has no /tokenize (words count pct); it passes
    `n` on and llama-cpp-python drops it, so the limit is learned from short answers.
    Every request the tool sent went to PREFIX/v1/… with the key as given."""
    proxy, key = gateway
    monkeypatch.setenv("OPENAI_API_KEY", key)
    base_url = f"{proxy.url}{PREFIX}/v1"
    ask = urllib.request.Request(base_url + "/models", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(ask, timeout=30) as r:
        model = json.loads(r.read())["data"][0]["id"]
    before = len(proxy.seen)
    story = tmp_path / "story.jsonl"
    story.write_text(json.dumps({"id": "baker", "text": STORY}) + "\n")
    out = tmp_path / "o"
    args = ["--base-url", base_url, "--model", model, "--cache", str(tmp_path / "cache"), "--tokenizer", "words",
            "--seed", "1", *SCALED]
    code = main(["score", str(story), "--out", str(out), *args])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    rows = [json.loads(x) for x in (out / "positions.jsonl").read_text().splitlines()]
    assert rows and all(r["n_endings"] == ENDINGS and r["n_malformed"] == 0 for r in rows), rows
    (server,) = json.loads((out / "run.json").read_text())["servers"]
    assert (server["kind"], server["max_n"], server["max_n_from"]) == ("other", 1, "short answers"), server

    sent = proxy.seen[before:]
    assert sent, "no request reached the gateway"
    assert all(s.path.startswith(f"{PREFIX}/v1/") for s in sent), sorted({s.path for s in sent})
    assert all(s.authorization == f"Bearer {key}" for s in sent), {s.authorization for s in sent}
    assert all(s.status == 200 for s in sent), [(s.path, s.status) for s in sent if s.status != 200]
    chats = sum(1 for s in sent if s.method == "POST" and s.path == f"{PREFIX}/v1/chat/completions")
    assert chats >= 2 * ENDINGS * len(rows), sorted({s.path for s in sent})
    # LiteLLM passed each on, one for one: the backend's own log counts the same
    assert backend.arrived()[("POST", "/v1/chat/completions", 200)] == chats, backend.arrived()

    # the cached rerun through the gateway: nothing generated or judged again, the same bytes
    before = len(proxy.seen)
    code = main(["score", str(story), "--out", str(tmp_path / "o2"), *args])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    again = proxy.seen[before:]
    assert not any(s.path.endswith("/chat/completions") for s in again), [(s.method, s.path) for s in again]
    assert all(s.path.startswith(f"{PREFIX}/v1/") and s.authorization == f"Bearer {key}" for s in again), again
    assert backend.arrived()[("POST", "/v1/chat/completions", 200)] == chats, backend.arrived()
    assert (out / "positions.jsonl").read_bytes() == (tmp_path / "o2" / "positions.jsonl").read_bytes()
