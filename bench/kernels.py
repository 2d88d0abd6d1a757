"""Throughput of the curve-statistics kernel (docs/metrics.md 1.4) against plain numpy.

Measures positions per second of ``tension.kernels.curves.batch_stats`` (the numba
batch kernel: one serial ``@njit`` loop over CSR-packed curves) and of a
straightforward numpy version of the SAME statistics written here, the way a
researcher would: a Python loop over stories, vectorised numpy inside each story.

Statistics (both implementations): mean NR; late NR (x >= 0.80); centered moving
average, w = 5, window shrunk at the ends; unit-square rescale; vertex angles;
reversals with the 1e-12 tie tolerance; IR at 30/60/120 degrees; post-spike
retention and convergence on the raw curve with the next-10 window.

Data: ``--n`` synthetic curves (default 100,000) of 50-300 positions, seeded;
x strictly increasing in [0.1, 0.99], y in [0, 1] quantised to k/100 like real
no-rates (a clipped random walk). Both contenders run on the same arrays.

Phases:

1. compile: the first call here (usually a load of the ``cache=True`` disk cache
   in ``kernels/__pycache__``), and the cold JIT compile time, measured in a child
   process whose ``NUMBA_CACHE_DIR`` is an empty temporary directory;
2. check: numpy and kernel agree (``isclose``, rtol 1e-9, atol 1e-12, NaN == NaN)
   on ``--check`` stories plus a few hand-made edge curves; any disagreement
   aborts with exit status 1;
3. numba: warm-up call, then ``--repeats`` timed calls on all curves, median;
4. numpy: ``--numpy-repeats`` timed passes over the first ``--numpy-n`` stories,
   median, scaled to all curves by position count (the output says so).

Everything is single-threaded: the kernel has no ``prange``, numpy per story
never reaches BLAS.

Run from the repository root::

    python bench/kernels.py
    python bench/kernels.py --n 20000 --seed 1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numba
import numpy as np

from tension.kernels import curves
from tension.kernels.curves import ANGLE_EPS, TIE_EPS, CurveSettings
from tension.testing.bench import cpu_model, timed

BANNER = 60

# ----------------------------------------------------------------------------
# Synthetic data


def make_curves(n: int, seed: int, min_len: int = 50, max_len: int = 300):
    """``n`` packed curves: (x, y, offsets). Vectorised, deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, max_len + 1, size=n, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    story = np.repeat(np.arange(n), lengths)

    # x: m+1 positive gaps per story, normalised cumulative sums, first m kept.
    glen = lengths + 1
    goff = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(glen, out=goff[1:])
    gaps = 0.05 + rng.random(int(goff[-1]))
    cs = np.cumsum(gaps)
    start = np.concatenate(([0.0], cs[goff[1:-1] - 1]))
    seg = cs - np.repeat(start, glen)
    tot = seg[goff[1:] - 1]
    keep = np.ones(int(goff[-1]), dtype=bool)
    keep[goff[1:] - 1] = False
    x = 0.1 + 0.89 * seg[keep] / tot[story]

    # y: per-story level plus a random walk, clipped to [0, 1], quantised to k/100.
    level = rng.uniform(0.2, 0.9, size=n)
    steps = rng.normal(0.0, 0.04, size=total)
    cw = np.cumsum(steps)
    wstart = np.concatenate(([0.0], cw[offsets[1:-1] - 1]))
    walk = cw - np.repeat(wstart, lengths)
    y = np.clip(np.rint((level[story] + walk) * 100.0), 0, 100) / 100.0

    inner = np.ones(total - 1, dtype=bool)
    inner[offsets[1:-1] - 1] = False  # differences across story boundaries
    if not (np.all(np.diff(x)[inner] > 0) and x.min() >= 0.1 and x.max() <= 0.99):
        raise AssertionError("synthetic x is not strictly increasing in [0.1, 0.99]")
    return x, y, offsets


def edge_curves():
    """Hand-made curves that exercise the NaN and tie rules."""
    return [
        ([], []),  # no positions
        ([0.5], [0.3]),  # one position
        ([0.2, 0.9], [0.3, 0.4]),  # two positions
        ([0.2, 0.5, 0.7], [0.1, 0.9, 0.2]),  # three positions, no late one
        ([0.1, 0.3, 0.5, 0.8, 0.9], [0.4] * 5),  # flat
        ([0.1, 0.2, 0.3, 0.4, 0.85, 0.9], [0.2, 0.5, 0.5, 0.1, 0.3, 0.3]),  # plateau peak
        ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
         [0.1, 0.9, 0.1, 0.9, 0.1, 0.9, 0.1, 0.9, 0.1]),  # zigzag, hairpins
        ([0.1, 0.2, 0.3, 0.4, 0.5], [0.0, 0.0, 0.0, 0.01, 0.0]),  # one tiny peak
        ([0.1, 0.2, 0.3], [0.2, float("nan"), 0.3]),  # NaN input
    ]


# ----------------------------------------------------------------------------
# The numpy contender


def _sign_eps(d):
    return np.where(d > TIE_EPS, 1, np.where(d < -TIE_EPS, -1, 0))


def numpy_story(x, y, window=5, thresholds=(30.0, 60.0, 120.0), late=0.80, retention=10):
    """docs/metrics.md 1.4 for one story, vectorised numpy.

    Returns (mean_nr, late_nr, retain, convergence, ir) with ``ir`` an array.
    """
    t = len(thresholds)
    nan = math.nan
    m = len(y)
    if m == 0 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        return nan, nan, nan, nan, np.full(t, nan)

    mean_nr = y.mean()
    late_y = y[x >= late - TIE_EPS]
    late_nr = late_y.mean() if late_y.size else nan

    # Post-spike retention on the raw curve: peaks, then min of the next <= 10.
    s = _sign_eps(np.diff(y))
    peaks = np.flatnonzero((s[:-1] > 0) & (s[1:] < 0)) + 1
    if peaks.size:
        padded = np.concatenate((y, np.full(retention, np.inf)))
        low = padded[peaks[:, None] + np.arange(1, retention + 1)].min(axis=1)
        yp = y[peaks]
        retain = 100.0 * np.mean(low / yp)
        convergence = 100.0 * np.mean((low - yp) / yp)
    else:
        retain = convergence = nan

    if m < 3:
        return mean_nr, late_nr, retain, convergence, np.full(t, nan)

    # Centered moving average; the full convolution sums only the points that
    # exist, so dividing by the count gives the window shrunk at the ends.
    half = window // 2
    j = np.arange(m)
    sums = np.convolve(y, np.ones(window))[half : half + m]
    counts = np.minimum(j + half + 1, m) - np.maximum(j - half, 0)
    ys = sums / counts

    # Unit square.
    xr = x.max() - x.min()
    yr = ys.max() - ys.min()
    X = (x - x.min()) / xr if xr > 0 else np.zeros(m)
    Y = (ys - ys.min()) / yr if yr > 0 else np.zeros(m)

    # Vertex angles at interior points.
    ax, ay = X[:-2] - X[1:-1], Y[:-2] - Y[1:-1]
    bx, by = X[2:] - X[1:-1], Y[2:] - Y[1:-1]
    na = np.sqrt(ax * ax + ay * ay)
    nb = np.sqrt(bx * bx + by * by)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.clip((ax * bx + ay * by) / (na * nb), -1.0, 1.0)
    angle = np.where((na == 0) | (nb == 0), np.nan, np.degrees(np.arccos(c)))

    # Reversals of the smoothed curve, then IR per threshold.
    d = _sign_eps(np.diff(ys))
    rev = d[:-1] * d[1:] < 0
    ra = angle[rev]
    th = np.asarray(thresholds, dtype=np.float64)
    ir = (ra[:, None] <= th[None, :] + ANGLE_EPS).sum(axis=0) / m
    return mean_nr, late_nr, retain, convergence, ir


def numpy_batch(x, y, offsets, settings: CurveSettings = CurveSettings()):
    """Loop over stories; numpy inside each. Same columns as ``batch_stats``."""
    n = len(offsets) - 1
    t = len(settings.thresholds)
    mean_nr = np.empty(n)
    late_nr = np.empty(n)
    retain = np.empty(n)
    convergence = np.empty(n)
    ir = np.empty((n, t))
    for i in range(n):
        a, b = offsets[i], offsets[i + 1]
        mean_nr[i], late_nr[i], retain[i], convergence[i], ir[i] = numpy_story(
            x[a:b], y[a:b], settings.window, settings.thresholds,
            settings.late_threshold, settings.retention_window)
    return {"mean_nr": mean_nr, "late_nr": late_nr, "retain": retain,
            "convergence": convergence, "ir": ir}


# ----------------------------------------------------------------------------
# Phases


def check(x, y, offsets, label: str) -> int:
    """Abort (exit 1) unless numpy and the kernel agree on every story."""
    k = curves.batch_stats(x, y, offsets)
    p = numpy_batch(x, y, offsets)
    bad = []
    for col, ref in p.items():
        got = getattr(k, col)
        ok = np.isclose(got, ref, rtol=1e-9, atol=1e-12, equal_nan=True)
        if ok.ndim == 2:
            ok = ok.all(axis=1)
        for i in np.flatnonzero(~ok):
            bad.append(f"  story {i} `{col}`: kernel {got[i]!r}, numpy {ref[i]!r}")
    n = len(offsets) - 1
    if bad:
        print(f"CHECK FAILED ({label}): {len(bad)} disagreements in {n} stories; first 10:",
              file=sys.stderr)
        print("\n".join(bad[:10]), file=sys.stderr)
        raise SystemExit(1)
    return n


_COMPILE_SNIPPET = """
import time
t0 = time.perf_counter()
from tension.kernels import curves
import numpy as np
t1 = time.perf_counter()
curves.batch_stats(np.array([0.1, 0.5, 0.9]), np.array([0.2, 0.8, 0.3]),
                   np.array([0, 3], dtype=np.int64))
t2 = time.perf_counter()
print(t1 - t0, t2 - t1, sum(curves._batch.stats.cache_misses.values()))
"""


def cold_compile_seconds() -> tuple[float, float] | None:
    """(import s, first-call s) in a child with an empty numba cache dir."""
    with tempfile.TemporaryDirectory(prefix="numba-cold-") as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=tmp)
        r = subprocess.run([sys.executable, "-c", _COMPILE_SNIPPET], env=env,
                           capture_output=True, text=True)
    if r.returncode != 0:
        print(f"warning: cold-compile child failed:\n{r.stderr}", file=sys.stderr)
        return None
    imp, first, _ = r.stdout.split()
    return float(imp), float(first)


def pct(values, q):
    return float(np.percentile(values, q))


# ----------------------------------------------------------------------------
# Main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="synthetic curves (default 100000)")
    ap.add_argument("--seed", type=int, default=0, help="RNG seed (default 0)")
    ap.add_argument("--repeats", type=int, default=5, help="timed numba calls (default 5)")
    ap.add_argument("--numpy-n", type=int, default=10_000,
                    help="stories timed for numpy, scaled to --n (default 10000)")
    ap.add_argument("--numpy-repeats", type=int, default=3, help="timed numpy passes (default 3)")
    ap.add_argument("--check", type=int, default=5_000,
                    help="stories checked numpy vs kernel before timing (default 5000)")
    ap.add_argument("--json", nargs="?", const="-", metavar="PATH",
                    help="also write config + results as JSON to PATH (stdout if no PATH)")
    args = ap.parse_args(argv)
    if args.n < 1 or args.repeats < 1 or args.numpy_repeats < 1:
        ap.error("--n, --repeats and --numpy-repeats must be >= 1")
    numpy_n = min(args.numpy_n, args.n)
    check_n = min(args.check, args.n)

    config = {
        "n_curves": args.n,
        "lengths": "uniform 50..300",
        "seed": args.seed,
        "numba_repeats": args.repeats,
        "numpy_stories": numpy_n,
        "numpy_repeats": args.numpy_repeats,
        "check_stories": check_n,
        "settings": {"window": 5, "thresholds": [30.0, 60.0, 120.0],
                     "late_threshold": 0.80, "retention_window": 10},
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "machine": f"{platform.system()} {platform.release()} {platform.machine()}",
        "threads": "1 (kernel is serial @njit, no prange)",
    }
    print(" kernels: numba batch vs numpy per story ".center(BANNER, "="))
    for k, v in config.items():
        print(f"{k + ':':<17}{v}")

    t0 = time.perf_counter()
    x, y, offsets = make_curves(args.n, args.seed)
    positions = int(offsets[-1])
    print(f"{'positions:':<17}{positions:,} (made in {time.perf_counter() - t0:.2f} s)")
    print("-" * BANNER)

    # 1. Compile. The first call in this process either loads machine code from
    # the cache=True disk cache (kernels/__pycache__) or compiles; a child process
    # with an empty NUMBA_CACHE_DIR always compiles.
    t0 = time.perf_counter()
    curves.batch_stats(x[: offsets[1]], y[: offsets[1]], offsets[:2])
    first_call = time.perf_counter() - t0
    hits = sum(curves._batch.stats.cache_hits.values())
    cold = cold_compile_seconds()
    if cold is not None:
        print(f"cold JIT compile (child, empty NUMBA_CACHE_DIR): {cold[1]:.2f} s "
              f"(+ import {cold[0]:.2f} s)")
    print(f"first call here: {first_call:.2f} s, "
          f"{'loaded from' if hits else 'compiled (not found in)'} the disk cache "
          f"{curves._batch.stats.cache_path}")

    # 2. Check.
    print(f"check: numpy vs kernel on {check_n:,} stories + edge curves ... ", end="", flush=True)
    cx, cy, coff = x[: offsets[check_n]], y[: offsets[check_n]], offsets[: check_n + 1]
    check(cx, cy, coff, "synthetic")
    check(*curves.pack(edge_curves()), "edge curves")
    print("agree")

    # 3. numba, all curves.
    curves.batch_stats(x, y, offsets)  # warm-up
    nb_times = timed(lambda: curves.batch_stats(x, y, offsets), args.repeats)
    nb = statistics.median(nb_times)

    # 4. numpy on a subset, scaled by positions.
    sub_pos = int(offsets[numpy_n])
    sx, sy, soff = x[:sub_pos], y[:sub_pos], offsets[: numpy_n + 1]
    np_times = timed(lambda: numpy_batch(sx, sy, soff), args.numpy_repeats)
    np_sub = statistics.median(np_times)
    np_rate = sub_pos / np_sub
    np_full = positions / np_rate
    nb_rate = positions / nb

    print("-" * BANNER)
    rows = [
        ("numba batch_stats", nb, nb_rate, np_full / nb),
        ("numpy per story" + ("*" if numpy_n < args.n else ""), np_full, np_rate, 1.0),
    ]
    head = f"{'implementation':<22} | {'time (s)':>9} | {'positions/s':>13} | {'vs numpy':>8}"
    print(head)
    print("-" * len(head))
    for name, t, r, v in rows:
        print(f"{name:<22} | {t:>9.3f} | {r:>13,.0f} | {v:>7.1f}x")
    print("-" * len(head))
    print(f"numba: median of {args.repeats} calls on all {args.n:,} curves "
          f"(p20 {pct(nb_times, 20):.3f} s, p80 {pct(nb_times, 80):.3f} s), after one warm-up call; "
          f"{positions / nb / 1e6:.1f} M positions/s on one core")
    if numpy_n < args.n:
        print(f"* numpy: median of {args.numpy_repeats} passes over the first {numpy_n:,} stories "
              f"({sub_pos:,} positions, {np_sub:.3f} s), scaled to {positions:,} positions")
    else:
        print(f"numpy: median of {args.numpy_repeats} passes over all curves")
    goal_speed = np_full / nb >= 20
    goal_rate = nb_rate >= 1e6
    print(f"goal >= 20x numpy: {'met' if goal_speed else 'NOT met'}; "
          f"goal >= 1M positions/s per core: {'met' if goal_rate else 'NOT met'}")

    if args.json:
        results = {
            "positions": positions,
            "numba": {"times_s": nb_times, "median_s": nb, "positions_per_s": nb_rate,
                      "vs_numpy": np_full / nb},
            "numpy": {"stories": numpy_n, "positions": sub_pos, "times_s": np_times,
                      "median_s": np_sub, "scaled_s": np_full, "positions_per_s": np_rate},
            "compile": {"cold_first_call_s": cold[1] if cold else None,
                        "cold_import_s": cold[0] if cold else None,
                        "first_call_here_s": first_call, "disk_cache_hit": bool(hits)},
            "goals": {"speedup_ge_20x": goal_speed, "rate_ge_1M_per_core": goal_rate},
        }
        text = json.dumps({"config": config, "results": results}, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
