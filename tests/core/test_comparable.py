"""What a reader may conclude from the second-order statistics (issue 57, docs/metrics.md
1.9): the comparable estimates in stories.csv, groups.csv and report.md, and `compare`
calling a difference a finding only where the study supports it, with ✓ meaning p < 0.05."""

from __future__ import annotations

import csv
import json
import math

import pytest

from tension.core.cli import main
from tension.core.reports.comparable import finding_min_endings
from tension.core.reports.comparison import compare, comparison_table
from tension.core.reports.report import report
from tension.testing.simulated_run import write_simulated_run

FEW, MANY = ("flat with dips", 2, 0.85), ("flat with dips", 4, 0.85)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two groups of 30 stories whose true turn rates differ 1.5–2×, at 100 and at 20 endings."""
    root = tmp_path_factory.mktemp("comparable")
    return {(cfg, n): write_simulated_run(root / f"{cfg[1]}-{n}", cfg, 30, n, seed=cfg[1])
            for cfg in (FEW, MANY) for n in (100, 20)}


def _row(c, stat):
    return next(r for r in c.rows if r.stat == stat)


def test_a_difference_of_the_comparable_ir_at_100_endings_is_a_finding_and_the_papers_never(runs):
    c = compare(runs[FEW, 100], runs[MANY, 100], n_resamples=2000)
    ir = _row(c, "ir60_comparable")
    assert ir.diff > 0 and ir.p < 0.05 and ir.finding and ir.why_not is None
    assert _row(c, "ir60").why_not and not _row(c, "ir60").finding  # the paper's, whatever its p
    for stat in ("retain", "convergence", "ir30", "ir120"):
        assert not _row(c, stat).finding and "for reproduction" in _row(c, stat).why_not
    table = comparison_table(c)
    assert "| ir60_comparable | 30 |" in table and "✓: a finding: p < 0.05" in table


def test_below_the_studys_endings_a_significant_comparable_difference_is_said_to_be_no_finding(runs):
    c = compare(runs[FEW, 20], runs[MANY, 20], n_resamples=2000)
    for r in c.rows:
        if r.stat.endswith("_comparable"):
            assert not r.finding
            need = finding_min_endings(r.stat)
            assert r.why_not == (f"20 endings a position: the study holds this estimate's comparisons only from "
                                 f"{need} (docs/metrics.md 1.9)" if need else
                                 "the study found no number of endings at which this estimate's group comparisons "
                                 "hold (docs/metrics.md 1.9): read it as a description")
    table = comparison_table(c)
    refused = [r for r in c.rows if r.significant and r.why_not]
    for r in refused:  # each significant one is marked and its reason printed under the table
        assert f"‡ {r.stat}: {r.why_not}" in table
    csv_rows = list(csv.DictReader(comparison_table(c, "csv").splitlines()))
    assert {r["statistic"]: r["why_not"] for r in csv_rows}["ir60_comparable"].startswith("20 endings")


def test_a_tick_means_p_below_005_not_only_an_interval_that_excludes_0(tmp_path):
    """Three pairs whose differences are all positive: the bootstrap interval excludes 0,
    the t-test says p ≈ 0.36; no ✓ (the issue's p = 0.07 case, its class)."""
    for name, shift in (("a", (0.0, 0.0, 0.0)), ("b", (0.01, 0.02, 0.3))):
        d = tmp_path / name
        d.mkdir()
        with (d / "positions.jsonl").open("w") as f:
            for i, s in enumerate(shift):
                for k in range(1, 6):
                    f.write(json.dumps({"id": f"s{i}", "group": "g", "k": k, "pct": k / 5, "n_endings": 100,
                                        "n_match": round(100 * (0.5 - s)), "n_empty": 0, "n_malformed": 0,
                                        "no_rate": 1 - round(100 * (0.5 - s)) / 100}) + "\n")
    c = compare(tmp_path / "a", tmp_path / "b", n_resamples=2000)
    row = _row(c, "mean_nr")
    assert row.lo > 0 and row.p > 0.05
    assert not row.significant and not row.finding
    assert "| mean_nr | 3 |" in comparison_table(c) and "✓" not in comparison_table(c).split("✓: a finding")[0]


def test_groups_csv_carries_the_comparable_estimates_with_widened_intervals(runs, tmp_path):
    out = tmp_path / "m"
    assert main(["metrics", str(runs[MANY, 100]), "--out", str(out), "--interval-resamples", "200"]) == 0
    with (out / "groups.csv").open() as f:
        groups = {r["statistic"]: r for r in csv.DictReader(f)}
    paper_order = ["mean_nr", "late_nr", "retain", "convergence", "ir30", "ir60", "ir120"]
    assert list(groups) == paper_order + [f"{s}_comparable" for s in paper_order[2:]]
    g = groups["ir60_comparable"]
    n, sd, ci95 = int(g["n"]), float(g["sd"]), float(g["ci95"])
    assert n == 30 and ci95 >= 1.96 * sd / math.sqrt(n) - 1e-12  # the plain half-width, widened
    assert float(g["boot_lo"]) < float(g["mean"]) < float(g["boot_hi"])
    with (out / "stories.csv").open() as f:
        stories = list(csv.DictReader(f))
    assert all(float(s["ir60_comparable_lo"]) <= float(s["ir60_comparable"]) <= float(s["ir60_comparable_hi"])
               for s in stories)
    # the paper's columns keep their places
    assert list(stories[0])[:11] == ["id", "group", "n_positions", *paper_order, "nan_reasons"]


def test_report_md_says_what_the_comparable_statistics_support_at_the_runs_endings(runs):
    text = report(runs[MANY, 20], max_curves=0, n_resamples=500).read_text()
    assert "## Second-order statistics that can be compared (docs/metrics.md 1.9)" in text
    assert "Positions hold at least 20 endings." in text and "**Not** yet those of ir30 (from 50)" in text
    text = report(runs[MANY, 100], max_curves=0, n_resamples=500).read_text()
    assert "Differences between groups of ir30, ir60, ir120 may be read as findings" in text
    assert "retain: a description only" in text


def test_compare_says_when_two_seeded_runs_used_different_seed_schemes():
    from tension.core.reports.comparison import run_about, setup_warnings

    new = run_about({"config": {"seed": 1, "seed_scheme": "position", "endings": 100}})
    old = run_about({"config": {"seed": 1, "endings": 100}})  # recorded before the scheme: the run scheme
    assert old.seed_scheme == "run"
    said = setup_warnings(old, new)
    assert said == ["A and B used different seed schemes (A: run, B: position; docs/metrics.md 1.2–1.3): their "
                    "endings are other draws, so a difference of a story includes the sampling of endings (its "
                    "interval holds it)"]
    unseeded = run_about({"config": {"seed_scheme": "position"}})
    assert setup_warnings(unseeded, run_about({"config": {}})) == []


def test_a_widened_group_interval_stays_within_the_statistics_range(tmp_path):
    """Widening a group's interval by its shift to the noise floor (docs/metrics.md 1.9) took
    the bootstrap interval of a comparable IR whose stories have few or no turns below 0
    (`0.000 [-0.041, 0.041]` in report.md): a rate of turns per position is never
    negative. The ends are cut to the statistic's range, as a story's interval is (1.6)."""
    import random

    rng = random.Random(1)
    lines = []
    for s in range(6):  # flat at 0.5, 10 endings a position: noise, and turns only by chance
        m = 40
        x = [0.1 + 0.85 * j / (m - 1) for j in range(m)]
        k = [sum(rng.random() < 0.5 for _ in range(10)) for _ in x]
        lines.append(json.dumps({"id": f"s{s}", "x": x, "y": [1 - v / 10 for v in k], "n_endings": [10] * m,
                                 "n_match": k}))
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["metrics", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "m"),
                 "--interval-resamples", "0"]) == 0
    with (tmp_path / "m" / "groups.csv").open() as f:
        rows = {r["statistic"]: r for r in csv.DictReader(f) if r["statistic"].endswith("_comparable")}
    ranges = {"retain": (0.0, 100.0), "convergence": (-100.0, 0.0)}
    widened = 0
    for stat, r in rows.items():
        if not r["boot_lo"]:
            continue
        lo, hi = ranges.get(stat.removesuffix("_comparable"), (0.0, 1.0))
        assert lo <= float(r["boot_lo"]) <= float(r["mean"]) <= float(r["boot_hi"]) <= hi, (stat, r)
        widened += float(r["ci95"]) > 1.96 * float(r["sd"]) / math.sqrt(int(r["n"])) + 1e-12
    assert widened >= 2  # the case: intervals that were widened, near the range's end
    # a group of one story has no interval, widened or not (a cut must not make one of NaN)
    (tmp_path / "one.jsonl").write_text(lines[0] + "\n")
    assert main(["metrics", str(tmp_path / "one.jsonl"), "--out", str(tmp_path / "m1"),
                 "--interval-resamples", "0"]) == 0
    with (tmp_path / "m1" / "groups.csv").open() as f:
        one = [r for r in csv.DictReader(f) if r["statistic"].endswith("_comparable") and r["mean"]]
    assert one and all(r["boot_lo"] == r["boot_hi"] == "" for r in one), one
