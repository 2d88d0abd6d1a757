"""The vLLM router process (core/llm/vllm_router.py) and the `route` verb, with the
real `vllm-router` binary in front of loopback servers."""

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

from tension.core.errors import ConfigError
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
    with pytest.raises(ConfigError, match=r"server http://127.0.0.1:9 is not reachable"):
        worker_models([trio[0].base_url, "http://127.0.0.1:9"])


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
    time.sleep(0.2)
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/readiness", timeout=2)


def test_route_verb_refuses_a_dead_server_with_exit_2():
    r = subprocess.run([sys.executable, "-m", "tension.core.cli", "route", "http://127.0.0.1:9"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith("error: server http://127.0.0.1:9 is not reachable") and "Traceback" not in r.stderr

