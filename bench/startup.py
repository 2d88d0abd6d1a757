"""CLI start-up: wall time and peak RSS of `tension-run` per checkout, side by side.

For each checkout of this repository given with ``--checkout [LABEL=]PATH``
(default: the checkout this script lives in) and each of the commands

    --version      --help      score --help

(or those given with ``--command "ARGS"``, e.g. ``--command "view RUN --export DIR"``)
it runs, in a fresh child process each time and with this interpreter,

    <sys.executable> <checkout>/bin/tension-run <command>

``bin/tension-run`` maps core/, kernels/ and cache/ to ``tension.*``, so any
checkout runs with the same interpreter and packages, uninstalled.

- **Wall time:** from spawning the child to reaping it, stdout and stderr to
  /dev/null. One warm-up run per (command, checkout) is discarded, then
  ``--runs`` timed runs (default 10). Within each run the commands and
  checkouts go round-robin, so noise on this shared machine falls on every
  checkout alike. The table shows the median, p20 and p80.
- **CPU:** user + system seconds of that one child (``os.wait4``), the median: what
  a machine busy with other work pays for the start.
- **Peak RSS:** ``ru_maxrss`` of that one child, from ``os.wait4`` (the
  RUSAGE_CHILDREN maximum would only ever report the largest child so far);
  the median over the timed runs.
- **Exit status:** recorded, never fatal: a command that crashes is still a
  start-up to measure (today ``--help`` dies on a ``%`` in a help string).
- **Heavy modules:** one more, untimed, child per (command, checkout) runs
  the same ``bin/tension-run`` through runpy, catches SystemExit (``--help``
  and ``--version`` exit through argparse) and any crash, and lists which of
  numba, numpy, aiohttp, scipy, matplotlib, msgspec, lmdb, tqdm ended up in
  ``sys.modules``.

Children run with PYTHONDONTWRITEBYTECODE unset, so the warm-up run leaves
``__pycache__`` behind as an installed package has (pip compiles at install);
otherwise every run would compile cli.py from source.

Run from anywhere (the figures are in bench/RESULTS.md)::

    python bench/startup.py --checkout before=OTHER_CHECKOUT --checkout after=.
    python bench/startup.py --runs 3 --json startup.json

(OTHER_CHECKOUT: another checkout of this repository, e.g. a worktree at an older commit.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE_CHECKOUT = Path(__file__).resolve().parent.parent
COMMANDS = (("--version",), ("--help",), ("score", "--help"))
HEAVY = ("numba", "numpy", "aiohttp", "scipy", "matplotlib", "msgspec", "lmdb", "tqdm")

# Runs bin/tension-run as its own __main__ would, then prints the heavy
# top-level modules as the last stdout line; whatever the CLI printed before
# it is discarded by the parent.
MODULES_CHILD = """\
import runpy, sys
script, *argv = sys.argv[1:]
sys.argv = [script, *argv]
try:
    runpy.run_path(script, run_name="__main__")
except BaseException:
    pass
heavy = %r
print()
print(" ".join(sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in heavy})))
""" % (HEAVY,)


def parse_checkout(text: str) -> tuple[str, Path]:
    label, sep, path = text.partition("=")
    if not sep:
        label, path = Path(text).name, text
    root = Path(path).resolve()
    if not (root / "bin" / "tension-run").is_file():
        raise argparse.ArgumentTypeError(f"{root} has no bin/tension-run")
    return label, root


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_once(root: Path, argv: tuple[str, ...]) -> dict:
    """One timed child: wall seconds, CPU seconds, peak RSS in MB, exit status."""
    cmd = [sys.executable, str(root / "bin" / "tension-run"), *argv]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=child_env())
    # wait4 rather than proc.wait: it gives this child's own rusage.
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is in KiB on Linux, bytes on macOS.
    rss_kib = usage.ru_maxrss / 1024 if sys.platform == "darwin" else usage.ru_maxrss
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": rss_kib / 1024, "exit": proc.returncode}


def heavy_modules(root: Path, argv: tuple[str, ...]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", MODULES_CHILD, str(root / "bin" / "tension-run"), *argv],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, env=child_env())
    return out.stdout.rstrip("\n").rsplit("\n", 1)[-1].split()


def measure(checkouts: list[tuple[str, Path]], commands: list[tuple[str, ...]], runs: int,
            warmup: int) -> dict[tuple[str, str], list[dict]]:
    results: dict[tuple[str, str], list[dict]] = {}
    for i in range(warmup + runs):
        for argv in commands:
            for label, root in checkouts:
                r = run_once(root, argv)
                if i >= warmup:
                    results.setdefault((" ".join(argv), label), []).append(r)
    return results


def percentile(values: list[float], q: int) -> float:
    """q-th percentile (q a multiple of 10), linear between points; a single run is its own percentile."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[q // 10 - 1]


def summarise(runs: list[dict]) -> dict:
    walls = [r["wall"] for r in runs]
    exits = sorted({r["exit"] for r in runs})
    return {"median": statistics.median(walls), "p20": percentile(walls, 20), "p80": percentile(walls, 80),
            "cpu": statistics.median(r["cpu"] for r in runs), "rss_mb": statistics.median(r["rss_mb"] for r in runs),
            "exit": "/".join(map(str, exits))}


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def git_rev(root: Path) -> str:
    """Short commit, with + when the work tree differs: a label alone does not say what was measured."""
    rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
    return (rev.stdout.strip() or "?") + ("+" if dirty.stdout.strip() else "")


def config(checkouts: list[tuple[str, Path]], args) -> dict:
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": f"{platform.python_version()} ({sys.executable})",
        "machine": f"{platform.system()} {platform.release()} {platform.machine()}, nproc {os.cpu_count()}",
        "runs": args.runs, "warmup": args.warmup, "loadavg_start": loadavg(),
        "checkouts": {label: f"{root} @ {git_rev(root)}" for label, root in checkouts},
    }


def table(rows: list[dict], ratio: bool) -> str:
    head = ["command", "checkout", "median s", "p20", "p80", "CPU s", "peak RSS MB", "exit"]
    head += ["vs first"] if ratio else []
    head += ["heavy modules imported"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        cells = [f"`{r['command']}`", r["checkout"], f"{r['median']:.3f}", f"{r['p20']:.3f}", f"{r['p80']:.3f}",
                 f"{r['cpu']:.3f}", f"{r['rss_mb']:.1f}", r["exit"]]
        cells += [f"{r['vs_first']:.2f}x"] if ratio else []
        cells += [", ".join(r["heavy"]) or "none"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkout", action="append", type=parse_checkout, metavar="[LABEL=]PATH",
                    help="a checkout to measure (repeatable; the first is the reference for 'vs first'); "
                         "default: the checkout of this script")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per command and checkout (default 10)")
    ap.add_argument("--warmup", type=int, default=1, help="discarded runs first (default 1)")
    ap.add_argument("--command", action="append", metavar="ARGS",
                    help="a command line after tension-run to measure, as one string (repeatable; default: "
                         + ", ".join(repr(" ".join(c)) for c in COMMANDS) + ")")
    ap.add_argument("--json", metavar="FILE", help="write the config and every run's figures here")
    args = ap.parse_args(argv)
    checkouts = args.checkout or [("here", HERE_CHECKOUT)]
    commands = [tuple(shlex.split(c)) for c in args.command] if args.command else list(COMMANDS)

    cfg = config(checkouts, args)
    for key, value in cfg.items():
        print(f"{key}: {value}")
    results = measure(checkouts, commands, args.runs, args.warmup)
    cfg["loadavg_end"] = loadavg()
    print(f"loadavg_end: {cfg['loadavg_end']}\n")

    rows = []
    for argv_ in commands:
        command = " ".join(argv_)
        first = None
        for label, root in checkouts:
            row = {"command": command, "checkout": label, **summarise(results[(command, label)]),
                   "heavy": heavy_modules(root, argv_), "runs": results[(command, label)]}
            first = first or row["median"]
            row["vs_first"] = row["median"] / first
            rows.append(row)
    print(table(rows, ratio=len(checkouts) > 1))

    if args.json:
        Path(args.json).write_text(json.dumps({"config": cfg, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
