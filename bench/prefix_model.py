"""The prefix-cache model on a paper-scale corpus: concurrency × KV capacity → hit
rate and prompt tokens computed over the ideal, on the paper's H200 setup (blocks
of 16), and how long the model takes.

    .venv/bin/python bench/prefix_model.py CORPUS --tokenizer TOKENIZER.json [--json out.json]

Each cell is `tension.estimate(CORPUS, gpu_profile="h200", ...)` with the paper's
settings (n = 100, 150 tokens, 64 generation and 512 judge requests in flight per
server) but the cell's concurrency and KV blocks. No server is contacted.
"""

from __future__ import annotations

import argparse
import sys
import time

import tension
from tension.testing.bench import finish, loadavg

CONCURRENCY = [(8, 128), (64, 512), (256, 2048)]  # (generation, judge) requests in flight
KV = [300, 1_000, None, 20_000, 100_000]  # None: the profile's (5,226 and 10,977 blocks)
BLOCKS = [16, 32, 128]  # at the default concurrency and the profile's KV bytes


def cell(corpus: str, tokenizer: str, gen_c: int, judge_c: int, kv: int | None, block: int = 16,
         warm: bool = True, min_words: int = 500) -> dict:
    t0 = time.perf_counter()
    r = tension.estimate(corpus, tokenizer=tokenizer, model="Qwen/Qwen3-32B", judge_model="Qwen/Qwen3-8B",
                         base_url="http://127.0.0.1:9", gpu_profile="h200", kv_blocks=kv, block_size=block,
                         progress=False, gen_concurrency=gen_c, judge_concurrency=judge_c, warm_judge=warm,
                         min_words=min_words)
    pc = r.estimate.prefix_cache
    assert pc is not None
    return {"gen_concurrency": gen_c, "judge_concurrency": judge_c, "block_size": block, "warm_judge": warm,
            "kv_blocks": pc.kv_blocks,
            "positions": pc.positions, "hit_rate": pc.hit_rate, "computed": pc.computed,
            "ideal": pc.ideal_computed, "over_ideal": pc.computed / pc.ideal_computed,
            "roles": {k: {"hit_rate": v.hit_rate, "over_ideal": v.over_ideal, "computed": v.computed}
                      for k, v in pc.roles.items()},
            "model_seconds": pc.seconds, "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true", help="the default concurrency only")
    ap.add_argument("--min-words", type=int, default=500, help="the word filter (default: the paper's 500)")
    a = ap.parse_args(argv)
    print(f"load {loadavg()}", flush=True)
    rows = []
    cells = [(g, j, kv, 16, True) for g, j in ([(64, 512)] if a.quick else CONCURRENCY) for kv in KV]
    cells += [(64, 512, None, b, True) for b in BLOCKS if b != 16] + [(64, 512, None, 16, False)]
    for gen_c, judge_c, kv, block, warm in cells:
        row = cell(a.corpus, a.tokenizer, gen_c, judge_c, kv, block, warm, a.min_words)
        rows.append(row)
        g, j = row["roles"]["generation"], row["roles"]["judge"]
        kvs = " / ".join(f"{v:,}" for v in row["kv_blocks"].values())
        print(f"B {block:<4} {'' if warm else 'no warm-up '}{gen_c:>4} / {judge_c:<5} KV {kvs:<16} hit {row['hit_rate']:.4f}  computed/ideal "
              f"{row['over_ideal']:.3f}  (generation {g['hit_rate']:.4f}, {g['over_ideal']:.1f}x; judge "
              f"{j['hit_rate']:.4f}, {j['over_ideal']:.3f}x)  model {row['model_seconds']:.1f} s "
              f"of {row['seconds']:.1f} s", flush=True)
    finish(rows, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
