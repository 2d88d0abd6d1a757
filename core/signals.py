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
which ends with its verb.

The command's stops from its first line (issue 58, G3, G4): Ctrl-C and SIGTERM alike end
every verb with "interrupted …" and exit 130. Before `main()` runs, the command is still
importing (≈ 0.1 s; the package `tension` is the API, and is imported before any module of
the CLI): `command_starts`, the first statement of `tension/__init__.py` (and of
bin/tension-run), puts a handler there that says so and exits 130 at once, nothing having
been done yet; `main()` then puts the recording one (`as_command`). Only what the
interpreter does before that first statement still ends on SIGTERM's default (143)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

__all__ = ["stops_raise", "stop_wins", "python_sigint", "raise_if_stopped", "wait_stoppable", "wait_exit",
           "as_command", "command_starts", "held", "quiet_finalizers", "command_line"]

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
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    own_int = signal.getsignal(signal.SIGINT) is _stop
    own_term = signal.getsignal(signal.SIGTERM) is _stop
    if own_int:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if own_int:
            signal.signal(signal.SIGINT, _stop)
        if own_term:  # a loop that had its own SIGTERM handler put the default (143) back when it removed it
            signal.signal(signal.SIGTERM, _stop)


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
    if threading.current_thread() is not threading.main_thread():
        return
    # Ctrl-C as before, recorded for `stop_wins`; SIGTERM as Ctrl-C, in every verb (said, exit 130, where
    # its default ends the process at once, silently, 143). Not where the shell ignores either.
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _starting):
        signal.signal(signal.SIGINT, _stop)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, _starting):
        signal.signal(signal.SIGTERM, _stop)


def _is_the_command() -> bool:
    """This process runs the `tension-run` command: its console script or bin/tension-run,
    or ``python -m tension.core.cli`` (whose ``sys.argv[0]`` is "-m" while it imports)."""
    if sys.argv and os.path.basename(sys.argv[0]) == "tension-run":
        return True
    return _as_module() is not None


def _as_module() -> list[str] | None:
    """The interpreter's words up to ``-m tension.core.cli`` where the command was run so
    (``sys.orig_argv``: the interpreter as typed, and its options); None otherwise."""
    orig = getattr(sys, "orig_argv", [])
    if "-m" in orig[:-1] and orig[orig.index("-m") + 1] == "tension.core.cli":
        return orig[:orig.index("-m") + 2]
    return None


def command_line() -> list[str]:
    """The command line that ran this process, as it can be typed again: ``sys.argv``,
    but under ``python -m tension.core.cli`` the interpreter and the module (its
    ``sys.argv[0]`` is the module's file, "-m" while it imports, neither of which runs).
    What advice to run a command again repeats (the stop while starting, `score`'s
    `--endings` advice)."""
    module = _as_module()
    return list(sys.argv) if module is None else module + sys.argv[1:]


def _starting(signum: int, frame: object) -> None:
    """A stop while the command imports, before `main()` runs: nothing has been done, so it
    is said and the process exits 130 at once (an exception here would be a traceback, or
    lost in an import's callback). Written with os.write: the handler may run in the middle
    of a print."""
    import shlex

    from tension.core.redact import redact_argv

    argv = command_line()
    shown = redact_argv(argv)
    said = ("interrupted (while starting; nothing was done). Resume with the same command:\n  "
            + " ".join(shlex.quote(a) for a in shown)
            + ("\n(its secrets are shown as ***: give them again)" if shown != argv else "") + "\n")
    try:
        os.write(2, said.encode("utf-8", "replace"))
    finally:
        os._exit(130)


def command_starts() -> None:
    """Where this process is the `tension-run` command (`_is_the_command`), Ctrl-C and
    SIGTERM from now until `main()` runs (`as_command`) say "interrupted" and exit 130
    (module docstring). The first statement of the package `tension`, before it imports
    the API; elsewhere (a notebook, a script importing tension), nothing."""
    if threading.current_thread() is not threading.main_thread() or not _is_the_command():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the shell ignores it
        signal.signal(signal.SIGINT, _starting)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _starting)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Within the block, Ctrl-C and SIGTERM wait: received, the first is sent again at the
    block's end, once the block has done all it does, to the handler that was there before
    (the command's: recorded, KeyboardInterrupt). Around
    the renames that put a verb's outputs in place together (`tension.core.inputs.jsonl`
    `replace_together`): a stop between two of them would leave a set half old, half new.
    Off the main thread, nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def wait(signum: int, frame: object) -> None:
        got.append(signum)

    before = {s: signal.signal(s, wait) for s in (signal.SIGINT, signal.SIGTERM)
              if signal.getsignal(s) not in (signal.SIG_IGN, None)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        if got:  # sent again, to the handler it was meant for: recorded, KeyboardInterrupt (or the default's end)
            signal.raise_signal(got[0])


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
