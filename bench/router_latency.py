"""The vLLM router's added latency per request: the same chat requests sent one at
a time straight to a server and through `vllm-router` in front of it, in
alternating blocks (the machine is noisy), on the loopback test server
(tension.testing.openai_server, no added delay). Reports the median and p90 latency of
each path and their difference, the router's cost per request.

Run from the repository root::

    python bench/router_latency.py --requests 2000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request

from tension.core.llm.vllm_router import LocalRouter
from tension.testing.openai_server import LoopbackServer


def one(url: str, i: int) -> float:
    body = json.dumps({"model": "m", "max_tokens": 4,
                       "messages": [{"role": "user", "content": f"STORY SO FAR:\nprompt {i}"}]}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json", "X-Session-ID": f"s{i % 50}"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000, help="requests per path (default 2000)")
    ap.add_argument("--block", type=int, default=100, help="requests per block before switching path (default 100)")
    args = ap.parse_args(argv)
    with LoopbackServer(model="m", record=False) as srv, LocalRouter([srv.base_url]) as router:
        paths = {"direct": srv.base_url, "router": router.url}
        times: dict[str, list[float]] = {name: [] for name in paths}
        for _name, url in paths.items():  # warm-up: connections, the router's first-request work
            for i in range(20):
                one(url, i)
        for b in range(args.requests // args.block):
            for name, url in paths.items():
                times[name] += [one(url, b * args.block + i) for i in range(args.block)]
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    p90 = {k: statistics.quantiles(v, n=10)[-1] * 1e6 for k, v in times.items()}
    for k in paths:
        print(f"{k:>7}: median {med[k]:8.0f} us, p90 {p90[k]:8.0f} us  ({len(times[k])} requests)")
    print(f"router adds {med['router'] - med['direct']:.0f} us per request at the median "
          f"({med['router'] / med['direct']:.2f}x), {p90['router'] - p90['direct']:.0f} us at p90")
    return 0


if __name__ == "__main__":
    sys.exit(main())
