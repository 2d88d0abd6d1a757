"""Interrupted runs for the specs: a pipeline's coroutine cancelled midway, in process
(`cancel_midway`); a CLI process whose import a stop cut (`stop_cut_import`); a CLI
process that stops itself at a named moment of its own (`stopped_at`)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

__all__ = ["cancel_midway", "stop_cut_import", "stopped_at", "COMMAND_STARTED"]


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


# `stopped_at`'s moment "the first import once `main()` has put the command's handlers in place"
COMMAND_STARTED = "<main>"

_SITECUSTOMIZE = """
import fnmatch, os, signal, sys, time

SIG, EVENT, WHAT = signal.{sig}, {event!r}, {what!r}
fired = []


def command_started():
    h = signal.getsignal(signal.SIGINT)  # the CLI's recording Ctrl-C handler: main() has begun
    return getattr(h, "__module__", None) == "tension.core.signals" and getattr(h, "__name__", None) == "_stop"


def hook(event, args):
    if fired or event != EVENT:
        return
    if EVENT == "import":
        if not (args[0] == WHAT or (WHAT == {started!r} and command_started())):
            return
    elif not (isinstance(args[0], (str, bytes, os.PathLike))
              and fnmatch.fnmatch(os.path.basename(os.fsdecode(args[0])), WHAT)):
        return
    fired.append(1)
    sys.stderr.write("stopping at " + EVENT + " " + repr(args[0]) + chr(10))
    waits = getattr(signal.getsignal(SIG), "__qualname__", "") == "held.<locals>.wait"
    os.kill(os.getpid(), SIG)
    if waits:  # signals held (core/signals.py `held`): received, it is sent again at the block's end
        return
    time.sleep(10)  # the handler runs here: it exits, or raises in the middle of this event


sys.addaudithook(hook)
"""


def stopped_at(folder: Path, sig: str, *, imports: str | None = None, opens: str | None = None,
               renames: str | None = None, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process (`env`, else this one's) that sends itself `sig`
    ("SIGINT", "SIGTERM") at one moment of its own, once: when it first imports the module
    `imports` (`COMMAND_STARTED`: the first import once the CLI's `main()` has put the
    command's handlers in place, the verb starting), or opens a file whose name matches the
    pattern `opens`, or renames one whose name matches `renames`. No timing: the moment is
    an event of the process itself (an audit hook of a sitecustomize.py written into
    `folder`, first on PYTHONPATH), whatever the machine's load. The process says
    "stopping at …" on stderr when it does."""
    (event, what), = [(e, w) for e, w in (("import", imports), ("open", opens), ("os.rename", renames))
                      if w is not None]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(sig=sig, event=event, what=what,
                                                                  started=COMMAND_STARTED))
    base = dict(os.environ if env is None else env)
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), base.get("PYTHONPATH")) if p)
    return base
