"""Shared fixtures: the loopback OpenAI-compatible server (one per session, reset
for each test), synthetic stories (tension.testing.corpus), and a private
cache/home per test."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tension.testing.corpus import make_corpus, write_story
from tension.testing.openai_server import LoopbackServer

__all__ = ["make_corpus", "write_story", "verdict_records", "real_home_env", "REAL_ENV", "EMBEDDED_TEST_PORT"]


def verdict_records(cache: Path) -> dict:
    """Every verdict record of a cache, by key (read with LMDB's cursor for the keys,
    then through the Store, which checks and decodes them)."""
    import lmdb

    from tension.cache.store import Store

    env = lmdb.open(str(cache), max_dbs=8, readonly=True, lock=False)
    with env.begin() as txn:
        keys = [k for k, _ in txn.cursor(env.open_db(b"verdicts", txn=txn, create=False))]
    env.close()
    with Store(cache, readonly=True) as s:
        return dict(zip(keys, s.get_many("verdicts", keys)))


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


# The real environment, before _private_home: the slow tests that run the embedded
# server share its one installation (≈ 3.4 GB) under the real cache folder.
REAL_ENV = {k: os.environ[k] for k in ("HOME", "XDG_CACHE_HOME") if k in os.environ}
# The slow tests' embedded server port: 8766, or another for a run by hand beside CI's (with its
# own XDG_CACHE_HOME), so that neither finds the other's server on its port; under pytest-xdist,
# one port per worker (gw0 the base, gw1 the next, …). The slow step runs them one at a time all
# the same (.ci/run step 3): they share the one embedded installation and its state file.
EMBEDDED_TEST_PORT = int(os.environ.get("TENSION_TEST_EMBEDDED_PORT", "8766")) + int(
    os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


def real_home_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME")}
    env.update(REAL_ENV)
    return env


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


def cancel_midway(run: Callable[[], Awaitable[object]], until: Callable[[], bool]) -> None:
    """Start `run` (a score_async call) and cancel it once `until()` holds: an
    interrupted run, its records committed so far kept."""
    async def go() -> None:
        task = asyncio.ensure_future(run())
        while not until() and not task.done():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
