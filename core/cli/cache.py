"""`cache stats`, `cache verify`, `cache recover`, `cache drop`: what the LMDB cache
holds, whether every record of it is readable, a new cache of the readable ones,
and forgetting the records a broken setup left (by model, role or run)."""

from __future__ import annotations

import sys
from pathlib import Path

from tension.core.cli.flags import Verb
from tension.core.cli.messages import EXIT_FAILED, EXIT_OK
from tension.core.errors import ConfigError

__all__ = ["VERBS", "cmd_cache_stats", "cmd_cache_verify", "cmd_cache_recover", "cmd_cache_drop"]

MAX_LISTED = 100  # bad records and pages listed one by one; the rest are counted
# `cache drop --role`: the databases holding a role's answers ("positions" holds a
# judged position's verdicts as one record, an index rebuilt from the verdict
# records without a request)
ROLE_DBS = {"generation": ("endings",), "judge": ("verdicts", "positions"), "tokenize": ("tokens",)}
WHAT = {"endings": "endings records (generation)", "verdicts": "verdict records (judge)",
        "positions": "judged-position records (judge; an index of the verdicts, rebuilt from them with no request)",
        "tokens": "token counts (tokenize)"}


def cmd_cache_stats(args) -> int:
    """Entries and bytes per database of the cache, and the last run's hits."""
    from tension.cache.store import Store, default_path

    path = _existing(args.cache or default_path())
    with Store(path, readonly=True) as store:  # looking writes nothing (a read-only cache can be looked at)
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


def cmd_cache_verify(args) -> int:
    """Read and decode every record of the cache and report per database: good
    records, how many carry a checksum, bad ones (with their keys), damaged pages.

    The cache is only read, and without LMDB, so a truncated or damaged file
    cannot crash the check. Exit status: 0 every record is good; 1 something is
    damaged (`cache recover` copies what is readable); 2 no cache there."""
    from tension.cache.pages import PageError
    from tension.cache.store import default_path
    from tension.cache.verify import verify

    path = _existing(args.path or default_path())
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
    from tension.cache.verify import recover

    src = _existing(Path(args.src))
    try:
        report = recover(src, args.dst)
    except FileExistsError as e:
        raise ConfigError(f"cache recover: {e}") from None
    except PageError as e:
        print(f"error: the cache at {src} is not readable at all: {e}", file=sys.stderr)
        return EXIT_FAILED
    _print_report(report)
    written = sum(report.written.values())
    print(f"recovered {written} records into {args.dst}: "
          + ", ".join(f"{n} {db}" for db, n in report.written.items())
          + f"; left behind: {len(report.bad)} bad records, {len(report.pages)} damaged pages (a run asks "
          "again for what they held)")
    return EXIT_OK


def cmd_cache_drop(args) -> int:
    """Forget cached answers, so the next run asks for them again: those of a model
    (--model, as the server named it), of a role (--role), of a run folder (--run:
    the records its positions were scored from), or of all the filters given.

    Without --yes it only counts what would go (a dry run). Records are only
    deleted, never changed; the next run asks again for what it needs of them and
    writes the new answers. A broken setup's answers (a judge whose reasoning was
    on, endings that came back empty) are otherwise replayed by every rerun;
    `score --refresh ROLE` asks them again in place instead."""
    from tension.cache.store import DBS, Store, default_path

    if args.model is None and args.role is None and args.run is None:
        raise ConfigError("cache drop: name what to drop with --model, --role or --run (they combine)")
    path = _existing(args.cache or default_path())
    dbs = ROLE_DBS[args.role] if args.role else DBS
    with Store(path) as store:
        run = None
        if args.run is not None:
            from tension.core.pipelines.score.recall import run_keys

            run = run_keys(Path(args.run), store)
            if run.note:
                print(f"note: {run.note}", file=sys.stderr)
        chosen: dict[str, list[bytes]] = {}
        for db in dbs:
            if run is not None and db not in run.keys:
                continue  # token counts are not a run's own
            wanted = run.keys[db] if run is not None else None
            chosen[db] = [key for key, rec in store.keys(db)
                          if (wanted is None or key in wanted) and _model_matches(db, rec, args.model)]
        total = sum(len(k) for k in chosen.values())
        which = ", ".join(f"{k} {v}" for k, v in (("model", args.model), ("role", args.role), ("run", args.run)) if v)
        print(f"cache {path}: {total} records match ({which})" + (":" if total else ""))
        for db, keys in chosen.items():
            if keys:
                print(f"  {len(keys):>8} {WHAT[db]}")
        if not total:
            return EXIT_OK
        if not args.yes:
            print("nothing dropped (a dry run): add --yes to drop them")
            return EXIT_OK
        gone = store.delete_many((db, key) for db, keys in chosen.items() for key in keys)
    print(f"dropped {sum(gone.values())} records from {path}; the next run asks again for those it needs")
    return EXIT_OK


def _model_matches(db: str, rec, model: str | None) -> bool:
    """Whether a record is the model's; a judged-position record names no model and
    goes with any judge model's verdicts (it is only their index)."""
    if model is None or db == "positions":
        return True
    return getattr(rec, "model", None) == model


def _existing(path) -> Path:
    """The cache folder `path`, which must hold a cache: looking never creates one."""
    path = Path(path)
    if not (path / "data.mdb").is_file():
        raise ConfigError(f"no cache at {path} (no data.mdb in it)")
    return path


def _print_report(report) -> None:
    print(f"cache {report.path}: data.mdb {report.file_bytes:,} bytes")
    if report.problem:
        print(f"problem: {report.problem}")
    print(f"{'database':<10} {'good':>10} {'checksummed':>12} {'bad':>8}")
    for name, db in report.databases.items():
        print(f"{name:<10} {db.records:>10} {db.checked:>12} {db.bad:>8}")
    for bad in report.bad[:MAX_LISTED]:
        print(f"bad record: {bad.database} {bad.key}: {bad.reason}")
    for p in report.pages[:MAX_LISTED]:
        after = f" (after key {p.after})" if p.after else ""
        print(f"damaged page: {p.database} page {p.page}{after}: {p.reason}")
    more = max(0, len(report.bad) - MAX_LISTED) + max(0, len(report.pages) - MAX_LISTED)
    if more:
        print(f"… and {more} more bad records or pages")
    if report.unreached:
        print(f"{report.unreached} good records found in pages no database reaches (recover keeps them)")


def _stats_flags(p) -> None:
    p.add_argument("--cache", metavar="PATH", help="LMDB cache folder (default: ~/.cache/tension-run/llm.lmdb)")


def _verify_flags(p) -> None:
    p.add_argument("path", nargs="?", metavar="PATH", help="LMDB cache folder (default: ~/.cache/tension-run/llm.lmdb)")


def _recover_flags(p) -> None:
    p.add_argument("src", metavar="SRC", help="the damaged cache folder (only read)")
    p.add_argument("dst", metavar="DST", help="the new cache folder (must not exist, or be empty)")


def _drop_flags(p) -> None:
    _stats_flags(p)
    p.add_argument("--model", metavar="MODEL", help="the records of this model (as the server named it)")
    p.add_argument("--role", choices=tuple(ROLE_DBS),
                   help="the records of this role: generation (endings), judge (verdicts), tokenize (token counts)")
    p.add_argument("--run", metavar="DIR", help="the records a score run folder's positions were scored from "
                                                "(positions.jsonl, or positions.partial.jsonl of a stopped run)")
    p.add_argument("--yes", action="store_true", help="drop them (without it: only count them)")


_ENV = "environment: XDG_CACHE_HOME moves ~/.cache, where the default cache is."
VERBS = [Verb("cache stats", cmd_cache_stats, _stats_flags, (), frozenset({"cache"}), _ENV),
         Verb("cache verify", cmd_cache_verify, _verify_flags, (), frozenset({"path"}), _ENV),
         Verb("cache recover", cmd_cache_recover, _recover_flags, (), frozenset({"src", "dst"})),
         Verb("cache drop", cmd_cache_drop, _drop_flags, (), frozenset({"cache", "model", "role", "run", "yes"}),
              _ENV)]
