"""A process as Linux's /proc tells it, for tests that watch the processes they start
(a worker's wait for the warm-up, a router's child, an export's CPU time)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["stat", "running", "cpu_seconds", "children"]


def stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name (state first, then the
    parent's pid, …; proc(5) numbers them from 3), or None when there is no such process.
    The name is cut at its last ")": it may hold spaces and parentheses of its own."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def running(pid: int) -> bool:
    """The process lives and has not exited (an exited child stays a zombie, state Z,
    until its parent reaps it)."""
    fields = stat(pid)
    return fields is not None and fields[0] != "Z"


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU time so far (utime and stime)."""
    fields = stat(pid)
    if fields is None:
        raise ProcessLookupError(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The pids whose parent is `pid`."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (fields := stat(int(d.name))) is not None and int(fields[1]) == pid:
            out.append(int(d.name))
    return out
