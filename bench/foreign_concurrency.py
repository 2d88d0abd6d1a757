"""The default concurrency on a 4-slot llama.cpp-like server, against a concurrency
the server holds (issue 26, F2): the same `score` work, side by side in one run.

    .venv/bin/python bench/foreign_concurrency.py [--stories 3] [--delay 0.05] [--timeout 2]
    .venv/bin/python bench/foreign_concurrency.py --base-url http://127.0.0.1:PORT --model NAME

Without --base-url it serves the test server's llama.cpp dialect (`dialect="llamacpp"`:
4 slots, a request of n choices holding n of them for `--delay` seconds, the rest in
its queue). Each run has its own cache; the figures are the wall time, the client's
retries and time-outs, and the most sequences the server ran at once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import tension
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

HELD = {"gen_concurrency": 1, "judge_concurrency": 4}  # the review's concurrency the server holds


def one(base_url: str, model: str, corpus: Path, tmp: Path, name: str, args, **kw) -> dict:
    cfg = {"base_url": base_url, "model": model, "cache": str(tmp / f"cache-{name}"), "endings": args.endings,
           "max_tokens": args.max_tokens, "progress": False, "seed": 1, "timeout": args.timeout,
           "tokenizer": args.tokenizer, **kw}  # tension.score's keywords
    t0 = time.perf_counter()
    s = tension.score(corpus, out=tmp / name, **cfg).summary
    wall = time.perf_counter() - t0
    rec = json.loads((tmp / name / "run.json").read_text())
    cap = (rec["servers"][0].get("capacity") or {}) if rec.get("servers") else {}
    return {"run": name, "status": s.status, "wall_s": round(wall, 2), "retries": rec["http"]["retries"],
            "peak_in_flight": cap.get("peak_in_flight")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url")
    ap.add_argument("--model", default="test-gen")
    ap.add_argument("--stories", type=int, default=3)
    ap.add_argument("--endings", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--delay", type=float, default=0.05, help="test server: seconds a request holds its slots")
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--tokenizer", default="server")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="foreign-bench-") as d:
        tmp = Path(d)
        os.environ["XDG_CACHE_HOME"] = str(tmp / "xdg")
        corpus = make_corpus(tmp / "c.jsonl", args.stories, seed=4)
        rows = []
        if args.base_url:
            for name, kw in (("default", {}), ("held", HELD)):
                rows.append(one(args.base_url, args.model, corpus, tmp, name, args, **kw))
        else:
            for name, kw in (("default", {}), ("held", HELD)):
                with LoopbackServer(model=args.model, dialect="llamacpp", slots=4, delay=args.delay) as srv:
                    row = one(srv.base_url, args.model, corpus, tmp, name, args, **kw)
                    row["server_peak_slots"] = srv.peak_slots
                rows.append(row)
    for r in rows:
        print(json.dumps(r))
    print(f"default / held wall time: {rows[0]['wall_s'] / rows[1]['wall_s']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
