"""`cache stats`, `cache verify`, `cache recover`, `cache drop`, `cache merge`: what
the LMDB cache holds, whether every record of it is readable, a new cache of the
readable ones, forgetting the records a broken setup left (by model, role or run),
and joining the caches of several machines. (`--cache-on-network-fs`, which every
verb that opens a cache takes, is network_fs.py's.)

This module holds `cache stats` and the verbs' table; the others are in modules of
their own: cache_damage.py (verify, recover), cache_drop.py (drop), cache_merge.py
(merge), and cache_given.py what each is given (the cache folder, PATH or --cache)."""

from __future__ import annotations

from tension.core.cli.cache_damage import cmd_cache_recover, cmd_cache_verify, recover_flags
from tension.core.cli.cache_drop import cmd_cache_drop, drop_flags
from tension.core.cli.cache_given import existing, given_cache, one_cache_flags
from tension.core.cli.cache_merge import cmd_cache_merge, merge_flags
from tension.core.cli.flags import Verb
from tension.core.cli.messages import EXIT_OK

__all__ = ["VERBS", "cmd_cache_stats", "cmd_cache_verify", "cmd_cache_recover", "cmd_cache_drop", "cmd_cache_merge"]


def cmd_cache_stats(args) -> int:
    """Entries and bytes per database of the cache, and the last run's hits."""
    from tension.cache.merge import last_merge
    from tension.cache.store import Store, default_path

    path = existing(given_cache(args, "cache stats") or default_path())
    with Store(path, readonly=True) as store:  # looking writes nothing (a read-only cache can be looked at)
        merged = last_merge(store)
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
    if merged is not None:
        # counted from the per-source counts: the note lists only the first conflicts and damaged records
        copied, conflicting, damaged, left_out = (sum(merged.total(what).values())
                                                  for what in ("copied", "conflicting", "damaged", "left_out"))
        print(f"last merge: {copied} records copied from {', '.join(s.path for s in merged.sources)}, "
              f"{conflicting} conflicting, {damaged} damaged, {left_out} left out (of losing endings)")
    return EXIT_OK


_ENV = "environment: XDG_CACHE_HOME moves ~/.cache, where the default cache is."
VERBS = [Verb("cache stats", cmd_cache_stats, one_cache_flags, (), frozenset({"path", "cache"}), _ENV),
         Verb("cache verify", cmd_cache_verify, one_cache_flags, (), frozenset({"path", "cache"}), _ENV),
         Verb("cache recover", cmd_cache_recover, recover_flags, (), frozenset({"src", "dst"})),
         Verb("cache drop", cmd_cache_drop, drop_flags, (),
              frozenset({"path", "cache", "model", "role", "run", "yes"}), _ENV),
         Verb("cache merge", cmd_cache_merge, merge_flags, (), frozenset({"sources", "dst"}))]
