"""core/signals.py, the one owner of stop signals: Ctrl-C and SIGTERM raise
KeyboardInterrupt within a block and are recorded, so a stop whose
KeyboardInterrupt was swallowed on the way (importlib's lock callback, during a
verb's imports) is still seen before a commit (`view --export`'s rename), and an error
a library made of a stop is the stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tension.core.signals import raise_if_stopped, stop_wins, stops_raise
from tension.testing.interrupt import stop_cut_import


def _signal_self(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(0.05)  # the handler runs at the next bytecode boundary, here at the latest


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_whose_interrupt_was_swallowed_is_still_seen_before_the_commit(sig):
    before = signal.getsignal(sig)
    with stops_raise(signal.SIGINT, signal.SIGTERM):
        raise_if_stopped()  # nothing received yet: no stop
        try:
            _signal_self(sig)
        except KeyboardInterrupt:
            pass  # swallowed, as an "Exception ignored in …" callback does
        else:
            pytest.fail("the signal raised no KeyboardInterrupt")
        with pytest.raises(KeyboardInterrupt):
            raise_if_stopped()
    assert signal.getsignal(sig) is before  # the handler before it is put back
    raise_if_stopped()  # outside a block: nothing to obey
    with stops_raise(signal.SIGINT):
        raise_if_stopped()  # a new block starts without the old stop


def test_off_the_main_thread_a_block_installs_nothing():
    seen = []

    def work():
        with stops_raise(signal.SIGTERM):
            seen.append(signal.getsignal(signal.SIGTERM))
            raise_if_stopped()

    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [before]


# An object a stop's KeyboardInterrupt cut off half-built, as llvmlite's ObjectRef when a Ctrl-C
# landed while numba loaded a kernel from its cache (an export stopped "starting", CI 2026-12-06):
# its finalizer fails when the interrupted frames go, after the command has said it stopped.
_HALF_BUILT = """
import sys
from tension.core.signals import as_command, quiet_finalizers

COMMAND
class Half:
    def __init__(self):
        raise KeyboardInterrupt  # the signal, before the object held what it releases
    def __del__(self):
        self._as_parameter_

try:
    Half()
except KeyboardInterrupt:
    QUIET
    print("interrupted: said once", file=sys.stderr)
"""


@pytest.mark.parametrize("command", [True, False], ids=["a-command", "main-called-from-python"])
@pytest.mark.parametrize("quiet", [True, False], ids=["quieted", "as-python-prints-it"])
def test_a_stop_that_cut_an_object_off_half_built_prints_no_traceback(quiet, command):
    """Quiet in a CLI command's stop paths (core/cli/__init__.py main, core/cli/view.py);
    where `main([...])` is called from Python (a notebook, the tests) the process goes
    on, and its own hook (pytest's) is left in place."""
    code = _HALF_BUILT.replace("QUIET", "quiet_finalizers()" if quiet else "pass")
    code = code.replace("COMMAND", "as_command()" if command else "")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "interrupted: said once" in r.stderr
    if quiet and command:
        assert r.stderr == "interrupted: said once\n"
    else:  # the spec can fail: without it, Python prints the finalizer's traceback
        assert "Exception ignored" in r.stderr and "Traceback" in r.stderr and "_as_parameter_" in r.stderr


def _interrupted_initialisation(sig: int) -> None:
    """An extension module's initialisation cut by a stop: it raises an error of its own
    (scipy's, met at a Ctrl-C while `view --export` imported it, CI 2026-12-06)."""
    try:
        _signal_self(sig)
    except KeyboardInterrupt:
        raise ImportError("initialization failed") from None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_error_a_library_made_of_a_stop_is_the_stop(sig):
    with pytest.raises(KeyboardInterrupt) as stopped, stops_raise(signal.SIGINT, signal.SIGTERM):
        _interrupted_initialisation(sig)
    assert isinstance(stopped.value.__cause__, ImportError)  # the error kept, as the cause
    with pytest.raises(ImportError), stops_raise(signal.SIGINT):  # no stop: the error is the error
        raise ImportError("initialization failed")
    with stops_raise(signal.SIGINT):
        with pytest.raises(KeyboardInterrupt):
            _signal_self(signal.SIGINT)
        with pytest.raises(ValueError), stop_wins():  # a stop received before the block is not its own
            raise ValueError("bad input")


def test_a_verb_whose_import_a_stop_cut_says_interrupted_and_exits_130(tmp_path):
    """Every verb run as a command: the stop recorded by the CLI's Ctrl-C handler wins over
    the error a library made of it; before, a traceback ending in the ImportError, exit 1."""
    curves = tmp_path / "positions.jsonl"
    curves.write_text("")
    script = stop_cut_import("tension.core.reports.metrics", "SIGINT", as_command=True)
    r = subprocess.run([sys.executable, "-c", script, "metrics", str(curves), "--out", str(tmp_path / "m")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 130, r.stderr
    assert r.stderr.startswith("interrupted. Resume with the same command:") and "Traceback" not in r.stderr


@pytest.mark.parametrize("wait", ["event", "process"])
def test_a_stop_another_thread_received_ends_the_main_threads_wait(wait):
    """A stop signal the kernel handed to another thread (POSIX lets it pick any thread
    that does not block the signal; here the main thread blocks it, so it must) runs its
    Python handler only when the main thread next runs Python code: a main thread asleep
    in ``Event.wait()`` or ``Popen.wait()`` slept on to the wait's end (the flake of
    test_api_findings' first-Ctrl-C spec, the blocking call's record "complete").
    `wait_stoppable` and `wait_exit` wake to run it; the wait here would last 30 s."""
    script = textwrap.dedent(f"""
        import os, signal, subprocess, threading, time
        from tension.core.signals import stops_raise, wait_exit, wait_stoppable

        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # a thread that takes signals
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGINT}})  # threads started from here on inherit it
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        try:
            with stops_raise(signal.SIGINT):
                if {wait!r} == "event":
                    event = threading.Event()
                    end = threading.Timer(30, event.set)
                    end.daemon = True
                    end.start()
                    wait_stoppable(event)
                else:
                    proc = subprocess.Popen(["sleep", "30"], stdout=subprocess.DEVNULL)
                    try:
                        wait_exit(proc)
                    finally:
                        proc.kill()
            print("waited")
        except KeyboardInterrupt:
            print("interrupted", "late" if time.monotonic() - t0 > 20 else "in time")
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.stdout.split() == ["interrupted", "in", "time"], (p.stdout, p.stderr)
