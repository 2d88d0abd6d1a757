"""What the cache costs per chat request, part by part (issue 19: the cached Client
must stay within 0.9x of the uncached one). 20,000 distinct judge requests of about
2 KB (bench/client.py's bodies, tension.testing.bench.judge_bodies), each step timed alone in client CPU per request:
the key (`request_key`: sorted msgpack, then blake2b-128), the lookup of a miss, the
record, its encoding with the checksum, its insert in group commits of 512 (as the
run's committer does), and the lookup of a hit.

    python bench/cache_path.py [--requests 20000]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import tempfile
import time
from pathlib import Path

from tension.cache import records
from tension.cache.keys import canonical, request_key
from tension.cache.records import Usage, Verdict
from tension.cache.store import Store
from tension.core.llm.protocol import ChatRequest
from tension.testing.bench import JUDGE_MODEL, TEMPLATE_KWARGS, judge_bodies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20_000)
    n = ap.parse_args().requests
    reqs = [ChatRequest(model=JUDGE_MODEL, messages=m, n=1, temperature=0.0, max_tokens=10,
                        chat_template_kwargs=TEMPLATE_KWARGS) for m in judge_bodies(n, 0)]

    def timed(label, fn):
        gc.collect()
        c0 = time.process_time()
        out = fn()
        print(f"{label:<32} {1e6 * (time.process_time() - c0) / n:6.2f} us")
        return out

    with tempfile.TemporaryDirectory(prefix="cache-path-") as tmp, Store(Path(tmp) / "c.lmdb") as store:
        bodies = timed("canonical msgpack", lambda: [canonical(["chat", r]) for r in reqs])
        print(f"{'  (mean bytes)':<32} {sum(map(len, bodies)) / n:6.0f}")
        timed("blake2b-128 of it", lambda: [hashlib.blake2b(b, digest_size=16).digest() for b in bodies])
        keys = timed("request_key (both)", lambda: [request_key("chat", r) for r in reqs])
        timed("Store.get, a miss", lambda: [store.get("verdicts", k) for k in keys])
        recs = timed("Verdict record", lambda: [Verdict(
            text="Y", finish_reason="stop", model="m", created=time.time(), seconds=0.01,
            usage=Usage(prompt_tokens=512, completion_tokens=1, requests=1)) for _ in keys])
        timed("records.encode (checksum)", lambda: [records.encode(r) for r in recs])
        items = list(zip(["verdicts"] * n, keys, recs))
        timed("put_many, 512 a commit", lambda: [store.put_many(items[i:i + 512]) for i in range(0, n, 512)])
        timed("Store.get, a hit", lambda: [store.get("verdicts", k) for k in keys])


if __name__ == "__main__":
    main()
