"""Client overhead: chat requests per second against one minimal loopback server.

The client must never be the bottleneck: one client process drives many replicas
(docs/scale-out.md). This bench measures how many judge-shaped chat requests per
second each contender completes against the same stub server
(``tension.testing.stub_server``: raw asyncio + uvloop, fixed answers), started
once for the whole run, with the same concurrency and the same request bodies:

- (a)   ``tension``: the run's engine (``Engine.answer``, core/run/engine.py) with a
        judge lane of C, cache on. Per request: the key of the ``ChatRequest``, a
        ``Store.get`` (a miss: the LMDB cache is fresh), the judge lane,
        ``Router.chat`` and ``Client.chat``, then a ``Verdict`` record handed to
        the run's group committer (``put_many`` every <= 50 ms or 512 records).
- (a')  ``tension-nocache``: the lane and ``Router.chat`` alone (no key, lookup or commit).
- (b)   ``openai``: ``AsyncOpenAI(base_url=…/v1, api_key="x", max_retries=0)``,
        ``asyncio.Semaphore(C)`` and ``gather``.
- (c)   ``aiohttp``: one ``ClientSession`` (``TCPConnector(limit=0)``), a semaphore
        of C, ``session.post`` of msgspec-encoded bytes, ``read``, msgspec decode.
- (a'') ``score``: a DIFFERENT workload, the whole ``score_async`` pipeline on a
        synthetic corpus (tension.testing.corpus.make_corpus), 20 endings per position, the
        stub answering generation (n = 20 short choices), judge (batched: one
        /v1/completions request per position after the warm-up prompt, as on vLLM)
        and /tokenize requests, then the report (figures), timed apart as well.
        Its req/s is (generation + judge requests) / wall time, from the run's
        ``RunSummary.requests``; wall time includes reading the corpus, tokenize
        requests and writing the outputs. Issue 19 counts it per judged ending:
        ``judgments_per_s`` and ``cpu_us_per_judgment`` (with the report) and
        ``cpu_us_per_judgment_run`` (without it; the report is a fixed cost per run).
- (a2)  ``score-chat``: the same with ``--judge-batch off`` (one chat request per ending).

Each request body is distinct (so every cache key is a miss): the judge prompt of
``tension.core.prompts.score.judge_messages`` with synthetic text, ~2 KB of JSON,
temperature 0, max_tokens 10, n 1, chat_template_kwargs {"enable_thinking": false}.

Every (contender, repeat) runs in its own child process (like msgspec's bench
runner), which builds the bodies, sends ``--warmup`` requests, then times
``--requests`` requests and prints one JSON line. On a machine with >= 2 cores the
stub is pinned to core 0 and the children to core 1. Repeats are interleaved
(a, a', b, c, a'', a, a', b, c, a'', …); the table shows the median req/s and the
median of the runs' p50/p99 latencies. Latency is one request's time inside its
concurrency slot (queue time excluded): ``ChatResult.seconds`` for tension, the
time around the call for openai and aiohttp. Each child checks with the stub's
``/stats`` that every timed request reached the server.

Run from the repository root::

    python bench/client.py
    python bench/client.py --requests 5000 --repeats 1 --json out.json
    python bench/client.py --contenders tension,aiohttp
    python bench/client.py --before /tmp/head    # a checkout of the code before a change, with its .venv

With ``--before CHECKOUT`` each tension contender (``tension``, ``tension-nocache``,
``score``, ``score-chat``) also runs from that checkout (its own ``bench/client.py``,
under its ``.venv``'s Python), labelled ``@before`` and interleaved with the others
against the same stub: a change's before and after, side by side in one run.

The stub alone: ``python -m tension.testing.stub_server --port 8123``; one child
against it (for a profiler): ``python bench/client.py --child tension --port 8123``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tension.testing.bench import GEN_MODEL, JUDGE_MODEL, TEMPLATE_KWARGS, body_dict, cpu_model, judge_bodies, loadavg
from tension.testing.stub_server import loop_factory, start_stub

BANNER = 60
ROOT = Path(__file__).resolve().parent.parent

LABELS = {
    "tension": "(a) tension Client+Scheduler, cache on",
    "tension-nocache": "(a') tension Client+Scheduler, no cache",
    "openai": "(b) openai AsyncOpenAI",
    "aiohttp": "(c) bare aiohttp loop",
    "score": "(a'') tension score_async pipeline *",
    "score-chat": "(a2) the same, --judge-batch off *",
}
ORDER = ("tension", "tension-nocache", "openai", "aiohttp", "score", "score-chat")

def pct(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[i]


def server_stats(base: str) -> dict[str, int]:
    with urllib.request.urlopen(base + "/stats", timeout=10) as r:
        return json.loads(r.read())


# ----------------------------------------------------------------------------
# Contenders (each runs in a child process; `bodies` is warm-up + timed)


class Phase:
    """Outcome of one phase: requests done, errors, latencies (s)."""

    def __init__(self):
        self.done = 0
        self.errors = 0
        self.first_errors: list[str] = []
        self.latencies: list[float] = []

    def error(self, e: BaseException) -> None:
        self.errors += 1
        if len(self.first_errors) < 10:
            self.first_errors.append(f"{type(e).__name__}: {e}")


async def measure(base: str, warm_phase, timed_phase) -> tuple[Phase, float, dict]:
    """Run the warm-up phase, then time the timed one (wall and client CPU seconds);
    `extra` holds the CPU seconds and the chat requests the stub saw meanwhile."""
    await warm_phase()
    gc.collect()
    before = server_stats(base)["chat"]
    c0, t0 = time.process_time(), time.perf_counter()
    ph = await timed_phase()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return ph, seconds, {"server_chat_requests": server_stats(base)["chat"] - before, "cpu_seconds": cpu}


async def gathered(send, msgs, sem: asyncio.Semaphore) -> Phase:
    """`send(m)` for every message list at once, `sem` bounding those in flight; a
    request's latency is its time inside the semaphore, a failure is counted, not raised."""
    ph = Phase()

    async def one(m):
        async with sem:
            t = time.perf_counter()
            try:
                await send(m)
            except Exception as e:  # failures are counted, not raised
                ph.error(e)
                return
            ph.latencies.append(time.perf_counter() - t)

    await asyncio.gather(*(one(m) for m in msgs))
    ph.done = len(ph.latencies)
    return ph


async def contender_tension(base: str, warm, timed, conc: int, cache: bool) -> tuple[Phase, float, dict]:
    """The run's own request path: with the cache, `Engine.answer` (key, lookup, the
    judge lane, `Router.chat`, `Client.chat`, the record committed in groups); without
    it, the lane and `Router.chat` alone."""
    from tension.cache.store import Store
    from tension.core.llm.client import Client
    from tension.core.llm.protocol import ChatRequest
    from tension.core.llm.replicas import Replica
    from tension.core.llm.router import Router
    from tension.core.llm.ticket import NO_TICKET
    from tension.core.run.engine import Engine
    from tension.core.run.progress import Progress
    from tension.core.run.scheduler import Scheduler

    def requests(msgs):
        return [ChatRequest(model=JUDGE_MODEL, messages=m, n=1, temperature=0.0, max_tokens=10,
                            chat_template_kwargs=TEMPLATE_KWARGS) for m in msgs]

    warm_reqs, timed_reqs = requests(warm), requests(timed)
    with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
        store = Store(Path(tmp) / "llm.lmdb") if cache else None

        async with Client() as client:
            router = Router("judge", [Replica(url=base)], client, limit=conc)

            async def phase(reqs, tag: str) -> Phase:
                ph = Phase()
                if store is not None:
                    engine = Engine(store, Progress(enabled=False, stories=0), ("judge",),
                                    Path(tmp) / f"{tag}.partial.jsonl")

                    async def one(req):
                        ph.latencies.append((await engine.answer("judge", req)).seconds)

                    # leaving `serving` commits the last group: part of the work
                    async with engine.serving(router, route=False) as s:
                        await s.map(one, reqs)
                else:
                    async with Scheduler(router.lanes()) as s:

                        async def one(req):
                            async with s.slot("judge"):
                                ph.latencies.append((await router.chat(NO_TICKET, req)).seconds)

                        await s.map(one, reqs)
                ph.done = len(ph.latencies)
                return ph

            ph, seconds, extra = await measure(base, lambda: phase(warm_reqs, "warm"),
                                               lambda: phase(timed_reqs, "timed"))
        if store is not None:
            extra["cache"] = {"misses": store.counts.misses["verdicts"], "hits": store.counts.hits["verdicts"],
                              "writes": store.counts.writes["verdicts"]}
            store.close()
    return ph, seconds, extra


async def contender_openai(base: str, warm, timed, conc: int) -> tuple[Phase, float, dict]:
    import openai

    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    sem = asyncio.Semaphore(conc)

    async def send(m) -> None:
        r = await client.chat.completions.create(
            model=JUDGE_MODEL, messages=m, n=1, temperature=0.0, max_tokens=10,
            extra_body={"chat_template_kwargs": TEMPLATE_KWARGS})
        _ = r.choices[0].message.content  # the answer read, as a user would

    def phase(msgs):
        return gathered(send, msgs, sem)

    try:
        return await measure(base, lambda: phase(warm), lambda: phase(timed))
    finally:
        await client.close()


async def contender_aiohttp(base: str, warm, timed, conc: int) -> tuple[Phase, float, dict]:
    import aiohttp
    import msgspec

    enc = msgspec.json.Encoder()
    url = base + "/v1/chat/completions"
    headers = {"Content-Type": "application/json"}
    sem = asyncio.Semaphore(conc)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def send(m) -> None:
            async with session.post(url, data=enc.encode(body_dict(m)), headers=headers) as resp:
                data = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {data[:120]!r}")
            msgspec.json.decode(data)["choices"][0]["message"]["content"]

        def phase(msgs):
            return gathered(send, msgs, sem)

        return await measure(base, lambda: phase(warm), lambda: phase(timed))


async def contender_score(base: str, conc: int, stories: int, seed: int, batch: str = "auto"
                          ) -> tuple[Phase, float, dict]:
    import tension
    from tension.testing.corpus import make_corpus

    def config(cache: Path, report: bool = True) -> dict:
        """tension.score's keywords."""
        return {"base_url": base, "model": GEN_MODEL, "judge_model": JUDGE_MODEL, "endings": 20, "report": report,
                "cache": str(cache), "progress": False, "gen_concurrency": conc, "judge_concurrency": conc,
                "tokenize_concurrency": conc, "judge_batch": batch}

    with tempfile.TemporaryDirectory(prefix="bench-score-") as tmp:
        t = Path(tmp)
        # Warm-up: one story (loads the numba kernels, opens the code paths).
        warm = make_corpus(t / "warm.jsonl", 1, seed=seed + 1000)
        s = (await tension.score_async(warm, out=t / "warm-out", **config(t / "warm.lmdb"))).summary
        if s.status != "complete":
            raise RuntimeError(f"warm-up score run {s.status}: {s.error}")
        corpus = make_corpus(t / "corpus.jsonl", stories, seed=seed)
        gc.collect()
        before = server_stats(base)["requests"]
        c0, t0 = time.process_time(), time.perf_counter()
        s = (await tension.score_async(corpus, out=t / "out", **config(t / "llm.lmdb", report=False))).summary
        run_cpu = time.process_time() - c0
        # the report, as score writes it at the end of a run (--report, the default); timed
        # apart too: a fixed cost per run (at most 50 curves), not a cost per judged ending
        from tension.core.reports.report import report
        report(t / "out")
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        served = server_stats(base)["requests"] - before
        if s.status != "complete":
            raise RuntimeError(f"score run {s.status}: {s.error}")
        run = json.loads((t / "out" / "run.json").read_text())
    ph = Phase()
    ph.done = s.requests["generation"] + s.requests["judge"]
    lanes = run.get("lanes", {})
    # a judged ending is one verdict (issue 19 counts the pipeline in these)
    judged = s.requests["judge"]
    extra = {"requests": s.requests, "positions": s.positions, "stories": s.stories,
             "judgments_per_s": judged / seconds, "cpu_us_per_judgment": 1e6 * cpu / judged if judged else None,
             "cpu_us_per_judgment_run": 1e6 * run_cpu / judged if judged else None,
             "report_cpu_seconds": cpu - run_cpu,
             "server_requests": served, "cpu_seconds": cpu, "all_http_per_s": sum(s.requests.values()) / seconds,
             "mean_latency_ms": {k: 1000 * v["busy_seconds"] / v["finished"]
                                 for k, v in lanes.items() if v["finished"]},
             "peak_in_flight": {k: v["peak_in_flight"] for k, v in lanes.items()}}
    return ph, seconds, extra


def child(args) -> int:
    """Run one contender once; print one JSON line."""
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    base = f"http://127.0.0.1:{args.port}"
    name = args.child
    if name in ("score", "score-chat"):
        coro = contender_score(base, args.concurrency, args.score_stories, args.seed,
                               "off" if name == "score-chat" else "auto")
    else:
        # Warm-up bodies come after the timed ones, so their keys never collide.
        timed = judge_bodies(args.requests, args.seed)
        warm = judge_bodies(args.warmup, args.seed, start=args.requests)
        gc.collect()
        if name == "tension":
            coro = contender_tension(base, warm, timed, args.concurrency, cache=True)
        elif name == "tension-nocache":
            coro = contender_tension(base, warm, timed, args.concurrency, cache=False)
        elif name == "openai":
            coro = contender_openai(base, warm, timed, args.concurrency)
        elif name == "aiohttp":
            coro = contender_aiohttp(base, warm, timed, args.concurrency)
        else:
            raise SystemExit(f"unknown contender {name!r}; known: {', '.join(ORDER)}")
    with asyncio.Runner(loop_factory=loop_factory(args.no_uvloop)) as runner:
        ph, seconds, extra = runner.run(coro)
    lat = sorted(ph.latencies)
    print(json.dumps({
        "name": name, "done": ph.done, "errors": ph.errors, "first_errors": ph.first_errors,
        "seconds": seconds, "req_per_s": ph.done / seconds,
        "p50_ms": 1000 * pct(lat, 50) if lat else None, "p99_ms": 1000 * pct(lat, 99) if lat else None,
        "mean_ms": 1000 * statistics.fmean(lat) if lat else None,
        "cpu_us_per_req": 1e6 * extra["cpu_seconds"] / ph.done if ph.done else None, **extra,
    }), flush=True)
    return 0


# ----------------------------------------------------------------------------
# Parent: config, stub, interleaved children, table


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("tension-run", "aiohttp", "openai", "httpx", "httpx2", "msgspec", "uvloop", "lmdb"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return out


def readiness(base: str) -> None:
    """One chat request before anything else; fail fast with a hint."""
    from tension.core.prompts.score import judge_messages

    body = json.dumps(body_dict(judge_messages("a", "b", "c"))).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            content = json.loads(r.read())["choices"][0]["message"]["content"]
    except Exception as e:
        raise SystemExit(f"readiness check failed against {base}: {e}\n"
                         f"hint: run `{sys.executable} -m tension.testing.stub_server --port 8123` by hand") from e
    if content != "Y":
        raise SystemExit(f"readiness check: expected content 'Y', got {content!r}")


BEFORE = "@before"


def run_child(args, name: str, port: int, cpu: int | None) -> dict:
    python, script = sys.executable, Path(__file__).resolve()
    if name.endswith(BEFORE):  # the same contender, from the checkout before the change
        python, script = str(Path(args.before) / ".venv" / "bin" / "python"), Path(args.before) / "bench" / "client.py"
    cmd = [python, str(script), "--child", name.removesuffix(BEFORE), "--port", str(port),
           "--requests", str(args.requests), "--concurrency", str(args.concurrency),
           "--warmup", str(args.warmup), "--seed", str(args.seed),
           "--score-stories", str(args.score_stories)]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    if args.no_uvloop:
        cmd.append("--no-uvloop")
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=script.parent.parent, timeout=3600)
    if r.returncode != 0 or not r.stdout.strip():
        return {"name": name, "failed": f"exit {r.returncode}: {r.stderr.strip()[-2000:]}"}
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "name": name}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20_000, help="timed requests per run (default 20000)")
    ap.add_argument("--concurrency", type=int, default=64, help="requests in flight (default 64)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per contender, interleaved (default 3)")
    ap.add_argument("--warmup", type=int, default=500, help="untimed requests before each run (default 500)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic text (default 0)")
    ap.add_argument("--score-stories", type=int, default=30,
                    help="stories in the score_async corpus (default 30, ~20k requests)")
    ap.add_argument("--contenders", default=",".join(ORDER),
                    help=f"comma-separated subset of {','.join(ORDER)}")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the stub and the clients to cores")
    ap.add_argument("--no-uvloop", action="store_true", help="plain asyncio loops everywhere")
    ap.add_argument("--json", metavar="PATH", help="also write config + results as JSON to PATH")
    ap.add_argument("--before", metavar="CHECKOUT",
                    help="also run the tension contenders from this checkout (with its .venv), labelled @before")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    unknown = [n for n in names if n not in LABELS]
    if unknown or not names:
        ap.error(f"--contenders: unknown {unknown}; known: {', '.join(ORDER)}")
    if args.requests < 1 or args.concurrency < 1 or args.repeats < 1 or args.warmup < 0:
        ap.error("--requests, --concurrency and --repeats must be >= 1, --warmup >= 0")
    if args.before:
        if not (Path(args.before) / ".venv" / "bin" / "python").is_file():
            ap.error(f"--before {args.before}: no .venv/bin/python there (a checkout with its own venv)")
        names += [n + BEFORE for n in names if n.startswith(("tension", "score"))]

    import msgspec

    from tension.core.llm.protocol import ChatRequest

    pin = not args.no_pin and (os.cpu_count() or 1) >= 2
    sizes = sorted(len(msgspec.json.encode(ChatRequest(**body_dict(m))))
                   for m in judge_bodies(200, args.seed))
    try:
        import uvloop  # noqa: F401
        loop = "asyncio" if args.no_uvloop else "uvloop"
    except ImportError:
        loop = "asyncio"
    config = {
        "requests": args.requests,
        "concurrency": args.concurrency,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "body_bytes": f"median {sizes[len(sizes) // 2]} (min {sizes[0]}, max {sizes[-1]}), judge-shaped, distinct",
        "request": "temperature 0, max_tokens 10, n 1",
        "server": "tension.testing.stub_server (raw asyncio, fixed answer)" + (", core 0" if pin else ""),
        "clients": f"one child process per run, {loop}" + (", core 1" if pin else ""),
        "score_corpus": f"{args.score_stories} synthetic stories, endings=20, lanes of {args.concurrency}",
        "contenders": ", ".join(names),
        "seed": args.seed,
        **versions(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "machine": f"{platform.system()} {platform.release()} {platform.machine()}",
        "load_at_start": loadavg(),
    }
    print(" client overhead: req/s vs one loopback stub ".center(BANNER, "="))
    for k, v in config.items():
        print(f"{k + ':':<15}{v}")
    print("-" * BANNER)

    stub, base = start_stub(0, 0 if pin else None, args.no_uvloop)
    port = int(base.rsplit(":", 1)[1])
    runs: dict[str, list[dict]] = {n: [] for n in names}
    failures = []
    try:
        readiness(base)
        for rep in range(args.repeats):
            for name in names:
                r = run_child(args, name, port, 1 if pin else None)
                if "failed" in r:
                    failures.append(r)
                    print(f"run {rep + 1}/{args.repeats} {name:<16} FAILED: {r['failed']}", flush=True)
                    continue
                runs[name].append(r)
                lat = (f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms" if r["p50_ms"] is not None
                       else "mean ms per lane " + ", ".join(f"{k} {v:.1f}" for k, v in r["mean_latency_ms"].items()))
                print(f"run {rep + 1}/{args.repeats} {name:<16} {r['req_per_s']:>8,.0f} req/s "
                      f"({r['done']:,} in {r['seconds']:.2f} s, {lat}, client CPU "
                      f"{r['cpu_us_per_req']:.0f} us/req, errors {r['errors']}; load {loadavg()})", flush=True)
                if r["errors"]:
                    print("  first errors:\n    " + "\n    ".join(r["first_errors"]), flush=True)
                served = r.get("server_chat_requests")
                if served is not None and served != args.requests:
                    print(f"  warning: the stub saw {served} chat requests, expected {args.requests}")
    finally:
        stub.terminate()
        stub.wait(10)

    summary = {}
    for name, rs in runs.items():
        if not rs:
            continue
        med = lambda key: statistics.median(r[key] for r in rs) if rs[0].get(key) is not None else None  # noqa: E731
        summary[name] = {"req_per_s": med("req_per_s"), "best_req_per_s": max(r["req_per_s"] for r in rs),
                         "p50_ms": med("p50_ms"), "p99_ms": med("p99_ms"),
                         "cpu_us_per_req": med("cpu_us_per_req"),
                         "runs": [r["req_per_s"] for r in rs], "errors": sum(r["errors"] for r in rs)}
        if name.removesuffix(BEFORE) in ("score", "score-chat"):
            summary[name].update(judgments_per_s=med("judgments_per_s"), cpu_us_per_judgment=med("cpu_us_per_judgment"),
                                 cpu_us_per_judgment_run=med("cpu_us_per_judgment_run"),
                                 report_cpu_seconds=med("report_cpu_seconds"))
    print("-" * BANNER)
    ref_c = summary.get("aiohttp", {}).get("req_per_s")
    ref_b = summary.get("openai", {}).get("req_per_s")
    cpu_c = summary.get("aiohttp", {}).get("cpu_us_per_req")
    cpu_b = summary.get("openai", {}).get("cpu_us_per_req")
    head = (f"{'contender':<40} | {'req/s':>7} | {'best':>6} | {'p50 ms':>6} | {'p99 ms':>6} | "
            f"{'vs (c) aiohttp':>14} | {'vs (b) openai':>13} | {'CPU us/req':>10} | {'CPU vs (c)':>10}")
    print(head)
    print("-" * len(head))
    for name, s in sorted(summary.items(), key=lambda kv: -kv[1]["req_per_s"]):
        p50 = f"{s['p50_ms']:.1f}" if s["p50_ms"] is not None else "-"
        p99 = f"{s['p99_ms']:.1f}" if s["p99_ms"] is not None else "-"
        vc = f"{s['req_per_s'] / ref_c:.2f}x" if ref_c else "-"
        vb = f"{s['req_per_s'] / ref_b:.1f}x" if ref_b else "-"
        cc = f"{cpu_c / s['cpu_us_per_req']:.2f}x" if cpu_c else "-"
        label = LABELS[name.removesuffix(BEFORE)] + (" @before" if name.endswith(BEFORE) else "")
        print(f"{label:<40} | {s['req_per_s']:>7,.0f} | {s['best_req_per_s']:>6,.0f} | {p50:>6} | "
              f"{p99:>6} | {vc:>14} | {vb:>13} | {s['cpu_us_per_req']:>10,.0f} | {cc:>10}")
    print("-" * len(head))
    print(f"req/s: median of {args.repeats} interleaved runs of {args.requests:,} timed requests each "
          f"(after {args.warmup} warm-up requests); best: the fastest run; p50/p99: median over the runs.\n"
          f"CPU us/req: the client process's CPU time (user + sys) in the timed phase per request, median "
          f"over the runs; 'CPU vs (c)' = (c)'s CPU us/req / this one's, the ratio on an otherwise idle core "
          f"(less sensitive to other load on the machine than req/s).")
    if "score" in runs and runs["score"]:
        r = sorted(runs["score"], key=lambda x: x["req_per_s"])[len(runs["score"]) // 2]  # the median run
        print(f"* a different workload: score_async on {r['stories']} stories, {r['positions']} positions, "
              f"endings=20; requests {r['requests']}; req/s = (generation + judge) / wall; all HTTP "
              f"incl. tokenize {r['all_http_per_s']:,.0f}/s; mean latency per lane (lane stats): "
              + ", ".join(f"{k} {v:.1f} ms" for k, v in r["mean_latency_ms"].items()))
    goals = {}
    for name in ("score", "score-chat"):
        sc = summary.get(name)
        if not (sc and sc.get("cpu_us_per_judgment")):
            continue
        ratio = cpu_c / sc["cpu_us_per_judgment"] if cpu_c else None
        print(f"{name}: {sc['judgments_per_s']:,.0f} judged endings/s, {sc['cpu_us_per_judgment']:.0f} us of client "
              f"CPU per judged ending" + (f"; (c)'s CPU us/req / this = {ratio:.2f}x" if ratio else "")
              + f"; without the end-of-run report ({sc['report_cpu_seconds']:.2f} s of CPU, once per run): "
              f"{sc['cpu_us_per_judgment_run']:.0f} us" + (f", {cpu_c / sc['cpu_us_per_judgment_run']:.2f}x" if cpu_c else ""))
        if ratio is not None and name == "score":
            goals["score_0.8x_aiohttp_per_judgment"] = {"cpu_ratio": ratio, "met_by_cpu": ratio >= 0.8}
            print(f"goal score >= 0.8x (c) bare aiohttp by client CPU per judged ending: "
                  f"{'met' if ratio >= 0.8 else 'NOT met'} ({ratio:.2f}x)")
    if summary.get("score", {}).get("cpu_us_per_judgment") and summary.get("score-chat", {}).get("cpu_us_per_judgment"):
        print(f"score batched vs --judge-batch off, by client CPU per judged ending: "
              f"{summary['score-chat']['cpu_us_per_judgment'] / summary['score']['cpu_us_per_judgment']:.2f}x")
    cached, uncached = (summary.get(n, {}).get("cpu_us_per_req") for n in ("tension", "tension-nocache"))
    if cached and uncached:
        r = uncached / cached
        goals["cached_0.9x_uncached"] = {"cpu_ratio": r, "met_by_cpu": r >= 0.9}
        print(f"goal (a) cached Client >= 0.9x (a') uncached by client CPU per request: "
              f"{'met' if r >= 0.9 else 'NOT met'} ({r:.2f}x)")
    a = summary.get("tension", {}).get("req_per_s")
    cpu_a = summary.get("tension", {}).get("cpu_us_per_req")
    for key, label, need, wall_ratio, cpu_ratio in (
            ("3x_openai", "(a) >= 3x (b) openai", 3.0,
             a / ref_b if a and ref_b else None, cpu_b / cpu_a if cpu_a and cpu_b else None),
            ("0.8x_aiohttp", "(a) >= 0.8x (c) bare aiohttp", 0.8,
             a / ref_c if a and ref_c else None, cpu_c / cpu_a if cpu_a and cpu_c else None)):
        if wall_ratio is None:
            continue
        goals[key] = {"req_per_s_ratio": wall_ratio, "met": wall_ratio >= need,
                      "cpu_ratio": cpu_ratio, "met_by_cpu": cpu_ratio is not None and cpu_ratio >= need}
        print(f"goal {label}: {'met' if wall_ratio >= need else 'NOT met'} by median req/s ({wall_ratio:.2f}x); "
              f"{'met' if goals[key]['met_by_cpu'] else 'NOT met'} by client CPU per request ({cpu_ratio:.2f}x)")
    for f in failures:
        print(f"FAILED run of {f['name']}: {f['failed']}", file=sys.stderr)

    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"config": config, "results": summary, "runs": runs, "goals": goals,
                       "failures": failures}, fh, indent=2)
            fh.write("\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
