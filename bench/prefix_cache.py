"""The prefix-cache model (core/pipelines/prefix/) against the real engine: each
workload is scored by `tension.score` on the embedded vLLM server, the server's
hit rate is the delta of its /metrics counters, and the model replays the same
run (the token ids of every prompt sent, from the server's /tokenize, in the
scheduler's order and concurrency) to predict it.

Server (its own cache folder and port, so no other run shares its prefix cache):
    XDG_CACHE_HOME=/tmp/pc tension-run serve --embedded --port 8799 [--block-size 128] [--kv-blocks 80]
Client:
    .venv/bin/python bench/prefix_cache.py --base-url http://127.0.0.1:8799 --log SERVER_LOG \
        [--workloads small,judge,interleaved] [--json out.json]

The server's block size and KV blocks come from its log (``--log``, the path
`serve` prints), or --block-size / --kv-blocks.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tension.testing.bench import finish, loadavg
from tension.testing.prefix_check import WORKLOADS, run_workload, server_blocks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--log", help="the server's log (block size and KV blocks are read from it)")
    ap.add_argument("--block-size", type=int)
    ap.add_argument("--kv-blocks", type=int)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    block, blocks = server_blocks(a.log) if a.log else (128, 0)
    block, blocks = a.block_size or block, a.kv_blocks or blocks
    if not blocks:
        ap.error("give --log or --kv-blocks")
    print(f"server {a.base_url}: block size {block}, KV blocks {blocks}; load {loadavg()}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="prefix-cache-") as tmp:
        for name in a.workloads.split(","):
            row = run_workload(name, a.base_url.rstrip("/"), block, blocks, Path(tmp))
            rows.append(row)
            print(f"{name:<12} B={block:<4} C={blocks:<6} positions {row['positions']:>3}  measured "
                  f"{row['measured_hit_rate']:.4f} ({row['measured_hits']:,}/{row['measured_queries']:,})  predicted "
                  f"{row['predicted_hit_rate']:.4f} ({row['predicted_hits']:,}/{row['predicted_queries']:,})  "
                  f"{row['points_off']:+.2f} points  preemptions {row['preemptions']}  {row['seconds']} s", flush=True)
    finish(rows, a.json)
    return 0 if all(abs(r["points_off"]) <= 3 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
