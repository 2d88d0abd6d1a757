"""`cache stats`, `cache verify`, `cache recover`, `cache drop`, `cache merge`: what
the LMDB cache holds, whether every record of it is readable, a new cache of the
readable ones, forgetting the records a broken setup left (by model, role or run),
and joining the caches of several machines. (`--cache-on-network-fs`, which every
verb that opens a cache takes, is network_fs.py's.)"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from tension.core.cli.flags import Verb
from tension.core.cli.messages import EXIT_FAILED, EXIT_OK
from tension.core.errors import CacheError, ConfigError, InputError
from tension.core.signals import stops_raise

__all__ = ["VERBS", "cmd_cache_stats", "cmd_cache_verify", "cmd_cache_recover", "cmd_cache_drop", "cmd_cache_merge"]

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
    from tension.cache.merge import last_merge
    from tension.cache.store import Store, default_path

    path = _existing(_given_cache(args, "cache stats") or default_path())
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
        copied = sum(merged.total("copied").values())
        print(f"last merge: {copied} records copied from {', '.join(s.path for s in merged.sources)}, "
              f"{len(merged.conflicts)} conflicting, {len(merged.damaged)} damaged, "
              f"{sum(merged.total('left_out').values())} left out (of losing endings)")
    return EXIT_OK


def cmd_cache_verify(args) -> int:
    """Read and decode every record of the cache and report per database: good
    records, how many carry a checksum, bad ones (with their keys), damaged pages.

    The cache is only read, and without LMDB, so a truncated or damaged file
    cannot crash the check. Exit status: 0 every record is good; 1 something is
    damaged (`cache recover` copies what is readable) or no cache there."""
    from tension.cache.pages import PageError
    from tension.cache.store import default_path
    from tension.cache.verify import verify

    path = _existing(_given_cache(args, "cache verify") or default_path())
    _check_local(path)  # read without LMDB, but a network copy may be half-written: the same rule
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
    _check_local(src)
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
    (--model: the requests that asked for it, whatever name the server answered
    under), of a role (--role), of a run folder (--run:
    the records its positions were scored from), or of all the filters given.

    The cache is PATH (or --cache PATH); with --run DIR and neither, the one DIR's
    run.json names (the cache the run used), else the default. Without --yes it
    only counts what would go (a dry run). Records are only
    deleted, never changed; the next run asks again for what it needs of them and
    writes the new answers. A broken setup's answers (a judge whose reasoning was
    on, endings that came back empty) are otherwise replayed by every rerun;
    `score --refresh ROLE` asks them again in place instead."""
    from tension.cache.store import DBS, Store, default_path
    from tension.core.pipelines.score.recall import recorded_cache

    if args.model is None and args.role is None and args.run is None:
        raise ConfigError("cache drop: name what to drop with --model, --role or --run (they combine)")
    given = _given_cache(args, "cache drop")
    if given is None and args.run is not None and (recorded := recorded_cache(Path(args.run))) is not None:
        # the cache the run used, which its run.json names: the one holding its records
        print(f"cache {recorded}: the one {Path(args.run) / 'run.json'} names (--cache gives another)")
        given = str(recorded)
    path = _existing(given or default_path())
    dbs = ROLE_DBS[args.role] if args.role else DBS
    with Store(path) as store:
        run = None
        if args.run is not None:
            from tension.core.pipelines.score.recall import run_keys

            run = run_keys(Path(args.run), store)
            if run.note:
                print(f"note: {run.note}", file=sys.stderr)
        chosen: dict[str, list[bytes]] = {}
        by_answer = 0  # records written before issue 58, matched by the model that answered
        unnamed: list[bytes] = []  # judged-position records written before issue 58 (they name no model)
        for db in dbs:
            if run is not None and db not in run.keys:
                continue  # token counts are not a run's own
            wanted = run.keys[db] if run is not None else None
            chosen[db] = []
            for key, rec in store.keys(db):
                if wanted is not None and key not in wanted:
                    continue
                match = _model_matches(rec, args.model)
                if match is None:
                    unnamed.append(key)
                elif match:
                    chosen[db].append(key)
                    by_answer += args.model is not None and not getattr(rec, "asked", "x")  # (token counts: none)
        if unnamed and chosen.get("verdicts"):
            # an index of verdicts that names no model: it goes with the verdicts dropped (else a
            # rerun would read their answers from it); without one it is rebuilt with no request
            chosen["positions"] += unnamed
        total = sum(len(k) for k in chosen.values())
        which = ", ".join(f"{k} {v}" for k, v in (("model", args.model), ("role", args.role), ("run", args.run)) if v)
        print(f"cache {path}: {total} records match ({which})" + (":" if total else ""))
        for db, keys in chosen.items():
            if keys:
                print(f"  {len(keys):>8} {WHAT[db]}")
        if by_answer:
            print(f"note: {by_answer} of them were written before records named the model asked for: they are "
                  f"matched by the model that answered ({args.model})")
        if unnamed and chosen.get("verdicts"):
            print(f"note: {len(unnamed)} of the judged-position records name no model (written before records "
                  "named it): they go with the verdicts dropped, and a run rebuilds those it needs from the "
                  "verdicts kept, with no request")
        if not total:
            return EXIT_OK
        if not args.yes:
            print("nothing dropped (a dry run): add --yes to drop them")
            return EXIT_OK
        gone = sum(store.delete_many((db, key) for db, keys in chosen.items() for key in keys).values())
    print(f"dropped {gone} records from {path}; the next run asks again for those it needs"
          + (f" ({total - gone} of the {total} were gone already: another process dropped them)"
             if gone < total else ""))
    return EXIT_OK


def cmd_cache_merge(args) -> int:
    """Join caches: copy every good record of each cache SRC into the cache DST (made
    when missing), so that one run from DST sends nothing for what any of them holds.
    Each machine of a split corpus runs its `score --shard I/N` on a cache of its own
    local disk; copy the caches to one machine, merge them, then run once without
    --shard (docs/scale-out.md).

    Each record is checked by its checksum and copied as it is stored. A damaged
    source record is reported and skipped (a run asks again for it). A key whose
    record differs between the caches (another answer, not only another time) is a
    conflict: DST keeps the record it holds (its own, else that of the first SRC
    given), and each conflict is listed with its database, key and sources; after a
    conflict of endings, the source's verdicts and judged positions of the endings
    DST does not keep are left out, and counted. The sources are only read. A merge
    stopped part-way leaves DST sound; run the same command again to complete it.
    Exit status: 0 every record merged; 1 conflicts or damaged records (the rest is
    merged), or a source that is no cache; 2 bad usage (DST among the sources)."""
    from tqdm import tqdm

    from tension.cache.merge import DST_BEFORE, merge
    from tension.cache.store import DBS, Store
    from tension.core.config.settings import cache_file_given

    sources = [_existing(Path(s)) for s in args.sources]
    dst = Path(args.dst)
    seen: dict[object, str] = {}
    dst_file = _file_id(dst / "data.mdb")
    for src in sources:
        real, file = os.path.realpath(src), _file_id(src / "data.mdb")
        if real == os.path.realpath(dst):
            raise ConfigError(f"cache merge: {src} is DST: a cache cannot be merged into itself")
        if file == dst_file:  # a hard-linked copy (`cp -al`): another folder, the same file
            raise ConfigError(f"cache merge: {src} is DST (the same data.mdb, hard-linked): a cache cannot be "
                              "merged into itself")
        if real in seen or file in seen:
            raise ConfigError(f"cache merge: {src} is given twice (as {seen.get(real) or seen[file]}"
                              + ("" if real in seen else ": the same data.mdb, hard-linked") + ")")
        seen[real] = seen[file] = str(src)
    if (problem := cache_file_given(dst)) is not None:
        raise ConfigError(f"cache merge: DST {problem}")
    if dst.exists() and not (dst / "data.mdb").is_file() and (not dst.is_dir() or any(dst.iterdir())):
        raise ConfigError(f"cache merge: DST {dst} is neither a cache (no data.mdb in it) nor an empty folder")
    total = 0
    with _merge_advice(sources, dst), stops_raise(signal.SIGTERM):  # SIGTERM said as Ctrl-C is, exit 130
        for src in sources:
            with Store(src, readonly=True) as store:
                total += sum(st["entries"] for st in store.stats().values())
        with tqdm(total=total, unit="records", desc="merge", disable=None, file=sys.stderr) as bar:
            report = merge(sources, dst, progress=bar.update)
    print(f"merged {len(sources)} caches into {dst}")
    print(f"{'database':<10} {'copied':>10} {'already there':>14} {'conflicting':>12} {'damaged':>8}")
    totals = {what: report.total(what) for what in ("copied", "present", "conflicting", "damaged")}
    for db in DBS:
        print(f"{db:<10} {totals['copied'][db]:>10} {totals['present'][db]:>14} {totals['conflicting'][db]:>12} "
              f"{totals['damaged'][db]:>8}")
    left_out = report.total("left_out")
    if left_out["verdicts"] or left_out["positions"]:
        print(f"{left_out['verdicts']} verdicts and {left_out['positions']} judged positions of the losing endings "
              "left out (they judged endings DST does not keep: no run would read them)")
    for c in report.conflicts[:MAX_LISTED]:
        kept = "DST's own record" if c.kept_from == DST_BEFORE else f"the record copied from {c.kept_from}"
        print(f"conflict: {c.database} {c.key}: {c.source} holds another answer; DST keeps {kept}")
    for d in report.damaged[:MAX_LISTED]:
        print(f"damaged record: {d.source} {d.database} {d.key}: {d.reason} (skipped)")
    more = max(0, len(report.conflicts) - MAX_LISTED) + max(0, len(report.damaged) - MAX_LISTED)
    if more:
        print(f"… and {more} more conflicts or damaged records")
    if report.clean:
        return EXIT_OK
    if report.conflicts:
        print(f"error: {len(report.conflicts)} keys have different records in the caches (listed above): DST kept "
              "its own, or the first source's, and the others were not copied. Different answers to one request "
              "mean the machines did not run the same settings, or sampled without --seed; `tension-run cache drop` "
              "the records you do not want, or rerun their stories", file=sys.stderr)
    if report.damaged:
        print(f"error: {len(report.damaged)} damaged source records were skipped (listed above); a run from DST "
              "asks again for them", file=sys.stderr)
    return EXIT_FAILED


def _file_id(path: Path) -> tuple[int, int] | None:
    """The file's device and inode (two names of one file have the same), or None
    when there is no such file."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


@contextlib.contextmanager
def _merge_advice(sources: list[Path], dst: Path) -> Iterator[None]:
    """A cache error met while merging, with the way on said for the merge (a run's
    words, "--cache NEW", name a flag the merge does not have)."""
    from tension.cache.failures import OTHER_CACHE, RERUN_WITH_NEW

    try:
        yield
    except CacheError as e:
        said = str(e)
        if RERUN_WITH_NEW in said:
            bad = next((str(p) for p in (*sources, dst) if f"cache at {p} " in said or f"cache at {p}:" in said),
                       None)
            said = said.replace(RERUN_WITH_NEW, f"then run the merge again with NEW in place of {bad}" if bad else
                                "then run the merge again with NEW in place of the damaged cache")
        said = said.replace(OTHER_CACHE, "(or give another DST)")
        raise type(e)(said) from e


def _check_local(path: Path) -> None:
    from tension.cache.mounts import check_local

    check_local(path)


def _model_matches(rec, model: str | None) -> bool | None:
    """Whether a record answers a request that asked for `model` (its `asked`; a
    server may answer under another name, which is `model` of the record). A record
    written before records named it: the model that answered (token counts name the
    model asked for); None for a judged-position record that names no model."""
    from tension.cache.records import JudgedPosition

    if model is None:
        return True
    asked = getattr(rec, "asked", "")
    if asked:
        return asked == model
    if isinstance(rec, JudgedPosition):
        return None
    return getattr(rec, "model", None) == model


def _existing(path) -> Path:
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
        print(f"{report.unreached} good records found in pages no database reaches (recover keeps them)")


def _given_cache(args, verb: str) -> str | None:
    """The cache folder given as PATH or as --cache (either form, in every cache verb
    that opens one cache); both, naming two folders, is a usage error."""
    path, flag = getattr(args, "path", None), getattr(args, "cache", None)
    if path and flag and os.path.realpath(path) != os.path.realpath(flag):
        raise ConfigError(f"{verb}: two caches given, {path} and --cache {flag}: give one")
    return path or flag


def _stats_flags(p) -> None:
    p.add_argument("path", nargs="?", metavar="PATH",
                   help="LMDB cache folder (default: ~/.cache/tension-run/llm.lmdb); --cache PATH says the same")
    p.add_argument("--cache", metavar="PATH", help="LMDB cache folder (the same as PATH)")


_verify_flags = _stats_flags


def _recover_flags(p) -> None:
    p.add_argument("src", metavar="SRC", help="the damaged cache folder (only read)")
    p.add_argument("dst", metavar="DST", help="the new cache folder (must not exist, or be empty)")


def _drop_flags(p) -> None:
    p.add_argument("path", nargs="?", metavar="PATH",
                   help="LMDB cache folder (default: the one --run DIR's run.json names, else "
                        "~/.cache/tension-run/llm.lmdb); --cache PATH says the same")
    p.add_argument("--cache", metavar="PATH", help="LMDB cache folder (the same as PATH)")
    p.add_argument("--model", metavar="MODEL", help="the records of the requests that asked for this model (a server "
                        "answering under another name does not change them)")
    p.add_argument("--role", choices=tuple(ROLE_DBS),
                   help="the records of this role: generation (endings), judge (verdicts), tokenize (token counts)")
    p.add_argument("--run", metavar="DIR", help="the records a score run folder's positions were scored from "
                                                "(positions.jsonl, or positions.partial.jsonl of a stopped run)")
    p.add_argument("--yes", action="store_true", help="drop them (without it: only count them)")


def _merge_flags(p) -> None:
    p.add_argument("sources", nargs="+", metavar="SRC", help="a cache folder to copy from (only read)")
    p.add_argument("dst", metavar="DST", help="the cache folder to merge into (made when missing)")


_ENV = "environment: XDG_CACHE_HOME moves ~/.cache, where the default cache is."
VERBS = [Verb("cache stats", cmd_cache_stats, _stats_flags, (), frozenset({"path", "cache"}), _ENV),
         Verb("cache verify", cmd_cache_verify, _verify_flags, (), frozenset({"path", "cache"}), _ENV),
         Verb("cache recover", cmd_cache_recover, _recover_flags, (), frozenset({"src", "dst"})),
         Verb("cache drop", cmd_cache_drop, _drop_flags, (),
              frozenset({"path", "cache", "model", "role", "run", "yes"}), _ENV),
         Verb("cache merge", cmd_cache_merge, _merge_flags, (), frozenset({"sources", "dst"}))]
