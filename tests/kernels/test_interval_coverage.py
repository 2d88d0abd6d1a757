"""Coverage of the per-story 95% intervals on simulated stories (docs/metrics.md 1.6):
ground-truth curves of four shapes (`tension.testing.precision.SHAPES`), 100 binomial
verdicts a position drawn from them, and how often each story's interval holds what its
statistic estimates. Seeded: the same stories and intervals on every run."""

from __future__ import annotations

import numpy as np
import pytest

from tension.kernels import intervals
from tension.kernels.curves import CurveSettings
from tension.kernels.intervals import Draw
from tension.testing import precision

NAMES = ["mean_nr", "late_nr", "retain", "convergence", "ir30", "ir60", "ir120"]
STORIES, POSITIONS, ENDINGS, RESAMPLES = 250, 60, 100, 300


def _pooled(draw: Draw = Draw.EDGE) -> tuple[np.ndarray, list[np.ndarray]]:
    held = np.zeros(len(NAMES))
    has = np.zeros(len(NAMES))
    per_shape = []
    for i, name in enumerate(precision.SHAPES):
        sim = precision.simulate(name, STORIES, POSITIONS, ENDINGS, CurveSettings(), RESAMPLES, seed=100 + i,
                                 reruns=5000, draw=draw)
        c, h = precision.coverage(sim)
        assert (h >= 0.95 * STORIES).all(), (name, h)  # nearly every story gets every interval
        held += c
        has += h
        per_shape.append(c / h)
    return held / has, per_shape


@pytest.fixture(scope="module")
def pooled():
    return _pooled()


def test_mean_and_late_nr_cover_at_the_nominal_rate(pooled):
    cov, _ = pooled
    for name in ("mean_nr", "late_nr"):
        got = cov[NAMES.index(name)]
        assert 0.93 <= got <= 0.97, f"{name}: {got:.3f} of {4 * STORIES} stories"


def test_the_curve_feature_statistics_cover_near_the_nominal_rate(pooled):
    # Retain and the IRs count discrete features of a noisy curve; their intervals are
    # near nominal pooled and never far below it on one shape (docs/metrics.md 1.6 has the figures)
    cov, per_shape = pooled
    for name in ("retain", "convergence", "ir30", "ir60", "ir120"):
        j = NAMES.index(name)
        assert 0.92 <= cov[j] <= 0.99, f"{name}: {cov[j]:.3f}"
        assert min(s[j] for s in per_shape) >= 0.88, f"{name}: {[round(s[j], 3) for s in per_shape]}"


def test_the_plain_percentile_bootstrap_would_not():
    """Why the interval is moved onto the observed value: unmoved, the percentile
    interval of the plain bootstrap's resamples misses Retain in most stories."""
    x, p = precision.shape("steadily falling (0.97 → 0.55)", POSITIONS)
    rng = np.random.default_rng(7)
    target = precision.expected_stats(x, p, ENDINGS, CurveSettings(), 5000, rng)
    k = rng.binomial(ENDINGS, 1 - p, size=(100, POSITIONS)).ravel()
    xs, off = np.tile(x, 100), np.arange(101) * POSITIONS
    values = intervals.resample_stats(xs, np.full(len(k), ENDINGS), k, off,
                                      intervals.story_seeds([str(i) for i in range(100)], 7), CurveSettings(),
                                      RESAMPLES, Draw.BINOMIAL)
    lo, hi = np.nanpercentile(values, [2.5, 97.5], axis=1)
    plain = ((lo <= target) & (target <= hi)).mean(axis=0)
    assert plain[NAMES.index("retain")] < 0.5 and plain[NAMES.index("convergence")] < 0.5, plain


def test_the_bench_runs_as_bench_results_md_shows_it(tmp_path):
    """bench/intervals.py at small sizes: the cost rows and every shape's three ways."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench" / "intervals.py"
    out = tmp_path / "b.json"
    done = subprocess.run([sys.executable, str(bench), "--stories", "4", "--positions", "20", "--resamples", "20",
                           "--repeats", "1", "--sim-stories", "4", "--positions-sim", "20", "--sim-resamples", "20",
                           "--reruns", "50", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "intervals, 20 resamples" in done.stdout and "of which drawing the verdicts" in done.stdout
    res = json.loads(out.read_text())
    assert set(res["coverage"]) == {*precision.SHAPES, *precision.EXTRA_SHAPES}
    assert all(len(ways) == 3 for ways in res["coverage"].values())
