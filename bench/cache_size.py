"""Cache bytes on disk per position at paper settings, for docs/cost.md.

bench/scale.py measures the cache of real runs against the stub, whose endings are
short and fixed. This writes the records one paper-scale position leaves in the
cache (tension.cache.store.Store, as `score` writes them): one Endings record of n
endings of `--ending-chars` characters (the paper's 150-token cap; ~4.5 characters
a token), n Verdict records ("Y"/"N" with usage), one JudgedPosition record and one
TokenCount, under keys of the real size, in group commits of 512 like the run's
committer. It prints bytes of data.mdb per position, with and without logprobs.

    python bench/cache_size.py                     # n 100, 1,000 positions
    python bench/cache_size.py --endings 10 --positions 3000
"""

from __future__ import annotations

import argparse
import hashlib
import random
import tempfile
import time
from pathlib import Path

from tension.cache import records
from tension.cache.store import Store

_WORDS = ("the harbour keeper watched rain fall on the lanterns while somebody called her name from the road "
          "and a letter waited under the stone by the chapel door").split()


def key(*parts) -> bytes:
    return b"\x01" + hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()


def position_records(rng: random.Random, p: int, n: int, chars: int, logprobs: bool):
    texts = []
    for _ in range(n):
        words = []
        while sum(len(w) + 1 for w in words) < chars * rng.uniform(0.6, 1.4):
            words.append(rng.choice(_WORDS))
        texts.append(" ".join(words).capitalize() + ".")
    u = records.Usage(prompt_tokens=rng.randint(800, 4000), completion_tokens=150 * n, requests=1)
    yield "endings", key("e", p), records.Endings(texts=texts, finish_reasons=["stop"] * n, model="Qwen/Qwen3-32B",
                                                  usage=u, created=time.time(), seconds=12.5)
    lps = []
    answers = []
    for i in range(n):
        a = rng.choice("YN")
        lp = {"Y": -0.1, "N": -2.4, "Yes": -5.0, "No": -6.1} if logprobs else None
        answers.append(a)
        lps.append(lp)
        yield "verdicts", key("v", p, i), records.Verdict(
            text=a, finish_reason="stop", model="Qwen/Qwen3-8B", first_logprobs=lp, created=time.time(),
            usage=records.Usage(prompt_tokens=rng.randint(2500, 4200), completion_tokens=1, cached_tokens=2400,
                                requests=1), seconds=0.4)
    yield "positions", key("p", p), records.JudgedPosition(
        texts=answers, first_logprobs=lps if logprobs else [], judged=n, created=time.time(),
        usage=records.Usage(prompt_tokens=300_000, completion_tokens=n, cached_tokens=240_000, requests=n))
    yield "tokens", key("t", p), records.TokenCount(count=rng.randint(200, 5000), model="Qwen/Qwen3-32B", created=time.time())


def measure(positions: int, n: int, chars: int, logprobs: bool) -> float:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="cache-size-") as tmp:
        with Store(Path(tmp) / "llm.lmdb") as store:
            batch = []
            for p in range(positions):
                batch.extend(position_records(rng, p, n, chars, logprobs))
                if len(batch) >= 512:
                    store.put_many(batch)
                    batch = []
            store.put_many(batch)
            used = (store.env.info()["last_pgno"] + 1) * store.env.stat()["psize"]
            return max(used, store.file_bytes()) / positions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--positions", type=int, default=1000)
    ap.add_argument("--endings", type=int, default=100)
    ap.add_argument("--ending-chars", type=int, default=450, help="mean characters of an ending")
    args = ap.parse_args()
    for logprobs in (False, True):
        b = measure(args.positions, args.endings, args.ending_chars, logprobs)
        print(f"{args.positions:,} positions, n = {args.endings}, endings of ~{args.ending_chars} chars, "
              f"judge {'with' if logprobs else 'without'} logprobs: {b / 1024:,.1f} KB of data.mdb per position")


if __name__ == "__main__":
    main()
