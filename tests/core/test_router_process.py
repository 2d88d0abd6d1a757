"""The vLLM router process (core/llm/vllm_router.py) and the `route` verb, with the
real `vllm-router` binary in front of loopback servers.

A `route` that serves is a process of its own, talked to over HTTP and stopped by
Ctrl-C (SIGINT); a `route` that gives up before it starts the router (a dead
server, every server's /health keyed) runs in this process (the `tension_run`
fixture)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict

import pytest

from tension.core.errors import ConfigError, RefusedError, ServerError
from tension.core.llm.failures import RetryPolicy
from tension.core.llm.vllm_router import LocalRouter, RouterSettings, free_port, router_command, worker_models
from tension.testing.openai_server import LoopbackServer

CHAT = "/v1/chat/completions"


def chat(url: str, key: str | None, text: str) -> dict:
    body = json.dumps({"model": "test-gen", "messages": [{"role": "user", "content": text}],
                       "max_tokens": 4}).encode()
    headers = {"Content-Type": "application/json", **({"X-Session-ID": key} if key else {})}
    req = urllib.request.Request(url + CHAT, data=body, headers=headers)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def served_by(servers) -> dict[str, set[int]]:
    """Which servers saw each message text (the texts name their key)."""
    seen = defaultdict(set)
    for i, s in enumerate(servers):
        for rec in s.requests:
            if rec.path == CHAT:
                seen[rec.body["messages"][0]["content"].split("#")[0]].add(i)
    return seen


def test_a_keys_requests_stay_on_one_worker_and_keys_spread_over_all(trio):
    with LocalRouter([s.base_url for s in trio]) as router:
        assert router.readiness().startswith("ready (3 healthy)")
        for i in range(120):
            key = f"story-{i % 30}"
            chat(router.url, key, f"{key}#{i}")
    seen = served_by(trio)
    assert len(seen) == 30
    assert all(len(v) == 1 for v in seen.values()), seen  # one worker per key: its prefix cache
    per_worker = [sum(1 for v in seen.values() if v == {i}) for i in range(3)]
    assert all(n >= 3 for n in per_worker), per_worker  # every worker took keys (30 keys, fixed hash)


def test_the_router_stops_with_its_block_and_frees_its_port(trio):
    router = LocalRouter([trio[0].base_url])
    with router:
        pid = router.proc.pid
        chat(router.url, "k", "k#1")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(OSError):
        urllib.request.urlopen(router.url + "/readiness", timeout=2)


def test_a_dead_worker_is_named_before_the_router_starts(trio):
    # the router itself reports a dead worker as healthy at start-up: we check first
    with pytest.raises(ServerError, match=r"server http://127.0.0.1:9 did not answer GET /v1/models: gave up after "
                                          r"1 attempt\(s\)"):
        worker_models([trio[0].base_url, "http://127.0.0.1:9"], retry=RetryPolicy(attempts=1))


def test_a_worker_that_does_not_answer_is_asked_again_then_is_a_server_that_stays_down(trio):
    # as `score` retries a server that does not answer, then exits 1 (docs/reliability.md, "Exit statuses")
    told: list[str] = []
    with pytest.raises(ServerError) as e:
        worker_models([trio[0].base_url, "http://127.0.0.1:9"], retry=RetryPolicy(attempts=3, backoff=0.05),
                      say=told.append)
    assert not isinstance(e.value, ConfigError)  # a setting would be exit 2
    assert "gave up after 3 attempt(s)" in str(e.value)
    assert told == [f"warning: http://127.0.0.1:9 did not answer GET /v1/models (URLError: <urlopen error [Errno "
                    f"111] Connection refused>); asking again in {w:g} s ({n} more attempt(s))"
                    for w, n in ((0.05, 2), (0.1, 1))]


def test_a_worker_that_refuses_the_key_is_a_setting_at_once():
    with LoopbackServer(model="a", api_key="right") as one:
        with pytest.raises(RefusedError, match="HTTP 401"):
            worker_models([one.base_url], api_key="wrong", retry=RetryPolicy(attempts=5, backoff=30))
        assert one.count() == 1  # asked once


def test_workers_serving_different_models_are_refused_with_the_listing():
    with LoopbackServer(model="a") as one, LoopbackServer(model=["a", "b"]) as two:
        with pytest.raises(ConfigError, match=r"must serve the same models.*: a; .*: a, b"):
            worker_models([one.base_url, two.base_url])
        assert worker_models([one.base_url, one.base_url]) == {one.base_url: ["a"]}


def test_router_command_carries_the_measured_failover_settings():
    cmd = router_command(["http://a:1/", "http://b:2"], host="127.0.0.1", port=5, metrics_port=6,
                         settings=RouterSettings(), binary="vllm-router")
    assert cmd[cmd.index("--worker-urls") + 1:cmd.index("--worker-urls") + 3] == ["http://a:1", "http://b:2"]
    def value(flag):
        return cmd[cmd.index(flag) + 1]

    assert value("--policy") == "sticky_least_loaded"
    assert value("--cb-failure-threshold") == "2" and value("--retry-max-retries") == "4"


def test_route_verb_prints_one_url_that_serves_and_stops_on_ctrl_c(trio):
    p = subprocess.Popen([sys.executable, "-m", "tension.core.cli", "route", *[s.base_url for s in trio],
                          "--port", str(free_port())],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = p.stdout.readline()
        assert first.startswith("vllm-router ready: http://127.0.0.1:"), first + p.stderr.read()
        url = first.split()[2]
        assert "serving test-gen, test-judge" in first
        assert p.stdout.readline().strip() == f"then: tension-run score CORPUS --out DIR --base-url {url}"
        assert chat(url, "s1", "s1#1")["choices"]
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=15)
        assert p.returncode == 0, err
        assert "stopped the router" in err and "Traceback" not in err
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()  # reaped and its pipes closed, so nothing of it reaches the next test
    time.sleep(0.2)
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/readiness", timeout=2)


def test_route_verb_gives_a_dead_server_up_with_exit_1_as_score_does(tension_run):
    # a server that stays down is work that failed (exit 1), not a setting (docs/reliability.md, "Exit statuses")
    r = tension_run("route", "http://127.0.0.1:9", "--retries", "2")
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0].startswith("warning: http://127.0.0.1:9 did not answer GET /v1/models (") and "asking again" in lines[0]
    assert lines[1].startswith("error: server http://127.0.0.1:9 did not answer GET /v1/models: gave up after 2 "
                               "attempt(s)") and "Traceback" not in r.stderr



def test_two_servers_asked_one_whose_health_needs_the_key_is_said_and_recorded_at_the_start(tmp_path, capsys,
                                                                                           monkeypatch):
    """L4 of ../shared/reviews/external-servers-2026-12-02.md: LiteLLM's /health refuses
    without a key; the run's checks send the key and passed it, vllm-router's health
    checks send none and marked it unhealthy, and the run finished on the other server
    without saying so at the start. Now the router is started without it, and the run
    says so first and keeps it in run.json."""
    from tension.core.cli import main
    from tension.testing.corpus import make_corpus

    key = "sk-health-4242"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with LoopbackServer(model=["test-gen", "test-judge"]) as open_, \
            LoopbackServer(model=["test-gen", "test-judge"], api_key=key) as keyed:
        corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=4)
        out = tmp_path / "out"
        code = main(["score", str(corpus), "--out", str(out), "--base-url", f"{open_.base_url},{keyed.base_url}",
                     "--model", "test-gen", "--judge-model", "test-judge", "--endings", "3", "--seed", "7",
                     "--cache", str(tmp_path / "cache"), "--no-progress", "--no-report"])
        err = capsys.readouterr().err
        assert code == 0, err
        said = (f"asked for 2 generation and judge servers, vllm-router uses 1: {keyed.base_url} unhealthy (its GET "
                "/health answers HTTP 401 without the API key, and vllm-router's health checks send none)")
        assert said in err, err
        assert err.count(said) == 1 and err.startswith("warning: " + said), err  # once, before anything else
        assert not [r for r in keyed.requests if r.path == CHAT]  # the router never sent it work
        assert [r for r in open_.requests if r.path == CHAT]
    doc = json.loads((out / "run.json").read_text())
    assert said in " ".join(doc["replica_events"])
    gen = {r["url"]: r for r in doc["replicas"]["generation"]}
    assert "without the API key" in gen[keyed.base_url]["taken_out"] and not gen[keyed.base_url]["up"]
    assert gen[open_.base_url]["taken_out"] is None


def test_every_server_whose_health_needs_the_key_is_a_clear_error_before_the_router_starts(tmp_path, capsys,
                                                                                          monkeypatch):
    from tension.core.cli import main
    from tension.testing.corpus import make_corpus

    key = "sk-health-4343"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with LoopbackServer(model=["test-gen"], api_key=key) as a, LoopbackServer(model=["test-gen"], api_key=key) as b:
        corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
        code = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", f"{a.base_url},{b.base_url}",
                     "--model", "test-gen", "--endings", "3", "--cache", str(tmp_path / "cache"), "--no-progress"])
        err = capsys.readouterr().err
    assert code == 2, err
    assert "every generation server's GET /health needs the API key" in err and "Traceback" not in err


def test_route_verb_leaves_out_a_server_whose_health_needs_the_key_and_says_so_first(tmp_path, tension_run):
    """L4 through `route` (it starts the router itself, without `score`'s check): the
    keyed server is left out and said first; every server keyed is a setting (exit 2)."""
    key = "sk-health-4444"
    env = {**os.environ, "OPENAI_API_KEY": key}
    with LoopbackServer(model="test-gen") as open_, LoopbackServer(model="test-gen", api_key=key) as keyed:
        p = subprocess.Popen([sys.executable, "-m", "tension.core.cli", "route", open_.base_url, keyed.base_url,
                              "--port", str(free_port())],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            first = p.stdout.readline()
            assert first.startswith("vllm-router ready: http://127.0.0.1:") and " over 1 server(s) " in first, \
                first + p.stderr.read()
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=15)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()  # reaped and its pipes closed, so nothing of it reaches the next test
        assert err.startswith(f"warning: asked for 2 servers, vllm-router uses 1: {keyed.base_url} unhealthy (its "
                              "GET /health answers HTTP 401 without the API key"), err
        assert key not in err
        # every server keyed: refused before the router starts, so in this process
        r = tension_run("route", keyed.base_url, keyed.base_url, env={"OPENAI_API_KEY": key})
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("error: every server's GET /health needs the API key") and "Traceback" not in r.stderr
