"""The LMDB cache: reads/s and writes/s at realistic value sizes, and a cached rerun
of a corpus against its cold run.

1. **Store throughput** (`tension.cache.store.Store`, a fresh store in a temporary
   folder): records of the two sizes the cache holds —
   - an `Endings` record of ``--endings`` (100) endings of ≈ 600 characters each
     (≈ 60 KB of msgpack: the paper's 2–3 sentence endings),
   - a `Verdict` record ("Y", usage, timings: ≈ 50 B) —
   written with ``put_many`` in group commits of ``--batch`` records (as score's
   committer does, every ≤ 50 ms), then read back with ``get_many`` in random key
   order, ``--batch`` keys per read transaction, records decoded. Three times,
   side by side in one run: values compressed in their checksummed frame (`zstd`:
   what the store writes since issue 28), framed with their CRC-32 uncompressed
   (`crc32`: as written from issue 16 to 28) and plain msgpack (`none`: as written
   before checksums; read without a check). To write the older forms this script
   swaps the store's `records.encode`. The ratios are compression's cost (zstd vs
   crc32) and the checksum's (crc32 vs none) on the write and the read path. The
   Endings texts are real prose when ../shared/data/pd_short_stories.jsonl is there
   (bench/cache_size.py's `Prose`), else a 14-word vocabulary.
2. **Cached rerun** (goal: 0 requests, < 2 % of the cold time): `score` on a
   synthetic corpus of ``--stories`` stories (tension.testing.corpus.make_corpus) against
   the loopback test server (tension.testing.openai_server), cold (empty cache), then the
   same command again (every answer from the cache; `--model` given, so not even
   the model list is asked), then once more with the cache's `positions` database
   dropped (the per-verdict path a cache written before it existed takes). Reports are off in both (`--no-report`): the figures
   compare the pipeline, not matplotlib. The rerun is also timed on a copy of the
   cache rewritten uncompressed (as before issue 28), alternated, median of 3.

Run from the repository root::

    python bench/lmdb_cache.py
    python bench/lmdb_cache.py --stories 100 --rerun-endings 10 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

BANNER = 60


def _endings(rng: random.Random, n: int):
    from cache_size import _SHARED, Prose

    from tension.cache.records import Endings, Usage

    if _SHARED.is_file():
        texts = Prose(_SHARED, rng).endings(n, 600)
    else:
        words = "the keeper watched a grey boat drift past the harbour wall while rain fell on lanterns".split()
        texts = [" ".join(rng.choice(words) for _ in range(110))[:600] for _ in range(n)]
    return Endings(texts=texts, finish_reasons=["stop"] * n, model="Qwen/Qwen3-32B",
                   usage=Usage(prompt_tokens=1500, completion_tokens=n * 70, requests=1), created=time.time(),
                   seconds=12.5)


def _verdict():
    from tension.cache.records import Usage, Verdict

    return Verdict(text="Y", finish_reason="stop", model="Qwen/Qwen3-8B",
                   usage=Usage(prompt_tokens=2100, completion_tokens=1, cached_tokens=2048, requests=1),
                   created=time.time(), seconds=0.21)


FORMS = ("zstd", "crc32", "none")  # what the store writes, then the older forms


@contextlib.contextmanager
def _values(form: str):
    """Values written in `form` while inside: "zstd" as the store writes them, "crc32"
    uncompressed in their checksummed frame (before issue 28), "none" as plain msgpack
    (before checksums)."""
    import functools

    import msgspec

    from tension.cache import records

    encode = records.encode
    if form == "crc32":
        records.encode = functools.partial(encode, compress=False)
    elif form == "none":
        records.encode = msgspec.msgpack.Encoder().encode
    try:
        yield
    finally:
        records.encode = encode


def store_throughput(kind: str, count: int, batch: int, n_endings: int, repeats: int, form: str = "zstd") -> dict:
    from tension.cache import records
    from tension.cache.keys import request_key
    from tension.cache.store import Store

    rng = random.Random(0)
    rec = _endings(rng, n_endings) if kind == "endings" else _verdict()
    with _values(form):
        size = len(records.encode(rec))
    db = "endings" if kind == "endings" else "verdicts"
    writes, reads = [], []
    for r in range(repeats):
        keys = [request_key("chat", {"i": i, "r": r}) for i in range(count)]
        with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "c.lmdb") as store, _values(form):
            t0 = time.perf_counter()
            for i in range(0, count, batch):
                store.put_many([(db, k, rec) for k in keys[i:i + batch]])
            writes.append(count / (time.perf_counter() - t0))
            order = keys[:]
            rng.shuffle(order)
            t0 = time.perf_counter()
            for i in range(0, count, batch):
                got = store.get_many(db, order[i:i + batch])
            reads.append(count / (time.perf_counter() - t0))
            assert all(g is not None for g in got)
            stored = _stored(store, db, order[:3])
            assert all(records.is_checked(v) == (form != "none") for v in stored)
            assert all(records.is_compressed(v) == (form == "zstd") for v in stored)
    return {"kind": kind, "form": form, "value_bytes": size, "records": count, "batch": batch,
            "writes_per_s": statistics.median(writes), "reads_per_s": statistics.median(reads),
            "write_mb_s": statistics.median(writes) * size / 1e6, "read_mb_s": statistics.median(reads) * size / 1e6}


def _stored(store, db: str, keys) -> list[bytes]:
    """The stored bytes (checked that the contender wrote what it says)."""
    with store.env.begin(db=store.env.open_db(db.encode(), create=False)) as txn:
        return [txn.get(k) for k in keys]


def cached_rerun(stories: int, endings: int) -> dict:
    import tension
    from tension.testing.corpus import make_corpus
    from tension.testing.openai_server import LoopbackServer

    with tempfile.TemporaryDirectory() as tmp, LoopbackServer(model=["test-gen"], record=True) as srv:
        tmp = Path(tmp)
        corpus = make_corpus(tmp / "corpus.jsonl", stories, seed=1)
        cfg = {"base_url": srv.base_url, "model": "test-gen", "cache": str(tmp / "cache"), "endings": endings,
               "seed": 1, "progress": False, "report": False}  # tension.score's keywords
        t0 = time.perf_counter()
        cold = tension.score(corpus, out=tmp / "cold", **cfg).summary
        cold_s = time.perf_counter() - t0
        cold_requests = srv.count()
        srv.reset_records()
        t0 = time.perf_counter()
        warm = tension.score(corpus, out=tmp / "warm", **cfg).summary
        warm_s = time.perf_counter() - t0
        warm_requests = srv.count()
        compression = _rerun_compressed_vs_not(cfg, corpus, tmp)
        # The same rerun on a cache without the judged-position records (as written
        # before they existed): every verdict key is built and read, and the
        # records are written back.
        _drop_db(tmp / "cache", b"positions")
        srv.reset_records()
        t0 = time.perf_counter()
        fallback = tension.score(corpus, out=tmp / "fallback", **cfg).summary
        fallback_s = time.perf_counter() - t0
        cold_bytes = (tmp / "cold" / "positions.jsonl").read_bytes()
        same = cold_bytes == (tmp / "warm" / "positions.jsonl").read_bytes()
        same_fallback = cold_bytes == (tmp / "fallback" / "positions.jsonl").read_bytes()
        return {"stories": stories, "endings": endings, "positions": cold.positions,
                "cold_seconds": cold_s, "cold_requests": cold_requests, "cold_chat": cold.requests,
                "rerun_seconds": warm_s, "rerun_requests": warm_requests, "ratio": warm_s / cold_s,
                "fallback_seconds": fallback_s, "fallback_requests": srv.count(), "fallback_ratio": fallback_s / cold_s,
                "same_positions_bytes": same, "same_fallback_bytes": same_fallback,
                "status": [cold.status, warm.status, fallback.status], "compression": compression}


def _rerun_compressed_vs_not(cfg, corpus: Path, tmp: Path, repeats: int = 3) -> dict:
    """The cached rerun on the cache as written (every value compressed) and on a
    copy whose values were rewritten uncompressed in their checksummed frame (as
    before issue 28), alternated; medians of `repeats` each."""
    import shutil

    import lmdb

    import tension
    from tension.cache import records

    shutil.copytree(tmp / "cache", tmp / "plain")
    env = lmdb.open(str(tmp / "plain"), max_dbs=8, map_size=1 << 30)
    for name in (b"endings", b"verdicts", b"tokens", b"positions"):
        db = env.open_db(name)
        with env.begin(write=True, db=db) as txn:
            for k, v in list(txn.cursor()):
                txn.put(k, records.encode(records.decode(v), compress=False))
    env.close()
    cfg_plain = {**cfg, "cache": str(tmp / "plain")}
    times: dict[str, list[float]] = {"zstd": [], "crc32": []}
    for i in range(repeats):
        for name, c in (("zstd", cfg), ("crc32", cfg_plain)):
            t0 = time.perf_counter()
            assert tension.score(corpus, out=tmp / f"rerun-{name}-{i}", **c).status == "complete"
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"zstd_seconds": med["zstd"], "crc32_seconds": med["crc32"], "ratio": med["zstd"] / med["crc32"],
            "all": times}


def _drop_db(path: Path, name: bytes) -> None:
    import lmdb

    env = lmdb.open(str(path), max_dbs=8)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(name, txn=txn), delete=True)
    env.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endings", type=int, default=100, help="endings per Endings record (default 100)")
    ap.add_argument("--records", type=int, default=20_000, help="verdict records written and read")
    ap.add_argument("--endings-records", type=int, default=2_000, help="Endings records written and read")
    ap.add_argument("--batch", type=int, default=100, help="records per write / read transaction")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--stories", type=int, default=100, help="stories of the rerun corpus")
    ap.add_argument("--rerun-endings", type=int, default=10, help="endings per position in the rerun")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--no-rerun", action="store_true", help="only the store throughput")
    args = ap.parse_args()

    import lmdb

    print("=" * BANNER)
    print(f"LMDB cache bench, {platform.node()} ({os.cpu_count()} CPUs), python {platform.python_version()}, "
          f"py-lmdb {lmdb.__version__} (LMDB {'.'.join(map(str, lmdb.version()))}), "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"config: {vars(args)}")
    print("=" * BANNER, flush=True)

    rows = []
    for kind, count, batch in (("verdicts", args.records, args.batch),
                               ("endings", args.endings_records, min(args.batch, 10))):
        # alternated, so that a change of load on the shared machine hits every form alike
        runs = [[store_throughput(kind, count, batch, args.endings, 1, form) for form in FORMS]
                for _ in range(args.repeats)]
        for i in range(len(FORMS)):
            row = dict(runs[0][i])
            for f in ("writes_per_s", "reads_per_s", "write_mb_s", "read_mb_s"):
                row[f] = statistics.median(r[i][f] for r in runs)
            row["write_us"], row["read_us"] = 1e6 / row["writes_per_s"], 1e6 / row["reads_per_s"]
            rows.append(row)
    print(f"| {'record':<9} | {'form':<6} | {'value B':>8} | {'batch':>5} | {'writes/s':>10} | {'µs/write':>8} | "
          f"{'reads/s':>10} | {'µs/read':>8} |")
    print(f"|{'-' * 11}|{'-' * 8}|{'-' * 9}:|{'-' * 6}:|{'-' * 11}:|{'-' * 9}:|{'-' * 11}:|{'-' * 9}:|")
    for r in rows:
        print(f"| {r['kind']:<9} | {r['form']:<6} | {r['value_bytes']:>8,} | {r['batch']:>5} | "
              f"{r['writes_per_s']:>10,.0f} | {r['write_us']:>8.1f} | {r['reads_per_s']:>10,.0f} | "
              f"{r['read_us']:>8.1f} |", flush=True)
    for i in range(0, len(rows), len(FORMS)):
        z, c, n = rows[i:i + len(FORMS)]
        print(f"{z['kind']}: zstd vs crc32: value {z['value_bytes'] / c['value_bytes']:.3f}x, "
              f"writes {z['writes_per_s'] / c['writes_per_s']:.3f}x, reads {z['reads_per_s'] / c['reads_per_s']:.3f}x; "
              f"crc32 vs none: writes {c['writes_per_s'] / n['writes_per_s']:.3f}x, "
              f"reads {c['reads_per_s'] / n['reads_per_s']:.3f}x")
    if args.no_rerun:
        return 0

    rr = cached_rerun(args.stories, args.rerun_endings)
    print(f"\ncached rerun: {rr['stories']} stories, {rr['positions']} positions, n = {rr['endings']}")
    print(f"| {'run':<22} | {'wall s':>8} | {'HTTP requests':>13} | {'vs cold':>8} |")
    print(f"|{'-' * 24}|{'-' * 9}:|{'-' * 14}:|{'-' * 9}:|")
    print(f"| {'cold':<22} | {rr['cold_seconds']:>8.2f} | {rr['cold_requests']:>13,} | {1:>7.2%} |")
    print(f"| {'rerun':<22} | {rr['rerun_seconds']:>8.2f} | {rr['rerun_requests']:>13,} | {rr['ratio']:>7.2%} |")
    print(f"| {'rerun, no positions db':<22} | {rr['fallback_seconds']:>8.2f} | {rr['fallback_requests']:>13,} | "
          f"{rr['fallback_ratio']:>7.2%} |")
    ck = rr["compression"]
    print(f"rerun, median of 3 alternated: compressed {ck['zstd_seconds']:.3f} s, uncompressed {ck['crc32_seconds']:.3f} s "
          f"({ck['ratio']:.3f}x)")
    print(f"cold requests by kind: {rr['cold_chat']}; positions.jsonl identical: {rr['same_positions_bytes']} "
          f"(fallback: {rr['same_fallback_bytes']}); goal: 0 requests and < 2% of the cold time")
    if args.json:
        Path(args.json).write_text(json.dumps({"store": rows, "rerun": rr}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
