"""Shared fixtures: the loopback OpenAI-compatible server (one per session and
pytest-xdist worker, reset for each test), more servers of a test's own
(`loopback_servers`), the in-process door to the same answers (`inprocess_server`),
a private cache/home per test, and the slow tests' embedded server. Helpers are not here: tests import them from tension.testing (corpus,
cache_records, interrupt, real_env, …)."""

from __future__ import annotations

import pytest

from tension.testing.inprocess import InProcessServer
from tension.testing.openai_server import LoopbackServer
from tension.testing.real_env import EMBEDDED_TEST_PORT, REAL_ENV


@pytest.fixture(scope="session")
def _session_server():
    """One loopback server for the session (models test-gen and test-judge); use
    `server`, which resets it for each test."""
    with LoopbackServer(model=["test-gen", "test-judge"]) as srv:
        yield srv


@pytest.fixture
def server(_session_server):
    """The session's loopback server, as a new one: `LoopbackServer.reset` restores
    every knob a test may set (delay, rates, max_model_len, …), drops records,
    faults and scripted answers, empties the prefix cache and zeroes the counters
    (a test that needs other constructor settings starts its own LoopbackServer)."""
    return _session_server.reset()


@pytest.fixture
def inprocess_server():
    """An in-process server (models test-gen and test-judge) for a test that needs the answers,
    not the wire: pass it as the pipeline's `transport=`. It answers as `server` does
    (tension.testing.answers), without a thread or a socket."""
    return InProcessServer(["test-gen", "test-judge"])


@pytest.fixture
def loopback_servers():
    """`start(n, **knobs)`: n more LoopbackServers of their own, started (models test-gen and
    test-judge unless `model=` says otherwise); every one is stopped after the test."""
    started: list[LoopbackServer] = []

    def start(n: int, **knobs) -> list[LoopbackServer]:
        knobs.setdefault("model", ["test-gen", "test-judge"])
        new = [LoopbackServer(**knobs).start() for _ in range(n)]
        started.extend(new)
        return new

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture(autouse=True)
def _private_home(tmp_path_factory, monkeypatch):
    """No test may touch the user's real cache or key."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
def vllm_server(monkeypatch):
    """The embedded vLLM server (slow tests), installed once in the real cache folder
    and started on its own port; stopped after the test unless it was running before."""
    from tension.core.serving import embedded

    for k in ("HOME", "XDG_CACHE_HOME"):  # the real cache folder: one installation for all slow tests
        if k in REAL_ENV:
            monkeypatch.setenv(k, REAL_ENV[k])
        else:
            monkeypatch.delenv(k, raising=False)
    started = embedded.running_state() is None
    st = embedded.start(embedded.EmbeddedSettings(port=EMBEDDED_TEST_PORT))
    yield st
    # Stop only the server this test started: another process (a second pytest, a demo) may
    # have replaced it in the state file since, and stopping what the file names then killed
    # that one's start (a CI flake: SIGTERM while starting).
    now = embedded.running_state()
    if started and now is not None and now.pid == st.pid:
        embedded.stop()
