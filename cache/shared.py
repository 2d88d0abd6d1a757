"""One LMDB environment per cache folder per process, shared by every `Store`
that opens it, reference-counted: closed when the last one closes.

LMDB allows one open environment per file per process (py-lmdb refuses a second:
"already open in this process"), so two runs at once in one process (two threads
of a notebook, two ``score_async`` awaited together) must share it. What belongs
to a run (its hit, miss and write counts) stays in its own `Store`; what belongs
to the file is here: the environment, its database handles, the lock that keeps
reads out of a resize, and the lock that lets one thread of this process write
at a time (a resize must see no transaction open in the process)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb

from tension.core.errors import CacheError

__all__ = ["Env", "acquire", "release", "open_paths"]


class Env:
    """An open environment and what every user of it shares."""

    def __init__(self, env: lmdb.Environment, dbs: dict[str, Any], meta: Any, *, readonly: bool, unlocked: bool):
        self.env = env
        self.dbs = dbs
        self.meta = meta
        self.readonly = readonly
        self.unlocked = unlocked
        self.map_lock = threading.Lock()  # reads and a resize
        self.write_lock = threading.Lock()  # one writing thread of this process at a time
        self.users = 0
        self.key: Path | None = None


_open: dict[Path, Env] = {}
_lock = threading.Lock()


def key(path: str | os.PathLike) -> Path:
    """The registry's key of a cache folder: its resolved path (a symlink or a
    relative path to the same folder is the same environment)."""
    return Path(os.path.realpath(path))


def acquire(path: str | os.PathLike, readonly: bool, opener: Callable[[], Env]) -> Env:
    """The environment of `path`, opened by `opener` unless this process has it open.
    A store that writes cannot share an environment opened read-only."""
    k = key(path)
    with _lock:
        env = _open.get(k)
        if env is None:
            env = opener()
            env.key = k
            _open[k] = env
        elif env.readonly and not readonly:
            raise CacheError(f"the cache at {path} is open read-only in this process (another call is reading it): "
                             "let that call finish, or give this one another cache")
        env.users += 1
        return env


def release(env: Env) -> None:
    """One user fewer; the last one closes the environment."""
    with _lock:
        env.users -= 1
        if env.users > 0:
            return
        if env.key is not None and _open.get(env.key) is env:
            del _open[env.key]
        env.env.close()  # under the lock: a new open of the path waits for it


def open_paths() -> list[Path]:
    """The cache folders this process has open (tests: nothing is left open)."""
    with _lock:
        return sorted(_open)
