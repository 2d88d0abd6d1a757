"""The embedded engine's levers on this CPU: for each setting, the server started
with the project's own machinery (`core/serving/embedded.py`, timed to /health),
then the demo's scoring (`DEMO_SCORE_SETTINGS` on the shipped story, a fresh
cache), then the server stopped. Side by side, in one run, with the load.

    .venv/bin/python bench/embedded_speed.py [--settings base,kv1,bind01] [--min-anchor-words 20] [--json out.json]

The server lives under its own cache folder (XDG_CACHE_HOME is pointed at a
temporary one whose venv and model are links to the installed ones), on port 8797.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from importlib.resources import files
from pathlib import Path

from tension.testing.bench import loadavg

SETTINGS = {
    "base": {},  # eager, OMP threads bound by vLLM ("auto": one core, the other reserved), 4 GiB of KV cache
    "kv1": {"kv_cache_gib": 1},  # a quarter of the KV cache: less memory to set up
    "bind01": {"omp_threads_bind": "0-1"},  # the worker's threads on both cores
    "compile": {"enforce_eager": False},  # torch.compile (docs/embedded.md: 300 s to start)
    "block32": {"block_size": 32},  # the smallest block this CPU build takes: the n copies recompute less
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", default="base,kv1,bind01")
    ap.add_argument("--min-anchor-words", type=int, default=None, help="fewer positions (default: the demo's)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    real = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tension-run" / "embedded"
    tmp = Path(tempfile.mkdtemp(prefix="embedded-speed-"))
    root = tmp / "tension-run" / "embedded"
    root.mkdir(parents=True)
    for name in ("venv", "models"):
        (root / name).symlink_to(real / name)
    os.environ["XDG_CACHE_HOME"] = str(tmp)
    from tension.core.config import load_config
    from tension.core.pipelines.score import score
    from tension.core.serving import embedded
    from tension.core.serving.profiles import DEMO_SCORE_SETTINGS

    story = str(files("tension.core").joinpath("data/demo_story.jsonl"))
    rows = []
    for name in a.settings.split(","):
        s = embedded.EmbeddedSettings(port=8797, **SETTINGS[name])
        load0 = loadavg()
        t0 = time.perf_counter()
        st = embedded.start(s)
        started = time.perf_counter() - t0
        try:
            extra = {} if a.min_anchor_words is None else {"min_anchor_words": a.min_anchor_words}
            cfg = load_config(None, {"cache": str(tmp / f"cache-{name}"), "progress": False, "report": False},
                              fallback={**DEMO_SCORE_SETTINGS, **extra, "base_url": st.url, "model": st.model})
            t1 = time.perf_counter()
            res = score(cfg, story, tmp / f"out-{name}")
            scored = time.perf_counter() - t1
            positions = len((tmp / f"out-{name}" / "positions.jsonl").read_text().splitlines())
        finally:
            embedded.stop()
        rows.append({"setting": name, "start_s": round(started, 1), "score_s": round(scored, 1),
                     "positions": positions, "status": res.status, "load_before": load0, "load_after": loadavg()})
        print(f"{name:<8} start {started:6.1f} s  score {scored:6.1f} s ({positions} positions, "
              f"{scored / max(1, positions):.1f} s each)  load {load0} -> {loadavg()}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
