"""Stop signals, one owner: within a block, Ctrl-C (SIGINT) and SIGTERM raise
KeyboardInterrupt in the main thread, whatever handler was there before, and are
recorded, so that work about to be committed can still see a stop whose
KeyboardInterrupt never reached it.

Why the record: a KeyboardInterrupt raised by a signal handler is lost when the
handler runs inside a callback whose exceptions Python ignores ("Exception ignored
in …": importlib's module-lock weakref callback, met while a verb imports its
modules). A verb that commits its work in one last step (`view --export`'s rename)
asks `raise_if_stopped()` just before it: a stop said once is obeyed even then.

Used by the blocking API (core/run/blocking.py: Ctrl-C while it waits on its
worker), `cache merge` and `view --export` (SIGTERM as Ctrl-C: said, exit 130,
where SIGTERM's default would end the process at once, silently, 143).

A library can also turn the KeyboardInterrupt into an error of its own (an extension
module cut off in its initialisation: "ImportError: initialization failed"): within
`stop_wins` (the CLI's verbs, and every `stops_raise` block) an error raised after a
stop signal is the stop. The CLI, as the process's command, records Ctrl-C everywhere
but where an asyncio loop runs on the main thread (`python_sigint`: the loop's own
handler cancels its task at a Ctrl-C, which raises nothing a library could convert).

A main thread that waits for another thread or a child process (the blocking API's
worker, `route`'s router) waits in slices (`wait_stoppable`, `wait_exit`): asleep in a
plain wait, it can sleep through a stop signal until the wait ends.

A KeyboardInterrupt raised by a signal can also cut an object off half-built, whose
finalizer then fails: Python prints "Exception ignored in …" and a traceback after the
command has said it stopped (llvmlite's ObjectRef, interrupted while numba loaded a
kernel from its cache: `AttributeError: … '_as_parameter_'`). The CLI's stop paths
silence those (`quiet_finalizers`) where the CLI is the process's command (`as_command`),
which ends with its verb."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

__all__ = ["stops_raise", "stop_wins", "python_sigint", "raise_if_stopped", "wait_stoppable", "wait_exit",
           "as_command", "quiet_finalizers"]

_received: list[int] = []  # the stop signals received within the outermost open block
_depth = 0  # blocks open (on the main thread: the only one that installs them)
_stops = 0  # stop signals received by this process's handlers, ever (`stop_wins`)


def _stop(signum: int, frame: object) -> None:
    global _stops
    _received.append(signum)
    _stops += 1
    raise KeyboardInterrupt


@contextlib.contextmanager
def stop_wins() -> Iterator[None]:
    """Within the block, an error raised after a stop signal reached this module's handler
    is the stop: KeyboardInterrupt, the error its cause. A library may turn the
    KeyboardInterrupt into an error of its own: an extension module whose initialisation
    it cut raises "ImportError: initialization failed" (met at a Ctrl-C while `view
    --export` imported scipy), and the user would get a traceback and exit 1 for the
    stop they asked for. Only stops received within the block count."""
    before = _stops
    try:
        yield
    except Exception as e:
        if _stops > before:
            raise KeyboardInterrupt from e
        raise


@contextlib.contextmanager
def stops_raise(*signums: signal.Signals) -> Iterator[None]:
    """Within the block, each of ``signums`` raises KeyboardInterrupt and is recorded
    (`raise_if_stopped`); the handlers before it are put back after. Off the main
    thread, nothing: signals reach only the main thread's handlers."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _depth == 0:
        _received.clear()  # a stop belongs to the block it was received in
    before = {s: signal.signal(s, _stop) for s in signums}
    _depth += 1
    try:
        with stop_wins():
            yield
    finally:
        _depth -= 1
        for s, handler in before.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def python_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handler within the block, where the CLI's recording one is set
    (`as_command`): asyncio's runner puts its graceful handler (the first Ctrl-C cancels
    the main task, whose cleanup commits completed work) only over Python's own. Around
    a loop that runs on the main thread; elsewhere, nothing."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not _stop:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, _stop)


# How long a stop signal may wait to be obeyed by a main thread asleep in `wait_stoppable`
STOP_SLICE = 0.1


def _slice() -> float | None:
    """The wait's slice: `STOP_SLICE` on the main thread, the only one whose handlers run; elsewhere none."""
    return STOP_SLICE if threading.current_thread() is threading.main_thread() else None


def wait_stoppable(event: threading.Event) -> None:
    """``event.wait()``, but on the main thread in slices of `STOP_SLICE`. A signal's
    Python handler runs only when the main thread next runs Python code, and a thread
    asleep in a lock's wait (or waitpid's) is woken only by a signal the kernel hands to
    it after it fell asleep: one handled just before (the thread between its last check
    and the sleep) or by another thread (POSIX lets the kernel pick any thread that does
    not block it) leaves it asleep until the wait ends (python/cpython#85300). So a
    Ctrl-C to a blocking API call under ``asyncio.run`` was obeyed only when the run had
    ended, its record "complete" (a loaded machine: 1 in 30). Each slice's end runs the
    handler."""
    slice_ = _slice()
    while not event.wait(slice_):
        pass


def wait_exit(proc: subprocess.Popen[bytes]) -> int:
    """``proc.wait()``, its exit status, stoppable as `wait_stoppable`'s wait is."""
    slice_ = _slice()
    while True:
        try:
            return proc.wait(slice_)
        except subprocess.TimeoutExpired:
            pass


def raise_if_stopped() -> None:
    """KeyboardInterrupt if a stop signal was received in the open block, though its
    own KeyboardInterrupt was lost on the way (see the module's docstring)."""
    if _depth and _received:
        raise KeyboardInterrupt


_command = False  # this process is a command of the CLI (`as_command`)


def _ignore(unraisable: object) -> None:
    return None


def as_command() -> None:
    """This process is a command of the CLI run from its command line (the console
    script, `python -m tension.core.cli`), which ends when its verb does."""
    global _command
    _command = True
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler):  # not where the shell ignores it
        signal.signal(signal.SIGINT, _stop)  # Ctrl-C as before, recorded for `stop_wins`


def quiet_finalizers() -> None:
    """In a process that is a CLI command (`as_command`): from now on an exception
    raised where Python cannot raise it (a finalizer, a weakref callback) is dropped,
    not printed with its traceback. Called by a command that ends on the user's stop,
    before it lets go of the interrupted frames: what an object the stop cut off
    half-built fails to release is not news to the user, and the command has said what
    it kept (module docstring). Where the CLI's `main([...])` is called from Python (a
    notebook, the tests), nothing: that process goes on, with its own hook."""
    if _command:
        sys.unraisablehook = _ignore
