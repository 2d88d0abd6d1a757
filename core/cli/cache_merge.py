"""`cache merge`: join the caches of several machines (each ran its `score --shard`
on a cache of its own local disk) into one, and say per database what was copied,
already there, conflicting, damaged and left out (cache/merge.py does the merge)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from tension.core.cli.cache_given import MAX_LISTED, existing
from tension.core.cli.messages import EXIT_FAILED, EXIT_OK
from tension.core.errors import CacheError, ConfigError
from tension.core.signals import stops_raise

__all__ = ["cmd_cache_merge", "merge_flags"]


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

    sources = [existing(Path(s)) for s in args.sources]
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
        # only those DST holds no good copy of are asked again: another source's, or DST's own, stands in for the rest
        held = len(report.damaged) - report.lost
        print(f"error: {len(report.damaged)} damaged source records were skipped (listed above); a run from DST "
              + (f"asks again for {report.lost} of them (DST holds a good copy of the other {held}, its own or "
                 "another source's)" if held else "asks again for them"), file=sys.stderr)
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


def merge_flags(p) -> None:
    p.add_argument("sources", nargs="+", metavar="SRC", help="a cache folder to copy from (only read)")
    p.add_argument("dst", metavar="DST", help="the cache folder to merge into (made when missing)")
