"""`tension-run view` in a real browser: time to first paint of the corpus page and
time to open a story (first paint, then a sentence's endings), on a 300-story run
beside a 30-story run (the first 30 stories of the same corpus), in one run.

Both runs are scored once on the loopback server (tension.testing.openai_server) through
the CLI (2 endings per position, synthetic stories of 520–700 words) into
``--work`` (default: tension-bench-view in the temporary folder) and reused when already there. Then
one `tension-run view RUN_300 RUN_30 --port 0` serves both, and Debian's Chromium
(headless, through Selenium and chromedriver) loads each page ``--runs`` times
round-robin, a fresh navigation each time:

- **start-up**: from spawning `tension-run view` to its URL line (the runs read,
  their statistics and 10,000-resample group intervals computed);
- **corpus FCP**: the browser's first-contentful-paint of rI/index.html, and
  **corpus ready**: navigation start to the last table row drawn;
- **story FCP**: first-contentful-paint of a story page (the middle story);
- **endings**: a click on a sentence to its endings list drawn (the request to the
  view, the cache read, the drawing).

Medians and p20/p80 in milliseconds, and the 300 / 30 ratio.

    python bench/view.py [--runs 7] [--work DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent / "tension-run"
SIZES = (300, 30)


def make_runs(work: Path) -> dict[int, Path]:
    """The 300-story run and the 30-story run, scored unless already there."""
    from tension.testing.corpus import make_corpus
    from tension.testing.openai_server import LoopbackServer

    runs = {n: work / f"run-{n}" for n in SIZES}
    if all((r / "positions.jsonl").is_file() for r in runs.values()):
        return runs
    work.mkdir(parents=True, exist_ok=True)
    big = make_corpus(work / "corpus-300.jsonl", 300, seed=11)
    small = work / "corpus-30.jsonl"
    small.write_text("".join(big.read_text().splitlines(keepends=True)[:30]))
    env = {**os.environ, "HOME": str(work / "home"), "XDG_CACHE_HOME": str(work / "home" / ".cache")}
    with LoopbackServer(model=["test-gen"]) as srv:
        for n, corpus in ((300, big), (30, small)):
            t = time.perf_counter()
            done = subprocess.run([str(BIN), "score", str(corpus), "--out", str(runs[n]), "--base-url", srv.base_url,
                                   "--model", "test-gen", "--endings", "2", "--cache", str(work / "cache"),
                                   "--no-progress", "--no-report"], capture_output=True, text=True, env=env)
            if done.returncode != 0:
                raise SystemExit(done.stderr)
            print(f"scored {n} stories in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return runs


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


# The paint entry may be recorded after the load event: wait for it (buffered observer).
FCP = """const done = arguments[arguments.length - 1];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) if (e.name === 'first-contentful-paint') done(e.startTime);
}).observe({type: 'paint', buffered: true});"""
READY = """const done = arguments[arguments.length - 1];
const want = arguments[0];
(function poll() {
  if (document.querySelectorAll('table.sortable tbody tr').length >= want) done(performance.now());
  else requestAnimationFrame(poll);
})();"""
ENDINGS = """const done = arguments[arguments.length - 1];
const span = document.querySelector('span.s.pos[data-k="' + arguments[0] + '"]');
const t = performance.now();
span.click();
(function poll() {
  if (document.querySelector('ol.endings li')) done(performance.now() - t);
  else requestAnimationFrame(poll);
})();"""


def measure(drv, url: str, n_stories: int, story: str, k: int) -> dict[str, float]:
    drv.get(url + "index.html")
    out = {"corpus FCP": drv.execute_async_script(FCP), "corpus ready": drv.execute_async_script(READY, n_stories)}
    drv.get(url + f"story/{story}.html")
    out["story FCP"] = drv.execute_async_script(FCP)
    out["endings"] = drv.execute_async_script(ENDINGS, k)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "tension-bench-view")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    runs = make_runs(args.work)
    print(f"config: runs={args.runs} work={args.work} python={sys.version.split()[0]} cpus={os.cpu_count()}")
    t = time.perf_counter()
    env = {**os.environ, "HOME": str(args.work / "home")}
    proc = subprocess.Popen([str(BIN), "view", str(runs[300]), str(runs[30]), "--port", "0"], env=env,
                            stdout=subprocess.PIPE, text=True)
    url = next(m.group(1) for line in proc.stdout if (m := re.search(r"(http://\S+/)", line)))
    startup = (time.perf_counter() - t) * 1000
    positions = [json.loads(x) for x in (runs[30] / "positions.jsonl").read_text().splitlines()]
    story = positions[len(positions) // 2]["id"]
    k = next(p["k"] for p in positions if p["id"] == story)
    drv = browser()
    drv.set_script_timeout(30)
    samples: dict[int, list[dict[str, float]]] = {n: [] for n in SIZES}
    try:
        for n, i in ((300, 0), (30, 1)):  # warm-up: the first story open reads the corpus
            measure(drv, f"{url}r{i}/", n, story, k)
        for _ in range(args.runs):
            for n, i in ((300, 0), (30, 1)):
                samples[n].append(measure(drv, f"{url}r{i}/", n, story, k))
    finally:
        drv.quit()
        proc.terminate()
        proc.wait()
    print(f"view start-up with both runs: {startup:.0f} ms\n")
    print(f"{'ms (median, p20-p80)':<22}" + "".join(f"{f'{n} stories':>22}" for n in SIZES) + f"{'300 vs 30':>12}")
    result = {"startup_ms": startup, "metrics": {}}
    for metric in samples[300][0]:
        cells, meds = [], []
        for n in SIZES:
            v = sorted(s[metric] for s in samples[n])
            q = statistics.quantiles(v, n=5) if len(v) > 1 else [v[0]] * 4
            meds.append(statistics.median(v))
            cells.append(f"{meds[-1]:7.0f} ({q[0]:.0f}-{q[3]:.0f})")
            result["metrics"].setdefault(metric, {})[n] = {"median": meds[-1], "p20": q[0], "p80": q[3]}
        print(f"{metric:<22}" + "".join(f"{c:>22}" for c in cells) + f"{meds[0] / meds[1]:>11.2f}x")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
