"""Interrupted runs for the specs: a pipeline's coroutine cancelled midway, in process
(`cancel_midway`); a CLI process whose import a stop cut (`stop_cut_import`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

__all__ = ["cancel_midway", "stop_cut_import"]


def cancel_midway(run: Callable[[], Awaitable[object]], until: Callable[[], bool]) -> None:
    """Start `run` (a score_async call) and cancel it once `until()` holds: an
    interrupted run, its records committed so far kept. The run must end cancelled."""
    async def go() -> None:
        task = asyncio.ensure_future(run())
        while not until() and not task.done():
            await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return
        raise AssertionError("the run was not cancelled: it ended before `until` held")

    asyncio.run(go())


def stop_cut_import(module: str, sig: str, as_command: bool) -> str:
    """A `python -c` script that runs the CLI on its arguments and stops itself with `sig`
    ("SIGINT", "SIGTERM") while it imports `module`, the stop made into "ImportError:
    initialization failed" by the import, as an extension module whose initialisation a
    stop cut does (scipy's, CI 2026-12-06): the audit hook stands for the module, its
    exception aborts the import. `as_command`: `main()` from the command line, as the
    console script calls it; else `main(argv)`, as Python code calls it."""
    run = 'sys.argv = ["tension-run", *sys.argv[1:]]\nsys.exit(main())' if as_command else "sys.exit(main(sys.argv[1:]))"
    return f"""
import os, signal, sys, time
from tension.core.cli import main

def hook(event, args):
    if event == "import" and args[0] == {module!r}:
        try:
            os.kill(os.getpid(), signal.{sig})
            time.sleep(5)
        except KeyboardInterrupt:
            raise ImportError("initialization failed") from None

sys.addaudithook(hook)
{run}
"""
