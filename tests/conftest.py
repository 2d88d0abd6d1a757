"""Shared fixtures: the loopback OpenAI-compatible server (one per session and
pytest-xdist worker, reset for each test), more servers of a test's own
(`loopback_servers`), the in-process door to the same answers (`inprocess_server`),
a private cache/home per test, a command of the CLI run in this process
(`tension_run`), and the slow tests' embedded server.

A test says which door it needs. Unmarked, `server` and `loopback_servers` are
the wire (HTTP on loopback: the transport, retries, routing, real processes).
Marked `in_process` (a test, or a module's `pytestmark`), they are in-process
servers with the same answers (tension.testing.answers), served for the test's
clients by their `base_url`: the CLI's `main([...])` and the API run in process
without a socket, and a subprocess cannot reach them. Helpers are not here: tests import them from tension.testing (corpus,
cache_records, interrupt, real_env, …)."""

from __future__ import annotations

import contextlib
import fnmatch
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from tension.testing.cli import run_here
from tension.testing.inprocess import InProcessServer
from tension.testing.openai_server import LoopbackServer
from tension.testing.procs import running
from tension.testing.real_env import EMBEDDED_TEST_PORT, REAL_ENV

# The suite writes bytecode even where the environment says not to (PYTHONDONTWRITEBYTECODE,
# set on this machine), as the product does for the embedded server's own environment
# (core/serving/install.py engine_env). Without it every xdist worker and every child a test
# starts compiles the package and the test modules again, and pytest rewrites the asserts of
# every test module and of hypothesis' and anyio's (pytest plugins) anew: collection took
# 12.5 s of CPU a process where it takes 4.2 s with the bytecode written (bench/RESULTS.md).
# Set here, at the conftest's import, before the test modules are collected and before the
# workers start; the children inherit the environment.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_configure(config):
    """The tests stop their children with SIGINT as a terminal's Ctrl-C would. A pytest started
    in the background of a non-interactive shell (`cmd &` in a script, a CI runner's job) has
    SIGINT ignored, and every child inherits that across exec, so a `score` or `route` would
    not hear the Ctrl-C (tests/core/test_reliability_process.py
    test_the_tests_children_hear_ctrl_c). Python's own handler is restored here, before the
    xdist workers and every child start.

    In the xdist controller, which computes nothing itself, numba's cache of the kernels
    is filled beside the workers' collection (tension.testing.warm), so that on a fresh
    clone the workers load the kernels instead of each compiling them; in a worker, what
    needs the kernels waits for it (`_hold_until_warm`)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not hasattr(config, "workerinput") and "MPLCONFIGDIR" not in os.environ:
        # matplotlib's font list, built once for the session's processes: each test's private
        # home (`_private_home`) made every child that draws a figure build its own (≈ 0.25 s of
        # CPU), where a user's home keeps it from the first figure on
        mpl = tempfile.mkdtemp(prefix="tension-tests-matplotlib-")
        os.environ["MPLCONFIGDIR"] = mpl
        config.add_cleanup(lambda: shutil.rmtree(mpl, ignore_errors=True))
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        warm = subprocess.Popen([sys.executable, "-m", "tension.testing.warm"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        config.stash[_WARM] = warm
        os.environ[_WARM_PID] = str(warm.pid)  # the workers, started after this, wait for it
        _rewrite_ahead(config)


def _rewrite_ahead(config) -> None:
    """In the xdist controller, before the workers start: pytest's rewritten bytecode of
    the test modules to collect, written once. On a fresh clone the workers, collecting
    at once, each rewrote the asserts of every module (≈ 3.6 s of CPU a worker; a worker
    collected in 9–10 s of CPU on a fresh clone against 4.4 s on a warm one); the
    controller does it beside the warm-up and the workers read it. pytest's own
    functions do the work (the ones its import hook calls; private, so another pytest
    without them leaves the rewriting to the workers, as before)."""
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
        )
    except ImportError:
        return
    state = config.stash.get(assertstate_key, None)
    if state is None or sys.dont_write_bytecode or config.getoption("assertmode") != "rewrite":
        return
    patterns = config.getini("python_files")
    for arg in config.args:
        root = pathlib.Path(arg.split("::")[0])
        for fn in sorted(root.rglob("*.py") if root.is_dir() else [root] if root.is_file() else []):
            if not any(fnmatch.fnmatch(fn.name, pattern) for pattern in patterns):
                continue
            pyc = get_cache_dir(fn) / (fn.name[:-3] + PYC_TAIL)
            try:
                if _read_pyc(fn, pyc, state.trace) is None:
                    pyc.parent.mkdir(exist_ok=True)
                    source_hash, co = _rewrite_test(fn, config)
                    _write_pyc(state, co, source_hash, pyc)
            except (OSError, SyntaxError, ValueError):
                continue  # the worker's own import says what is wrong with the module, as pytest reports it


def pytest_collection_finish(session):
    """A worker's tests, once collected, wait for the warm-up where they need the kernels
    (`_hold_until_warm`). Not before: xdist's own start asks `uname -p` in a child."""
    if hasattr(session.config, "workerinput") and os.environ.get(_WARM_PID):
        _hold_until_warm(int(os.environ[_WARM_PID]))


_WARM = pytest.StashKey[subprocess.Popen]()
_WARM_PID = "TENSION_TEST_WARM_PID"
_WARM_WAIT = 120.0  # seconds a worker waits at most; then it compiles what it needs, as without the warm-up


def _hold_until_warm(pid: int) -> None:
    """In a worker, the first kernel a test calls and the first child a test starts wait
    for the controller's warm-up of numba's cache (`pytest_configure`); the tests before
    them run meanwhile. On a fresh clone the warm-up ends after the workers have
    collected: had they not waited, each would have compiled the same kernels again (the
    intervals' three, measured with NUMBA_DEBUG_CACHE: once in the warm-up and once in
    each of 3 workers), and a child started meanwhile (a `tension-run score`) would too.
    Waiting at the first test instead left a core idle for ≈ 9 s of the start.

    The two doors: numba's dispatcher asks `_compile_for_args` when a kernel meets
    argument types it has not compiled in this process (before it reads the cache), and
    every child of a test is a `subprocess.Popen`, asyncio's included. Both are put back
    once the warm-up has ended."""
    from numba.core.dispatcher import Dispatcher

    compile_for_args, popen_init = Dispatcher._compile_for_args, subprocess.Popen.__init__
    done = threading.Event()

    def wait() -> None:
        if not done.is_set():
            deadline = time.monotonic() + _WARM_WAIT
            while running(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            Dispatcher._compile_for_args, subprocess.Popen.__init__ = compile_for_args, popen_init
            done.set()

    def compiling(self, *args, **kwargs):
        wait()
        return compile_for_args(self, *args, **kwargs)

    def starting(self, *args, **kwargs):
        wait()
        popen_init(self, *args, **kwargs)

    Dispatcher._compile_for_args = compiling
    subprocess.Popen.__init__ = starting


def pytest_unconfigure(config):
    warm = config.stash.get(_WARM, None)
    if warm is not None:  # a warm-up still running at the end is of no use
        if warm.poll() is None:
            warm.kill()
        warm.wait()


@pytest.hookimpl(wrapper=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (the README's command): a worker more than the cores. A sixth of the suite's
    time is spent waiting, not computing (time-outs that must pass, slow and one-slot servers,
    signals sent at a moment): on 2 cores 3 workers took 269 s where 2 took 288 s and 4 took
    276 s (bench/RESULTS.md). PYTEST_XDIST_AUTO_NUM_WORKERS, set, is the count as given."""
    cores = yield
    return cores if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") else cores + 1


@pytest.fixture(scope="session")
def _session_server():
    """One loopback server for the session (models test-gen and test-judge); use
    `server`, which resets it for each test."""
    with LoopbackServer(model=["test-gen", "test-judge"]) as srv:
        yield srv


def _in_process(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker("in_process") is not None


@pytest.fixture
def server(request):
    """The session's loopback server, as a new one: `LoopbackServer.reset` restores
    every knob a test may set (delay, rates, max_model_len, …), drops records,
    faults and scripted answers, empties the prefix cache and zeroes the counters
    (a test that needs other constructor settings starts its own LoopbackServer).
    In a test marked `in_process`: `inprocess_server` (module docstring)."""
    if _in_process(request):
        return request.getfixturevalue("inprocess_server")
    return request.getfixturevalue("_session_server").reset()


@pytest.fixture
def inprocess_server():
    """An in-process server (models test-gen and test-judge) for a test that needs the answers,
    not the wire: pass its `base_url` to the API or the CLI (it is served for the test), or
    it as a Client's `transport=`. It answers as `server` does (tension.testing.answers),
    without a thread or a socket."""
    with InProcessServer(["test-gen", "test-judge"]).serving() as srv:
        yield srv


@pytest.fixture
def loopback_servers(request):
    """`start(n, **knobs)`: n more LoopbackServers of their own, started (models test-gen and
    test-judge unless `model=` says otherwise); every one is stopped after the test. In a test
    marked `in_process`: n InProcessServers, served for the test (module docstring)."""
    with contextlib.ExitStack() as stack:
        def start(n: int, **knobs) -> list[LoopbackServer] | list[InProcessServer]:
            knobs.setdefault("model", ["test-gen", "test-judge"])
            if _in_process(request):
                return [stack.enter_context(InProcessServer(**knobs).serving()) for _ in range(n)]
            new = [LoopbackServer(**knobs).start() for _ in range(n)]
            for srv in new:
                stack.callback(srv.stop)
            return new

        yield start


@pytest.fixture
def tension_run():
    """`tension_run(*args, env=None, input=None, cwd=None)`: the command `tension-run ARGS`
    run in this process (tension.testing.cli `run_here`), for a spec whose subject is
    what the command prints, writes and exits with, not the process; it returns the
    CompletedProcess `subprocess.run` of the console script would. A spec of the process
    itself (a signal, a crash that must not be one, another user, the console script, the
    view's server) runs the real one in a subprocess."""
    return run_here


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
