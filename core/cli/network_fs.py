"""`--cache-on-network-fs`, the flag every verb that opens a cache takes: the user
insists on a cache folder on a network file system, which is refused otherwise
(cache/mounts.py says why). A concern of the whole command line, not of the cache
verbs alone: core/cli/__init__.py adds it to each verb of OPENS_CACHE."""

from __future__ import annotations

import functools
import os

import msgspec

from tension.core.cli.flags import Verb

__all__ = ["OPENS_CACHE", "NETWORK_FS_DEST", "network_fs_flag"]

# The verbs that open a cache, each of which takes --cache-on-network-fs.
OPENS_CACHE = frozenset({"score", "estimate", "bench", "demo", "generate", "fairplay", "view", "subsample",
                         "cache stats", "cache verify", "cache recover", "cache drop", "cache merge",
                         "audit sample", "audit label"})
NETWORK_FS_DEST = "cache_on_network_fs"


def network_fs_flag(verb: Verb) -> Verb:
    """`verb` with the flag --cache-on-network-fs: the user insists on a cache folder
    on a network file system (cache/mounts.py says why it is refused otherwise)."""
    from tension.cache.mounts import ALLOW_ENV

    def add_flags(p) -> None:
        verb.add_flags(p)
        p.add_argument("--cache-on-network-fs", dest=NETWORK_FS_DEST, action="store_true",
                       help="use a cache folder on a network file system (NFS, SMB, FUSE/sshfs) anyway: refused "
                            "otherwise, as LMDB's locks and memory map do not hold across machines; one machine "
                            f"only, at your own risk (or set {ALLOW_ENV}=1)")

    @functools.wraps(verb.run)
    def run(args) -> int:
        if not getattr(args, NETWORK_FS_DEST, False):
            return verb.run(args)
        before = os.environ.get(ALLOW_ENV)
        os.environ[ALLOW_ENV] = "1"  # read where every cache is opened (cache.mounts.check_local)
        try:
            return verb.run(args)
        finally:  # (main() called in a process that goes on: the insistence was this command's only)
            if before is None:
                del os.environ[ALLOW_ENV]
            else:
                os.environ[ALLOW_ENV] = before

    return msgspec.structs.replace(verb, run=run, add_flags=add_flags, verb_only=verb.verb_only | {NETWORK_FS_DEST})
