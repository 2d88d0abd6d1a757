"""Adaptive endings' stopping rule (kernels/stopping.py) against plain references, and
on simulated stories (tension.testing.adaptive): at the documented target (0.04,
docs/metrics.md 1.7) every statistic of ≥ 95 % of the stories of every shape falls
inside its fixed-100 interval. Seeded: the same stories on every run."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tension.kernels.curves import CurveSettings
from tension.kernels.stopping import Z95, expected_endings, round_ends, should_stop, stop_counts, wilson_half_width
from tension.testing import adaptive, precision

TARGET = 0.04  # the documented target (docs/metrics.md 1.7, docs/cost.md)


def _wilson_ref(n: int, no: int) -> float:
    # the interval's ends as Wilson (1927) writes them, then half their distance
    p, z = no / n, Z95
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return ((c + h) - (c - h)) / 2


@given(st.integers(1, 500).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_wilson_half_width_is_the_textbook_one(case):
    n, no = case
    assert float(wilson_half_width(n, no)) == pytest.approx(_wilson_ref(n, no), rel=1e-9, abs=1e-12)


def _stop_ref(row: list[int], r: int, m: int, w: float) -> int:
    n = 0
    while True:
        n = min(n + r, m)
        if n == m or _wilson_ref(n, sum(row[:n])) <= w + 1e-12:
            return n


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 60), st.floats(0.01, 0.49), st.integers(0, 2**31))
def test_stop_counts_is_the_plain_loop(r, m, w, seed):
    r = min(r, m)
    rows = np.random.default_rng(seed).integers(0, 2, size=(8, m))
    got = stop_counts(rows, r, m, w)
    assert list(got) == [_stop_ref(list(row), r, m, w) for row in rows]
    for n, row in zip(got, rows):  # and the live run's rule agrees, round by round
        for end in (e for e in round_ends(r, m) if e <= n):
            assert should_stop(end, int(row[:end].sum()), w, m) == (end == n)


@pytest.mark.parametrize("p, r, m, w", [(0.5, 3, 9, 0.3), (0.9, 2, 8, 0.2), (0.97, 4, 10, 0.15), (0.0, 5, 10, 0.2)])
def test_expected_endings_is_the_enumerated_expectation(p, r, m, w):
    want = 0.0
    for row in itertools.product((0, 1), repeat=m):
        prob = math.prod(p if b else 1 - p for b in row)
        want += prob * _stop_ref(list(row), r, m, w)
    assert expected_endings(p, r, m, w) == pytest.approx(want, rel=1e-9)


@pytest.fixture(scope="module")
def paired():
    s = CurveSettings()
    return {name: adaptive.draw_stories(name, 200, 60, 100, s, 300, seed=7 + i)
            for i, name in enumerate(precision.SHAPES)}


def test_at_the_documented_target_statistics_stay_inside_the_fixed_intervals(paired):
    for name, sim in paired.items():
        out = adaptive.at_target(sim, TARGET, 20, 100, CurveSettings())
        assert out.share_of_fixed < 1.0, name
        for stat, share in zip(adaptive.STATS, out.inside):
            assert share >= 0.95, f"{name}: {stat} inside its fixed-100 interval in {share:.3f} of stories"


def test_a_loose_target_saves_endings_and_biases_the_no_rate_upward(paired):
    """The finding docs/metrics.md 1.7 states: optional stopping stops early mostly on
    runs of no's, so the no-rate of a near-certain curve comes out high."""
    sim = paired["flat high (0.95)"]
    out = adaptive.at_target(sim, 0.1, 20, 100, CurveSettings())
    assert out.share_of_fixed < 0.5
    assert out.no_rate_bias > 0.005 > abs(out.fixed_no_rate_bias)


def test_the_bench_runs_as_docs_cost_md_shows_it(tmp_path):
    """bench/precision.py at small sizes, in its simulation and loopback modes (the
    server mode is the loopback mode's code on another URL); run as `python
    bench/precision.py …` runs it, in this process (tension.testing.script)."""
    import json
    from pathlib import Path

    from tension.testing.script import run_file_here

    bench = Path(__file__).resolve().parents[2] / "bench" / "precision.py"
    out = tmp_path / "b.json"
    done = run_file_here(bench, "--stories", "6", "--positions", "20", "--resamples", "20", "--targets", "0.04", "0.1",
                         "--json", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "| target | endings used |" in done.stdout and "| 0.04 |" in done.stdout
    res = json.loads(out.read_text())["sim"]
    assert set(res) == {"0.04", "0.1"} and set(res["0.1"]) == set(precision.SHAPES)
    done = run_file_here(bench, "loopback", "--stories", "1", "--targets", "0.1", "--yes-rates", "0.05", "--json", out,
                         cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    row = json.loads(out.read_text())["loopback"]["0.05"]
    assert row["targets"]["0.1"]["endings"] < row["fixed_endings"]
