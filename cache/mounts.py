"""Whether a cache folder is on a network file system, where LMDB must not live.

LMDB's documentation forbids a database on a network file system: its lock file
(shared-memory mutexes) and its memory map do not hold across hosts, so two
machines writing one cache corrupt it, and even one machine can read pages another
has not finished writing. A cache folder on NFS, CIFS/SMB, or a FUSE mount (sshfs,
rclone, …) is refused with the way out: a cache on each machine's local disk, then
`tension-run cache merge`. The user may insist (`--cache-on-network-fs`, which sets
`TENSION_CACHE_ON_NETWORK_FS=1` for the process; a script may set the variable).

`filesystem_type` is the one function that asks the kernel (statfs(2) through
ctypes: f_type is the first field of `struct statfs` on every Linux ABI). On other
systems it answers None and nothing is refused.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

from tension.core.errors import ConfigError

__all__ = ["ALLOW_ENV", "NETWORK_FS", "filesystem_type", "network_filesystem", "check_local"]

ALLOW_ENV = "TENSION_CACHE_ON_NETWORK_FS"
# statfs f_type magic numbers (linux/magic.h, and the file systems' own headers)
NETWORK_FS: dict[int, str] = {
    0x6969: "NFS", 0x517B: "SMB", 0xFF534D42: "CIFS/SMB", 0xFE534D42: "SMB2/SMB3",
    0x65735546: "FUSE (sshfs, rclone, …)",
    0x00C36400: "Ceph", 0x5346414F: "AFS", 0x6B414653: "AFS", 0x01021997: "9p (a VM or WSL share)",
    0x0BD00BD0: "Lustre", 0x47504653: "GPFS", 0x73757245: "Coda", 0x564C: "NCP", 0x19830326: "BeeGFS",
}
_STATFS_BYTES = 256  # larger than struct statfs on any Linux ABI (120 bytes on x86-64)


def filesystem_type(path: Path) -> int | None:
    """statfs(2) f_type of the file system holding `path` (an existing path); None
    where it cannot be asked (not Linux, no libc, the call failed)."""
    if not sys.platform.startswith("linux"):
        return None
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return None
    libc = ctypes.CDLL(libc_name, use_errno=True)
    buf = ctypes.create_string_buffer(_STATFS_BYTES)
    if libc.statfs(os.fsencode(path), buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def network_filesystem(path: str | os.PathLike) -> str | None:
    """The name of the network file system holding the folder `path` (or, when it
    does not exist yet, its nearest existing parent, where it would be made); None
    for a local one."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    kind = filesystem_type(p)
    return NETWORK_FS.get(kind) if kind is not None else None


def check_local(path: str | os.PathLike) -> None:
    """A ConfigError saying why and what to do, when the cache folder `path` is on a
    network file system and the user did not insist."""
    if os.environ.get(ALLOW_ENV) == "1":
        return
    kind = network_filesystem(path)
    if kind is None:
        return
    raise ConfigError(
        f"the cache at {path} is on a network file system ({kind}): LMDB's locks and memory map do not hold "
        "across machines, so a cache there can be corrupted (LMDB's documentation forbids it). Give each machine "
        "a cache on its own local disk (--cache /local/disk/llm.lmdb), then copy the caches to one machine and "
        "join them with `tension-run cache merge SRC... DST` (docs/scale-out.md). To use this folder anyway (one "
        "machine only, at your own risk), add --cache-on-network-fs")
