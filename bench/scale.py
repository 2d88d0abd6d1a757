"""Cost that grows linearly: the whole `score` pipeline on synthetic corpora of
growing size against the fast stub server (tension.testing.stub_server), one child
process per run (so peak RSS is the run's own).

For each corpus size (default 100, 300, 1000 stories; tension.testing.corpus.make_corpus,
endings 10): a cold run into a fresh cache, then the same command again (the cached
rerun). Per run: wall time and client CPU per judged ending, peak RSS, cache bytes
on disk per position, the time spent writing the outputs (run.json's timing), and
the rerun's wall time as a share of the cold one. Each column should stay flat as
the corpus grows (issue 19); the table shows the ratio of the largest to the
smallest corpus beside each.

Run from the repository root::

    python bench/scale.py                      # 100, 300, 1000 stories
    python bench/scale.py --sizes 50,100 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from tension.testing.corpus import make_corpus
from tension.testing.stub_server import start_stub  # the same stub process as bench/client.py's

CHILD = r"""
import asyncio, json, resource, sys, time
import tension
base, corpus, cache, out, endings = sys.argv[2:7]
cfg = {"base_url": base, "model": "bench-gen", "judge_model": "bench-judge", "endings": int(endings),
       "cache": cache, "progress": False, "report": False, "seed": 1,
       "gen_concurrency": 64, "judge_concurrency": 256, "tokenize_concurrency": 64}
c0, t0 = time.process_time(), time.perf_counter()
s = asyncio.run(tension.score_async(corpus, out=out, **cfg)).summary
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
if s.status != "complete":
    raise SystemExit(f"score run {s.status}: {s.error}")
run = json.loads((__import__("pathlib").Path(out) / "run.json").read_text())
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
kb = lambda k: int(status.get(k, "0 kB").split()[0]) / 1024
print(json.dumps({"rss_anon_mb": kb("RssAnon"), "rss_file_mb": kb("RssFile"), "hwm_mb": kb("VmHWM"),
                  "wall": wall, "cpu": cpu, "positions": s.positions, "stories": s.stories,
                  "requests": s.requests, "timing": {"outputs_seconds": run.get("outputs_seconds")},
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def one(base: str, corpus: Path, cache: Path, out: Path, endings: int) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, "-", base, str(corpus), str(cache),
                        str(out), str(endings)], capture_output=True, text=True, timeout=7200)
    if r.returncode != 0:
        raise SystemExit(f"run failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,300,1000", help="corpus sizes in stories (default 100,300,1000)")
    ap.add_argument("--endings", type=int, default=10, help="endings per position (default 10)")
    ap.add_argument("--json", metavar="PATH", help="also write config + results as JSON to PATH")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    print("config: " + json.dumps({**vars(args), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                                   "python": platform.python_version(), "loadavg": os.getloadavg()}))
    stub, base = start_stub(0, None, False)
    rows = []
    try:
        for n in sizes:
            with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
                t = Path(tmp)
                corpus = make_corpus(t / "corpus.jsonl", n, seed=0)
                cold = one(base, corpus, t / "cache", t / "out", args.endings)
                cache_bytes = dir_bytes(t / "cache")
                warm = one(base, corpus, t / "cache", t / "out", args.endings)
            judged = cold["requests"]["judge"]
            row = {"stories": n, "positions": cold["positions"], "judged": judged,
                   "wall_us_per_judged": 1e6 * cold["wall"] / judged, "cpu_us_per_judged": 1e6 * cold["cpu"] / judged,
                   "peak_rss_mb": cold["peak_rss_mb"], "cache_kb_per_position": cache_bytes / 1024 / cold["positions"],
                   "write_s_per_1k_positions": 1000 * cold["timing"].get("outputs_seconds", float("nan"))
                   / cold["positions"], "rerun_share": warm["wall"] / cold["wall"],
                   "rerun_requests": sum(v for k, v in warm["requests"].items() if k != "models"),
                   "cold": cold, "warm": warm}
            rows.append(row)
            print(f"  {n} stories: {cold['positions']} positions, {judged} judged in {cold['wall']:.1f} s "
                  f"(cpu {cold['cpu']:.1f} s), peak RSS {cold['peak_rss_mb']:.0f} MB (at the end: anonymous "
                  f"{cold['rss_anon_mb']:.0f} MB, file-backed {cold['rss_file_mb']:.0f} MB), "
                  f"cache {cache_bytes / 1e6:.1f} MB; "
                  f"rerun {warm['wall']:.2f} s", flush=True)
    finally:
        stub.terminate()
        stub.wait(timeout=10)
    cols = [("wall_us_per_judged", "wall µs/judged"), ("cpu_us_per_judged", "CPU µs/judged"),
            ("peak_rss_mb", "peak RSS MB"), ("cache_kb_per_position", "cache KB/position"),
            ("write_s_per_1k_positions", "write s/1k pos"), ("rerun_share", "rerun / cold")]
    print(f"\n{'stories':>8} | {'positions':>9} | " + " | ".join(f"{h:>17}" for _, h in cols))
    for r in rows:
        print(f"{r['stories']:>8} | {r['positions']:>9} | " + " | ".join(f"{r[k]:>17.3f}" for k, _ in cols))
    first, last = rows[0], rows[-1]
    print(f"{'last/first':>8} | {'':>9} | " + " | ".join(
        f"{(last[k] / first[k] if first[k] else float('nan')):>16.2f}x" for k, _ in cols))
    if args.json:
        Path(args.json).write_text(json.dumps({"config": vars(args), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
