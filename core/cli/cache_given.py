"""What every `cache` verb is given and how it takes it: the cache folder as PATH or
--cache, which must hold a cache (looking never creates one) on a local disk, and
how many problems a verb lists one by one before it only counts the rest."""

from __future__ import annotations

import os
from pathlib import Path

from tension.core.errors import ConfigError, InputError

__all__ = ["MAX_LISTED", "check_local", "existing", "given_cache", "one_cache_flags"]

MAX_LISTED = 100  # bad records, damaged pages, conflicts listed one by one; the rest are counted


def existing(path) -> Path:
    """The cache folder `path`, which must hold a cache: looking never creates one.
    It is the verb's input: none there is a missing input (exit 1, as a missing
    corpus is in every verb), not a usage error."""
    from tension.core.config.settings import cache_file_given

    path = Path(path)
    if (problem := cache_file_given(path)) is not None:
        raise ConfigError(problem)
    if not (path / "data.mdb").is_file():
        raise InputError(str(path), 0, None, "no cache here (no data.mdb in it)")
    return path


def check_local(path: Path) -> None:
    from tension.cache.mounts import check_local as on_local_disk

    on_local_disk(path)


def given_cache(args, verb: str) -> str | None:
    """The cache folder given as PATH or as --cache (either form, in every cache verb
    that opens one cache); both, naming two folders, is a usage error."""
    path, flag = getattr(args, "path", None), getattr(args, "cache", None)
    if path and flag and os.path.realpath(path) != os.path.realpath(flag):
        raise ConfigError(f"{verb}: two caches given, {path} and --cache {flag}: give one")
    return path or flag


def one_cache_flags(p) -> None:
    """PATH and --cache, of a verb that looks at one cache (`cache stats`, `cache verify`)."""
    p.add_argument("path", nargs="?", metavar="PATH",
                   help="LMDB cache folder (default: ~/.cache/tension-run/llm.lmdb); --cache PATH says the same")
    p.add_argument("--cache", metavar="PATH", help="LMDB cache folder (the same as PATH)")
