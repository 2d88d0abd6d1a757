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

from .failures import cannot_write

__all__ = ["Env", "acquire", "release", "open_paths", "open_env"]


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


def open_env(path: Path, dbs: tuple[str, ...], meta_name: bytes, map_size: int, readonly: bool) -> Env:
    """The environment at `path` and its databases' handles, opened for the first
    store of this process that uses it."""
    env, unlocked = _open_lmdb(path, len(dbs) + 1, map_size, readonly)
    try:
        handles = {name: _open_db(env, name, readonly) for name in dbs}
        try:
            meta = env.open_db(meta_name, create=not readonly)
        except lmdb.NotFoundError:  # read-only, and no writer has committed yet
            raise CacheError(f"the cache at {path} holds no databases yet (another process may be creating "
                             "it: try again once it has written)") from None
    except BaseException:
        env.close()
        raise
    return Env(env, handles, meta, readonly=readonly, unlocked=unlocked)


def _open_lmdb(path: Path, max_dbs: int, map_size: int, readonly: bool) -> tuple[lmdb.Environment, bool]:
    """The LMDB environment, and whether it was opened without its lock file."""
    try:
        return lmdb.open(str(path), map_size=map_size, max_dbs=max_dbs, readonly=readonly, subdir=True,
                         create=not readonly, mode=0o600), False
    except lmdb.Error as e:
        if not (readonly and cannot_write(e)):
            raise
    # LMDB writes its lock file even to read, which a cache on a read-only mount
    # or one this user may only read does not allow. Without the lock a reader
    # is not protected from a writer in another process; nobody can write such
    # a cache anyway, so this is only the fallback.
    return lmdb.open(str(path), map_size=map_size, max_dbs=max_dbs, readonly=True, subdir=True, create=False,
                     lock=False), True


def _open_db(env: lmdb.Environment, name: str, readonly: bool) -> Any:
    """A database's handle; None for one a read-only open finds missing (a cache
    written before that database existed), which then reads as empty."""
    try:
        return env.open_db(name.encode(), create=not readonly)
    except lmdb.NotFoundError:
        if readonly:
            return None
        raise
