"""Scale-out: `score` throughput with 1, 2 and 3 replicas whose capacity is fixed,
through the vLLM router and, side by side in the same run, through another
checkout's code (e.g. the client-side routing this project had before).

Each replica is the loopback test server (`tension.testing.openai_server`) in its own process with ``--delay D
--max-concurrent K``: it serves at most K chat requests at once and each takes D
seconds, so one replica completes at most K / D chat requests per second,
whatever the client sends — a stand-in for a GPU-bound vLLM server, and the
servers, not the client, are the bottleneck. The client is the whole
``score_async`` pipeline (cache on, fresh cache per run) on a synthetic corpus
(tension.testing.corpus.make_corpus), the judge on the same replicas (``--base-url
A,B,C``). Lanes are ``--gen-concurrency`` and ``--judge-concurrency`` per replica
(above K, so each server's queue stays full).

Each run is a child process of a contender's interpreter (``--contender
NAME=PYTHON``; default: this checkout's), which imports that interpreter's
tension-run: so two code versions meet the same replicas, interleaved
(1, 2, 3 replicas × each contender, repeated). Throughput is (generation + judge
requests) / wall time of ``score_async`` in the child (tokenize requests and
writing the outputs included, interpreter start-up not). The table shows the
median over repeats, the ratio to one replica, the ratio to the first contender,
each replica's share of the requests, and the "split bound": total / busiest
replica's requests, the speed-up the story split allows.

Run from the repository root::

    python bench/replicas.py --stories 12 --repeats 3 \
        --contender router=python --contender ours=OTHER_PYTHON

(OTHER_PYTHON: the interpreter of another checkout's virtualenv.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tension.testing.corpus import make_corpus


def start_replica(delay: float, capacity: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tension.testing.openai_server", "--port", "0", "--model", "test-gen",
         "--model", "test-judge", "--delay", str(delay), "--max-concurrent", str(capacity)],
        stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"a replica did not start: {line!r}")
    return proc, line.removeprefix("listening on ")


CHILD = r"""
import asyncio, json, sys, time, tempfile
import tension
urls, corpus, endings, gc, jc = json.loads(sys.argv[1])
async def main():
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        cfg = {
            "base_url": ",".join(urls), "model": "test-gen", "judge_model": "test-judge",
            "cache": f"{tmp}/cache", "endings": endings, "seed": 1, "progress": False, "report": False,
            "gen_concurrency": gc, "judge_concurrency": jc}
        t0 = time.perf_counter()
        s = (await tension.score_async(corpus, out=f"{tmp}/out", **cfg)).summary
        return s, time.perf_counter() - t0
s, wall = asyncio.run(main())
if s.status != "complete":
    raise SystemExit(f"run with {len(urls)} replica(s) failed: {s.error}")
figs = [f for role in ("generation", "judge") for f in s.replicas.get(role, [])]
def served(u):
    mine = [f for f in figs if f["url"] == u]
    # behind one router both roles list the worker's whole count; alone, each role its own
    return max(f["requests"] for f in mine) if any(f.get("router") for f in mine) else sum(f["requests"] for f in mine)
print(json.dumps({"wall": wall, "requests": s.requests["generation"] + s.requests["judge"],
                  "positions": s.positions, "per_replica": [served(u) for u in urls]}))
"""


def one_run(python: str, urls: list[str], corpus: Path, args) -> dict:
    r = subprocess.run([python, "-c", CHILD, json.dumps([urls, str(corpus), args.endings, args.gen_concurrency,
                                                         args.judge_concurrency])],
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"{python}: run with {len(urls)} replica(s) failed:\n{r.stderr[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out.update(replicas=len(urls), req_s=out["requests"] / out["wall"])
    return out


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
    ap.add_argument("--contender", action="append", metavar="NAME=PYTHON",
                    help="an interpreter whose tension-run to run (repeatable; default: this one's)")
    ap.add_argument("--json", metavar="PATH", help="also write config + results as JSON to PATH")
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.replicas.split(",")]
    contenders = dict(c.split("=", 1) for c in (args.contender or [f"this={sys.executable}"]))

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
                    for name, python in contenders.items():
                        r = one_run(python, urls[:n], corpus, args)
                        r.update(repeat=rep, contender=name)
                        runs.append(r)
                        print(f"  run {rep + 1}: {name}, {n} replica(s): {r['requests']} requests in "
                              f"{r['wall']:.2f} s = {r['req_s']:.1f} req/s; per replica {r['per_replica']}",
                              flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)
            p.stdout.close()
    rows = table(runs, counts, list(contenders), args.capacity / args.delay)
    if args.json:
        Path(args.json).write_text(json.dumps({"config": config, "runs": runs, "rows": rows}, indent=2))
    return 0


def table(runs: list[dict], counts: list[int], names: list[str], ceiling: float) -> list[dict]:
    first = names[0]
    base = {name: statistics.median(r["req_s"] for r in runs if r["replicas"] == counts[0] and r["contender"] == name)
            for name in names}
    print(f"\n{'contender':>10} | {'replicas':>8} | {'req/s (median)':>14} | {'best':>7} | {'vs 1':>5} | "
          f"{'vs ' + first:>9} | {'split bound':>11} | {'of capacity':>11} | share per replica (last run)")
    rows = []
    for n in counts:
        ref = statistics.median(r["req_s"] for r in runs if r["replicas"] == n and r["contender"] == first)
        for name in names:
            mine = [r for r in runs if r["replicas"] == n and r["contender"] == name]
            med = statistics.median(r["req_s"] for r in mine)
            best = max(r["req_s"] for r in mine)
            last = mine[-1]["per_replica"]
            share = " / ".join(f"{x / sum(last):.2f}" for x in last)
            bound = sum(last) / max(last)  # the speed-up the story split allows: the busiest finishes last
            rows.append({"contender": name, "replicas": n, "req_s_median": med, "req_s_best": best,
                         "vs_one": med / base[name], "vs_first": med / ref, "split_bound": bound,
                         "of_capacity": med / (n * ceiling), "share_last": last})
            print(f"{name:>10} | {n:>8} | {med:>14.1f} | {best:>7.1f} | {med / base[name]:>4.2f}x | "
                  f"{med / ref:>8.2f}x | {bound:>10.2f}x | {med / (n * ceiling):>10.0%} | {share}")
    return rows


if __name__ == "__main__":
    sys.exit(main())
