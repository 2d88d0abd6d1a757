"""What goes wrong with a cache's file, said with the way out: damage LMDB reports
(rerunning cannot cure it), a file system refusing writes, a write cut short."""

from __future__ import annotations

import errno
import os

import lmdb

from tension.core.errors import CacheDamagedError, disk_free

from . import records

__all__ = ["DAMAGE", "damaged", "cannot_write", "write_failure", "replace_damaged", "RERUN_WITH_NEW", "OTHER_CACHE"]

# The way on a run is told (`score`, `estimate` …): a verb without --cache (`cache
# merge`) says its own instead of these words.
RERUN_WITH_NEW = "then rerun with --cache NEW"
OTHER_CACHE = "(or give another --cache)"

# LMDB's errors about the file itself (bad pages, a foreign or torn file), as
# opposed to a full map or disk: rerunning cannot cure them.
DAMAGE = (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.PageFullError, lmdb.InvalidError,
           lmdb.VersionMismatchError, lmdb.PanicError, lmdb.BadTxnError, lmdb.CursorFullError)


def damaged(path: str | os.PathLike, what: str) -> CacheDamagedError:
    """The error of a damaged cache at `path`: what is wrong and the way out."""
    return CacheDamagedError(
        f"the cache at {path} is damaged: {what}. Rerunning cannot repair it. `tension-run cache verify {path}` "
        f"lists what is readable; `tension-run cache recover {path} NEW` copies every readable record into a "
        f"new cache NEW (the damaged one is left as it is); {RERUN_WITH_NEW}")


def cannot_write(e: BaseException) -> bool:
    """Whether an error of LMDB or the OS is the file system refusing writes (a
    read-only mount, permissions), not a damaged or missing cache."""
    if isinstance(e, lmdb.ReadonlyError) or (isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES,
                                                                                      errno.EPERM)):
        return True
    text = str(e)
    return text.endswith(("Read-only file system", "Permission denied", "Operation not permitted"))


def write_failure(path: str | os.PathLike, e: BaseException) -> str:
    """What a failed write to the cache at `path` says. LMDB reports a short write
    (a full disk, a file-size limit) as "Input/output error": name the likely
    cause and the free space, and the way on."""
    return (f"cannot write to the cache at {path}: {e}. The disk holding it has {disk_free(path)} free: a full "
            "disk or a file-size limit (ulimit -f) ends a write this way. The records already written are intact; "
            f"make room {OTHER_CACHE} and rerun the same command to continue")


def replace_damaged(txn, handle, key: bytes, value) -> bool:
    """Write `value` over the one stored at `key` if that one is damaged; a second
    process that found the same key damaged and wrote it first wins."""
    try:
        records.decode(txn.get(key, db=handle))
    except records.DamagedRecord:
        return txn.put(key, value, db=handle)
    return False
