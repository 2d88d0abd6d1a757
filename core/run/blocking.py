"""Running a command's coroutine to its end from blocking code: on uvloop, SIGTERM
cancelling it like Ctrl-C (completed work committed first); from inside a running
event loop (a notebook cell) on a worker thread with its own loop. The blocking
form of every command that talks to servers (core/run/lifecycle.py opens the run
inside it)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tension.core.signals import python_sigint, stops_raise, wait_stoppable

__all__ = ["run_blocking"]

T = TypeVar("T")


def run_blocking(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine ``make_coro()`` to its end on uvloop (asyncio when uvloop is
    missing), SIGTERM cancelling it like Ctrl-C: completed work is committed
    first. The blocking form of every command that talks to servers.

    Called from code that runs inside an event loop (a notebook cell, a script's
    ``asyncio.run(main())``), where a second loop cannot run on the same thread,
    the coroutine runs on a worker thread with its own loop, and this call waits
    for it (the caller's loop is blocked meanwhile, as any blocking call blocks
    it; ``await`` the ``*_async`` form instead to keep it running)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop on this thread: the usual case, the CLI
        return _run_here(make_coro)
    return _run_on_worker(make_coro)


def _run_on_worker(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``_run_here`` on a thread of its own; its result returned, its exception raised
    here. Signal handlers can be installed on the main thread only, so the worker
    runs without the SIGTERM handler (``_run_here`` skips it there); a Ctrl-C that
    interrupts the wait here (KeyboardInterrupt: a notebook's interrupt) cancels the
    work like Ctrl-C in the CLI, completed work committed, before it is re-raised.

    The work begins only once this thread's Ctrl-C handler is in place (`go`): begun
    before it, the work could hold the interpreter long enough (its imports, its first
    requests) for a Ctrl-C to reach the caller's handler instead, which under
    ``asyncio.run`` only cancels its main task, blocked here, so the run went on to its
    end and then raised KeyboardInterrupt, its record saying "complete"."""
    box: dict[str, Any] = {}
    # Events, not Thread.join: a join that a KeyboardInterrupt broke may not wait
    # again (CPython 3.11), and the interrupted work must be waited for
    go, stop, done = threading.Event(), threading.Event(), threading.Event()

    def started(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        box.update(loop=loop, task=task)
        if stop.is_set():  # a Ctrl-C came before the task existed: it stops at its first await
            task.cancel()

    def work() -> None:
        try:
            go.wait()
            if not stop.is_set():  # a Ctrl-C before the work began: it never begins
                box["result"] = _run_here(make_coro, started=started)
        except BaseException as e:  # handed to the caller's thread, raised there
            box["error"] = e
        finally:
            done.set()

    # the caller's context goes with the work (the API's record of its call, lifecycle.INVOCATION)
    threading.Thread(target=contextvars.copy_context().run, args=(work,), name="tension-run", daemon=True).start()
    try:
        # Ctrl-C raises KeyboardInterrupt here, whatever handler the caller's loop installed: under
        # ``asyncio.run`` the loop's own handler only cancels its main task, which is blocked in this
        # wait, so the first Ctrl-C was obeyed only once the run had ended
        with stops_raise(signal.SIGINT):
            go.set()
            wait_stoppable(done)  # not done.wait(): it can sleep through the Ctrl-C (wait_stoppable)
    except KeyboardInterrupt:
        stop.set()
        go.set()
        if "task" in box:
            with contextlib.suppress(RuntimeError):  # its loop closed meanwhile: nothing left to stop
                box["loop"].call_soon_threadsafe(box["task"].cancel)
        wait_stoppable(done)
        raise
    if "error" in box:
        raise box["error"]
    return box["result"]


def _run_here(make_coro: Callable[[], Coroutine[Any, Any, T]],
              started: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None] | None = None) -> T:
    try:
        import uvloop
        factory = uvloop.new_event_loop
    except ImportError:
        factory = None

    async def main() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        if started is not None:
            started(loop, task)  # the worker's caller may cancel it (_run_on_worker)
        before = signal.getsignal(signal.SIGTERM)
        try:
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread (uvloop: ValueError), no signals
            return await make_coro()
        try:
            return await make_coro()
        finally:
            loop.remove_signal_handler(signal.SIGTERM)  # which puts SIGTERM's default (143) back
            if before is not None:
                signal.signal(signal.SIGTERM, before)  # the command's (core/signals.py): exit 130 to the end

    with python_sigint(), asyncio.Runner(loop_factory=factory) as runner:  # its Ctrl-C handler, over Python's
        return runner.run(main())
