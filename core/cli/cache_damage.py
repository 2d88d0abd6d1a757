"""`cache verify` and `cache recover`: whether every record of a cache is readable,
and a new cache of the readable ones. Both read the data file without LMDB
(cache/verify.py), so a damaged one cannot crash them."""

from __future__ import annotations

import sys
from pathlib import Path

from tension.core.cli.cache_given import MAX_LISTED, check_local, existing, given_cache
from tension.core.cli.messages import EXIT_FAILED, EXIT_OK
from tension.core.errors import ConfigError

__all__ = ["cmd_cache_verify", "cmd_cache_recover", "recover_flags"]


def cmd_cache_verify(args) -> int:
    """Read and decode every record of the cache and report per database: good
    records, how many carry a checksum, bad ones (with their keys), damaged pages.

    The cache is only read, and without LMDB, so a truncated or damaged file
    cannot crash the check. Exit status: 0 every record is good; 1 something is
    damaged (`cache recover` copies what is readable) or no cache there."""
    from tension.cache.pages import PageError
    from tension.cache.store import default_path
    from tension.cache.verify import verify

    path = existing(given_cache(args, "cache verify") or default_path())
    check_local(path)  # read without LMDB, but a network copy may be half-written: the same rule
    try:
        report = verify(path)
    except PageError as e:
        print(f"error: the cache at {path} is not readable at all: {e}", file=sys.stderr)
        return EXIT_FAILED
    _print_report(report)
    if report.sound:
        print(f"the cache at {path} is sound: every record was read and decoded")
        return EXIT_OK
    print(f"error: the cache at {path} is damaged; copy what is readable into a new cache with\n"
          f"  tension-run cache recover {path} NEW\nand rerun with --cache NEW (what was lost is asked again)",
          file=sys.stderr)
    return EXIT_FAILED


def cmd_cache_recover(args) -> int:
    """Copy every readable record of the cache SRC into a new cache DST, each with a
    checksum; SRC is only read, never changed.

    Reads what the databases reach and also the pages none reaches any more (under
    a damaged page), so every good record is kept. DST must not exist (or be an
    empty folder). Rerun with --cache DST: what was lost is asked again."""
    from tension.cache.pages import PageError
    from tension.cache.verify import FREE_LIST, recover

    src = existing(Path(args.src))
    check_local(src)
    try:
        report = recover(src, args.dst)
    except FileExistsError as e:
        raise ConfigError(f"cache recover: {e}") from None
    except PageError as e:
        print(f"error: the cache at {src} is not readable at all: {e}", file=sys.stderr)
        return EXIT_FAILED
    _print_report(report)
    written = sum(report.written.values())
    # a bad record whose good older copy was found is recovered, not left behind: a rerun asks nothing for it
    older = (f" ({report.bad_recovered} more had a good older copy, recovered)" if report.bad_recovered else "")
    print(f"recovered {written} records into {args.dst}: "
          + ", ".join(f"{n} {db}" for db, n in report.written.items())
          + f"; left behind: {len(report.bad) - report.bad_recovered} bad records{older}, "
          f"{sum(p.database != FREE_LIST for p in report.pages)} damaged pages (a run asks again for what they held)")
    return EXIT_OK


def _print_report(report) -> None:
    print(f"cache {report.path}: data.mdb {report.file_bytes:,} bytes")
    if report.problem:
        print(f"problem: {report.problem}")
    print(f"{'database':<10} {'good':>10} {'checksummed':>12} {'compressed':>11} {'bad':>8}")
    for name, db in report.databases.items():
        print(f"{name:<10} {db.records:>10} {db.checked:>12} {db.compressed:>11} {db.bad:>8}")
    for bad in report.bad[:MAX_LISTED]:
        print(f"bad record: {bad.database} {bad.key}: {bad.reason}")
    for p in report.pages[:MAX_LISTED]:
        after = f" (after key {p.after})" if p.after else ""
        print(f"damaged page: {p.database} page {p.page}{after}: {p.reason}")
    more = max(0, len(report.bad) - MAX_LISTED) + max(0, len(report.pages) - MAX_LISTED)
    if more:
        print(f"… and {more} more bad records or pages")
    if report.unreached:
        print(f"{report.unreached} good records found in pages no database reaches (recover keeps them)"
              + (f"; {report.bad_recovered} of them good older copies of the bad records" if report.bad_recovered
                 else ""))
    if report.from_freed:
        print(f"note: {report.from_freed} of them are from pages LMDB had freed, in the key range of a damaged page: "
              "older copies of what it held, or records deleted before (`cache drop`), which cannot be told apart")
    if report.free_unread:
        print("note: LMDB's list of free pages could not be read, so the pages it had freed are read as well: "
              "among the records found there may be some `cache drop` deleted")


def recover_flags(p) -> None:
    p.add_argument("src", metavar="SRC", help="the damaged cache folder (only read)")
    p.add_argument("dst", metavar="DST", help="the new cache folder (must not exist, or be empty)")
