"""`cache stats`: what the LMDB cache holds."""

from __future__ import annotations

import sys
from pathlib import Path

from tension.core.cli.flags import Verb
from tension.core.cli.messages import EXIT_FAILED, EXIT_OK

__all__ = ["VERBS", "cmd_cache_stats"]


def cmd_cache_stats(args) -> int:
    """Entries and bytes per database of the cache, and the last run's hits."""
    from tension.cache.store import Store, default_path

    path = args.cache or default_path()
    if not (Path(path) / "data.mdb").is_file():  # looking must not create an empty cache (issue 16)
        print(f"error: no cache at {path} (a score run creates it; --cache names another)", file=sys.stderr)
        return EXIT_FAILED
    with Store(path, readonly=False) as store:
        stats = store.stats()
        last = store.last_run_counts()
        size = store.file_bytes()
    print(f"cache {path}: {size / 1e6:.1f} MB on disk")
    print(f"{'database':<10} {'entries':>10} {'MB':>10} {'last run hits':>14} {'misses':>8} {'writes':>8}")
    for name, st in stats.items():
        h = last.hits.get(name, 0) if last else 0
        m = last.misses.get(name, 0) if last else 0
        w = last.writes.get(name, 0) if last else 0
        print(f"{name:<10} {st['entries']:>10} {st['bytes'] / 1e6:>10.2f} {h:>14} {m:>8} {w:>8}")
    return EXIT_OK


def _stats_flags(p) -> None:
    p.add_argument("--cache", metavar="PATH", help="LMDB cache folder (default: ~/.cache/tension-run/llm.lmdb)")


VERBS = [Verb("cache stats", cmd_cache_stats, _stats_flags, (), frozenset({"cache"}),
              "environment: XDG_CACHE_HOME moves ~/.cache, where the default cache is.")]
