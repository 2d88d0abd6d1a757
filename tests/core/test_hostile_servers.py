"""Hostile ground for the servers and the router (issue 25): servers without
/health, a client killed with SIGKILL, the router's leftovers and its start-up
failures, a worker that answers HTTP 200 with an HTML page among good ones, 429
storms, answers far beyond max_tokens, list URLs that name an endpoint, URL
credentials beside an API key, a server that reports no usage. Every router here
is the real `vllm-router` binary over loopback servers."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import make_corpus

from tension.core.cli import main
from tension.core.llm.vllm_router import free_port
from tension.testing.openai_server import CHAT_PATH, LoopbackServer

MODELS = ["test-gen", "test-judge"]
EXE = str(Path(sys.executable).parent / "tension-run")
ROUTE = [sys.executable, "-m", "tension.core.cli", "route"]


def score_argv(corpus: Path, tmp_path: Path, urls: str, *more: str) -> list[str]:
    return ["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", urls, "--model", "test-gen",
            "--judge-model", "test-judge", "--endings", "2", "--seed", "7", "--cache", str(tmp_path / "cache"),
            "--no-progress", "--no-report", *more]


@pytest.fixture
def pair():
    servers = [LoopbackServer(model=MODELS).start() for _ in range(2)]
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """The system temp folder of this process (where vllm-router's log goes), empty."""
    folder = tmp_path / "systmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


# --- /health (review 4a, 4b) ---------------------------------------------------------

def test_score_over_servers_without_health_says_at_once_that_the_router_needs_it(tmp_path, capsys, own_tmp):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    servers = [LoopbackServer(model=MODELS, serve_health=False).start() for _ in range(2)]
    try:
        rc = main(score_argv(corpus, tmp_path, ",".join(s.base_url for s in servers)))
        err = capsys.readouterr().err
        assert rc == 2, err
        assert (f"{servers[0].base_url} has no /health endpoint (HTTP 404); vllm-router needs it (vLLM serves it)"
                in err)
        assert "not ready within" not in err and "Traceback" not in err
        assert all(s.count(path=CHAT_PATH) == 0 for s in servers)
        assert list(own_tmp.iterdir()) == []  # no router was started, no log left
    finally:
        for s in servers:
            s.stop()


def test_route_over_servers_without_health_says_at_once_that_the_router_needs_it():
    servers = [LoopbackServer(model=MODELS, serve_health=False).start() for _ in range(2)]
    try:
        r = subprocess.run([*ROUTE, *(s.base_url for s in servers), "--port", str(free_port())],
                           capture_output=True, text=True, timeout=120)
    finally:
        for s in servers:
            s.stop()
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"error: {servers[0].base_url} has no /health endpoint (HTTP 404); "
                               "vllm-router needs it (vLLM serves it)"), r.stderr
    assert "Traceback" not in r.stderr


# --- the router's process: killed client, leftovers, start-up failure (8d, 11g, 11h) ---

def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's reaping is left


def _router_of(pid: int) -> int | None:
    for child in _children(pid):
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"vllm-router" in cmd:
            return child
    return None


def test_a_client_killed_with_sigkill_leaves_no_router_running(pair, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 4, seed=3)
    for s in pair:
        s.delay = 0.05  # the run is still going when the kill lands
    p = subprocess.Popen([EXE, *score_argv(corpus, tmp_path, ",".join(s.base_url for s in pair))],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        router = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            router = router or _router_of(p.pid)
            if router is not None and sum(s.count(path=CHAT_PATH) for s in pair) > 0:
                break
            time.sleep(0.02)
        assert router is not None and p.poll() is None, "the run ended before its router served"
        p.kill()
        p.wait()
        deadline = time.monotonic() + 30
        while _alive(router) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(router), "vllm-router outlived its SIGKILLed client"
    finally:
        if p.poll() is None:
            p.kill()
        p.stderr.close()


def test_a_clean_multi_server_run_leaves_no_router_log(pair, tmp_path, capsys, own_tmp):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    rc = main(score_argv(corpus, tmp_path, ",".join(s.base_url for s in pair)))
    assert rc == 0, capsys.readouterr().err
    assert list(own_tmp.iterdir()) == []


def test_route_on_a_busy_port_prints_only_the_cause(pair):
    r = subprocess.run([*ROUTE, pair[0].base_url, pair[1].base_url, "--port", str(pair[0].port)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Address already in use" in lines[0] and lines[0].startswith("error: vllm-router could not start")
    assert "\x1b[" not in r.stderr and "DEBUG" not in r.stderr and "Traceback" not in r.stderr
    log = Path(lines[0].rsplit("its log: ", 1)[1].rstrip(")"))
    assert log.exists()  # named in the error: kept
    log.unlink()
