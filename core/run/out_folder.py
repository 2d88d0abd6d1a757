"""The ownership of a run's output (`--out`): the folder made ready
(`prepare_out_dir`), and the lock that lets one run at a time write it
(`out_lock`: an flock on a file beside the outputs, and this process's own
registry of the lock files its runs hold, for two calls of one process).

    out = prepare_out_dir(out_dir)
    with out_lock(out, out / LOCK_NAME, "score", "folder"):
        ...  # the run (core/run/lifecycle.py `open_run`) and its outputs
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from tension.core.errors import ConfigError, TensionError

__all__ = ["LOCK_NAME", "out_lock", "prepare_out_dir"]

LOCK_NAME = ".tension-run.lock"


@contextlib.contextmanager
def out_lock(out: Path, lock_file: Path, verb: str, what: str) -> Iterator[None]:
    """Hold `lock_file` for the output `out` of a `verb` run, or fail at once if
    another run holds it: a second run writing the same partial file and outputs
    would interleave them. The lock dies with its process (even SIGKILL). A run of
    this same process holding it (another thread, another task) is named as such:
    the lock file's pid would be this process's own."""
    key = os.path.realpath(lock_file)
    with _held_lock:
        if key in _held:
            raise TensionError(f"--out {out} is in use by another call in this process (a {_held[key]} run still "
                               f"going: another thread or task); wait for it to finish or choose another {what} "
                               "(several runs may share one --cache)")
        _held[key] = verb
    try:
        with _flock(out, lock_file, verb, what):
            yield
    finally:
        with _held_lock:
            del _held[key]


_held: dict[str, str] = {}  # the lock files this process's runs hold, and their verbs
_held_lock = threading.Lock()


@contextlib.contextmanager
def _flock(out: Path, lock_file: Path, verb: str, what: str) -> Iterator[None]:
    f = lock_file.open("a+")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            raise TensionError(f"--out {out} is in use by another tension-run {verb} (pid {holder}); wait for it "
                               f"to finish or choose another {what} (several runs may share one --cache)") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        yield
    finally:
        f.close()


def prepare_out_dir(out_dir: str | os.PathLike) -> Path:
    """The --out folder, made if missing; a file in its place is a usage error."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    return out
