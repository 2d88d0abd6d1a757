"""The embedded engine's levers on this CPU: for each setting, the server started
with the project's own machinery (`core/serving/embedded.py`, timed to /health),
then the demo's scoring (`DEMO_SCORE_SETTINGS` on the shipped story, a fresh
cache), then the server stopped. Side by side, in one run, with the load.

    .venv/bin/python bench/embedded_speed.py [--settings base,kv1,bind01] [--min-anchor-words 20] [--json out.json]

The server lives under its own cache folder (XDG_CACHE_HOME is pointed at a
temporary one whose venv and model are links to the installed ones), on port 8797 (--port).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from importlib.resources import files
from pathlib import Path

from tension.testing.bench import loadavg

SETTINGS = {
    # eager, OMP threads bound by vLLM ("auto"), 4 GiB of KV cache; no core reserved on a
    # machine of 2 cores or fewer (embedded.default_reserved_cpus), else vLLM's one
    "base": {},
    "kv1": {"kv_cache_gib": 1},  # a quarter of the KV cache: less memory to set up (the demo's)
    "reserve1_kv1": {"reserved_cpus": 1, "kv_cache_gib": 1},  # vLLM's own: one core kept for the API server
    "reserve0_kv1": {"reserved_cpus": 0, "kv_cache_gib": 1},  # no core kept, whatever the machine
    "bind01": {"omp_threads_bind": "0-1"},  # the worker's threads on cores 0 and 1, named
    "bind01_kv1": {"omp_threads_bind": "0-1", "kv_cache_gib": 1},
    "compile": {"enforce_eager": False},  # torch.compile (docs/embedded.md: 300 s to start)
    "block32": {"block_size": 32},  # the smallest block this CPU build takes: the n copies recompute less
    "block128": {"block_size": 128},  # vLLM's own default on this build (32 is the embedded default)
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", default="base,kv1,bind01")
    ap.add_argument("--min-anchor-words", type=int, default=None, help="fewer positions (default: the demo's)")
    ap.add_argument("--port", type=int, default=8797)
    ap.add_argument("--start-only", action="store_true", help="time the start only, no scoring")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    real = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tension-run" / "embedded"
    tmp = Path(tempfile.mkdtemp(prefix="embedded-speed-"))
    root = tmp / "tension-run" / "embedded"
    root.mkdir(parents=True)
    for name in ("venv", "models"):
        (root / name).symlink_to(real / name)
    os.environ["XDG_CACHE_HOME"] = str(tmp)
    import tension
    from tension.core.serving import embedded
    from tension.core.serving.profiles import DEMO_SCORE_SETTINGS

    story = str(files("tension.core").joinpath("data/demo_story.jsonl"))
    rows = []
    for i, name in enumerate(a.settings.split(",")):
        s = embedded.EmbeddedSettings(port=a.port, **SETTINGS[name])
        load0 = loadavg()
        t0 = time.perf_counter()
        st = embedded.start(s)
        started = time.perf_counter() - t0
        phases = {**start_phases(Path(st.log)), "cpu_s": session_cpu_seconds(st.pid)}
        if a.start_only:
            embedded.stop()
            rows.append({"setting": name, "start_s": round(started, 1), "phases": phases, "load_before": load0,
                         "load_after": loadavg()})
            print(f"{name:<8} start {started:6.1f} s  {phases}  load {load0} -> {loadavg()}", flush=True)
            continue
        try:
            extra = {} if a.min_anchor_words is None else {"min_anchor_words": a.min_anchor_words}
            cfg = {**DEMO_SCORE_SETTINGS, **extra, "base_url": st.url, "model": st.model,
                   "cache": str(tmp / f"cache-{i}-{name}"), "progress": False, "report": False}
            t1 = time.perf_counter()
            res = tension.score(story, out=tmp / f"out-{i}-{name}", **cfg).summary
            scored = time.perf_counter() - t1
            positions = len((tmp / f"out-{i}-{name}" / "positions.jsonl").read_text().splitlines())
        finally:
            embedded.stop()
        rows.append({"setting": name, "start_s": round(started, 1), "phases": phases, "score_s": round(scored, 1),
                     "positions": positions, "status": res.status, "load_before": load0, "load_after": loadavg()})
        print(f"{name:<8} start {started:6.1f} s  {phases}  score {scored:6.1f} s ({positions} positions, "
              f"{scored / max(1, positions):.1f} s each)  load {load0} -> {loadavg()}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


def session_cpu_seconds(sid: int) -> float:
    """User + system CPU seconds of the server's processes so far (its session: the API
    server, the engine and the worker): less at the mercy of the machine's load than
    the wall time, which other processes share."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # field 6, the session id, after pid and (comm)
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return round(total / tick, 1)


_STAMP = re.compile(r"^\((\w+) pid=\d+\) \w+ \d\d-\d\d (\d\d):(\d\d):(\d\d) ")


def start_phases(log: Path) -> dict[str, int]:
    """Seconds from the server's first log line to each process's first (APIServer,
    EngineCore, the worker) and to the engine's ready: where a start goes. The first
    line comes after the API server's imports, which the log cannot time."""
    first: dict[str, int] = {}
    last = 0
    for line in log.read_text(errors="replace").splitlines():
        m = _STAMP.match(line)
        if m is None:
            continue
        t = int(m[2]) * 3600 + int(m[3]) * 60 + int(m[4])
        first.setdefault(m[1], t)
        last = t
    if not first:
        return {}
    t0 = first["APIServer"] if "APIServer" in first else min(first.values())
    return {**{f"{k}_first": v - t0 for k, v in first.items()}, "ready": last - t0}


if __name__ == "__main__":
    sys.exit(main())
