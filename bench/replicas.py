"""Scale-out: `score` throughput with 1, 2 and 3 replicas whose capacity is fixed.

Each replica is `tests/openai_server.py` in its own process with ``--delay D
--max-concurrent K``: it serves at most K chat requests at once and each takes D
seconds, so one replica completes at most K / D chat requests per second,
whatever the client sends — a stand-in for a GPU-bound vLLM server, and the
servers, not the client, are the bottleneck. The client is the whole
``score_async`` pipeline (one process, cache on, fresh cache per run) on a
synthetic corpus (tests/conftest.make_corpus) with the generation and judge
requests of every position routed by story affinity over the replicas
(``--base-url A,B,C``, the judge on the same replicas). Per-replica lanes are
``--gen-concurrency`` and ``--judge-concurrency`` (above K, so each server's queue
stays full).

Throughput is (generation + judge requests) / wall time of ``score_async``
(tokenize requests and writing the outputs included). Runs are interleaved
(1, 2, 3, 1, 2, 3, …); the table shows the median over repeats, the ratio to one
replica, each replica's share of the requests (from the run's per-replica
figures), and the "split bound": total / busiest replica's requests, the speed-up
the story split allows (story affinity keeps a story on one replica, so with few
stories the shares are uneven and the busiest replica finishes last).

Run from the repository root::

    /tmp/venv-8/bin/python bench/replicas.py
    /tmp/venv-8/bin/python bench/replicas.py --stories 4 --repeats 1 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import make_corpus  # noqa: E402

from tension.core.config import load_config  # noqa: E402
from tension.core.pipelines.score import score_async  # noqa: E402


def start_replica(delay: float, capacity: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "openai_server.py"), "--port", "0", "--model", "test-gen",
         "--model", "test-judge", "--delay", str(delay), "--max-concurrent", str(capacity)],
        stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"a replica did not start: {line!r}")
    return proc, line.removeprefix("listening on ")


async def one_run(urls: list[str], corpus: Path, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        cfg = load_config(None, {
            "base_url": ",".join(urls), "model": "test-gen", "judge_model": "test-judge",
            "cache": f"{tmp}/cache", "endings": args.endings, "seed": 1, "progress": False, "report": False,
            "gen_concurrency": args.gen_concurrency, "judge_concurrency": args.judge_concurrency})
        t0 = time.perf_counter()
        s = await score_async(cfg, corpus, f"{tmp}/out")
        wall = time.perf_counter() - t0
    if s.status != "complete":
        raise SystemExit(f"run with {len(urls)} replica(s) failed: {s.error}")
    req = s.requests["generation"] + s.requests["judge"]
    per = [sum(f["requests"] for role in ("generation", "judge") for f in s.replicas[role] if f["url"] == u)
           for u in urls]
    return {"replicas": len(urls), "wall": wall, "requests": req, "req_s": req / wall, "positions": s.positions,
            "per_replica": per}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", default="1,2,3", help="replica counts to compare (default 1,2,3)")
    ap.add_argument("--delay", type=float, default=0.1, help="seconds per chat request at a replica (default 0.1)")
    ap.add_argument("--capacity", type=int, default=8, help="chat requests a replica serves at once (default 8)")
    ap.add_argument("--stories", type=int, default=6, help="synthetic stories (default 6)")
    ap.add_argument("--endings", type=int, default=8, help="endings per position (default 8)")
    ap.add_argument("--gen-concurrency", type=int, default=16, help="per-replica generation lane (default 16)")
    ap.add_argument("--judge-concurrency", type=int, default=32, help="per-replica judge lane (default 32)")
    ap.add_argument("--repeats", type=int, default=2, help="runs per replica count, interleaved (default 2)")
    ap.add_argument("--json", metavar="PATH", help="also write config + results as JSON to PATH")
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.replicas.split(",")]

    config = {k: v for k, v in vars(args).items() if k != "json"}
    config.update(machine=f"{platform.system()} {platform.release()} {platform.machine()}, {os.cpu_count()} cores",
                  python=platform.python_version(), loadavg=os.getloadavg(),
                  capacity_per_replica_req_s=args.capacity / args.delay)
    print("config: " + json.dumps(config))

    procs, urls = [], []
    try:
        for _ in range(max(counts)):
            p, u = start_replica(args.delay, args.capacity)
            procs.append(p)
            urls.append(u)
        with tempfile.TemporaryDirectory(prefix="bench-replicas-corpus-") as tmp:
            corpus = make_corpus(Path(tmp) / "corpus.jsonl", args.stories, seed=0)
            runs = []
            for rep in range(args.repeats):
                for n in counts:
                    r = asyncio.run(one_run(urls[:n], corpus, args))
                    r["repeat"] = rep
                    runs.append(r)
                    print(f"  run {rep + 1}: {n} replica(s): {r['requests']} requests in {r['wall']:.2f} s "
                          f"= {r['req_s']:.1f} req/s; per replica {r['per_replica']}", flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)
            p.stdout.close()

    base = statistics.median(r["req_s"] for r in runs if r["replicas"] == counts[0])
    ceiling = args.capacity / args.delay
    print(f"\n{'replicas':>8} | {'req/s (median)':>14} | {'best':>7} | {'vs 1':>5} | {'split bound':>11} | "
          f"{'of capacity':>11} | share per replica (last run)")
    rows = []
    for n in counts:
        mine = [r for r in runs if r["replicas"] == n]
        med = statistics.median(r["req_s"] for r in mine)
        best = max(r["req_s"] for r in mine)
        last = mine[-1]["per_replica"]
        share = " / ".join(f"{x / sum(last):.2f}" for x in last)
        bound = sum(last) / max(last)  # the speed-up the story split allows: the busiest replica finishes last
        rows.append({"replicas": n, "req_s_median": med, "req_s_best": best, "vs_first": med / base,
                     "split_bound": bound, "of_capacity": med / (n * ceiling), "share_last": last})
        print(f"{n:>8} | {med:>14.1f} | {best:>7.1f} | {med / base:>4.2f}x | {bound:>10.2f}x | "
              f"{med / (n * ceiling):>10.0%} | {share}")
    if args.json:
        Path(args.json).write_text(json.dumps({"config": config, "runs": runs, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
