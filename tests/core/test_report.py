"""Reports: bootstrap and t-test against scipy, exact tables, figures whose
triangles are the kernels' sharp reversals, compare on two runs."""

from __future__ import annotations

import json
import math
import random
from contextlib import closing
from pathlib import Path

import curve_reference as ref
import msgspec
import numpy as np
import pytest

from tension.core.cli import main
from tension.core.reports.comparison import compare, comparison_table
from tension.core.reports.figures import curve_figure
from tension.core.reports.report import report
from tension.core.reports.run_folder import load_run
from tension.core.reports.tables import table6, table18
from tension.kernels.bootstrap import percentile_ci, resample_means
from tension.kernels.curves import CurveSettings


def write_run(d: Path, stories: dict[str, tuple[str, list[float], list[float], dict]]) -> Path:
    """A score-run folder made by hand: positions.jsonl and meta.jsonl only."""
    d.mkdir(parents=True, exist_ok=True)
    with (d / "positions.jsonl").open("w") as f:
        for sid, (group, x, y, _) in stories.items():
            for k, (xi, yi) in enumerate(zip(x, y), start=1):
                f.write(json.dumps({"id": sid, "group": group, "k": k, "pct": xi, "n_endings": 100,
                                    "n_match": round(100 * (1 - yi)), "n_empty": 0, "n_malformed": 0,
                                    "no_rate": yi}) + "\n")
    with (d / "meta.jsonl").open("w") as f:
        for sid, (group, _, _, meta) in stories.items():
            f.write(json.dumps({"id": sid, "group": group, "words": 700, "meta": meta}) + "\n")
    return d


def random_curve(rng: random.Random, m: int) -> tuple[list[float], list[float]]:
    x = sorted({round(rng.uniform(0.1, 0.99), 4) for _ in range(m)})
    return x, [rng.randint(0, 100) / 100 for _ in x]


def random_run(d: Path, seed: int, n: int = 30, shift: float = 0.0) -> Path:
    rng = random.Random(seed)
    stories = {}
    for i in range(n):
        x, y = random_curve(rng, rng.randint(20, 60))
        y = [min(1.0, max(0.0, v + shift)) for v in y]
        stories[f"s{i:02d}-{seed}"] = ("human" if i % 2 else "llm", x, y, {"prompt_id": f"p{i}"})
    return write_run(d, stories)


# --- bootstrap -------------------------------------------------------------------


def test_bootstrap_matches_scipy_percentile_bootstrap():
    from scipy import stats as sps  # at use: ≈ 0.7 s of every worker's collection

    v = np.random.default_rng(3).random(57)
    lo, hi = percentile_ci(v, 10_000, seed=11)
    s = sps.bootstrap((v,), np.mean, n_resamples=10_000, method="percentile", random_state=11,
                      vectorized=True).confidence_interval
    # Same generator (MT19937 seeded alike), same draw order: the same interval.
    assert (lo, hi) == pytest.approx((s.low, s.high), abs=1e-12)
    assert lo < v.mean() < hi


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_bootstrap_is_seeded_and_contains_the_mean(seed):
    v = np.random.default_rng(seed).normal(0.6, 0.1, 40)
    assert percentile_ci(v, seed=seed) == percentile_ci(v, seed=seed)
    lo, hi = percentile_ci(v, seed=seed)
    assert lo < v.mean() < hi
    # the normal interval and the bootstrap agree roughly on a symmetric sample
    half = 1.96 * v.std(ddof=1) / math.sqrt(len(v))
    assert (hi - lo) == pytest.approx(2 * half, rel=0.15)


def test_bootstrap_edge_cases():
    assert all(math.isnan(b) for b in percentile_ci([0.5]))
    assert all(math.isnan(b) for b in percentile_ci([]))
    assert percentile_ci([0.3, 0.3, 0.3]) == (0.3, 0.3)
    assert percentile_ci([np.nan, 0.2, 0.4]) == (0.2, 0.4)  # NaNs dropped, two values left
    m = resample_means([1.0, 2.0], 1000, seed=5)
    assert set(np.unique(m)) <= {1.0, 1.5, 2.0}


# --- tables ----------------------------------------------------------------------


def test_tables_exact(tmp_path):
    run = write_run(tmp_path / "r", {
        "a1": ("human", [0.1, 0.3, 0.5, 0.7, 0.9], [0.5, 0.9, 0.3, 0.6, 0.4], {}),
        "a2": ("human", [0.2, 0.5, 0.85], [0.5, 0.5, 0.5], {}),
        "b1": ("llm", [0.2, 0.4, 0.6, 0.85], [0.8, 0.2, 0.4, 0.1], {}),
    })
    data = load_run(run, CurveSettings(window=1))
    # a1: mean .54, late .4, retain 50%, IR 0/.4/.6 (hand-worked in test_metrics_cli)
    # a2: flat: mean .5, late .5, no peak, IR 0.
    # b1: mean .375, late .1; peak at j=2 (0.4 > 0.2, 0.4 > 0.1): low .1 -> 25%;
    #     reversals at j=1 and j=2 in the unit square X=[0,.308,.615,1], Y=[1,.143,.429,0]:
    #     j=1: legs (-.308,.857), (.308,.286): cos = .150/(.911·.420) = .393 -> 66.9°;
    #     j=2: legs (-.308,-.286), (.385,-.429): cos = .004/(.420·.576) = .017 -> 89.0°
    #     -> IR30 = IR60 = 0, IR120 = 2/4.
    assert table6(data.groups, data.settings) == (
        "| Corpus | n | Mean NR | Late NR | Retain | IR30 | IR60 | IR120 |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|\n"
        "| human | 2 | 0.520 | 0.450 | 50.0% (n = 1) | 0.000 | 0.200 | 0.300 |\n"
        "| llm | 1 | 0.375 | 0.100 | 25.0% | 0.000 | 0.000 | 0.500 |\n")
    assert table6(data.groups, data.settings, "csv").splitlines()[1] == "human,2,0.520,0.450,50.0%,0.000,0.200,0.300"
    t18 = table18(data.groups, data.settings)
    assert "| human | 2 | 0.520 [0.500, 0.540] | 0.450 [0.400, 0.500] | 50.0% (n = 1) | 0.000 [0.000, 0.000] |" in t18
    assert "| llm | 1 | 0.375 | 0.100 | 25.0% | 0.000 | 0.000 | 0.500 |" in t18


def test_a_group_value_of_fewer_stories_than_the_group_says_how_many(tmp_path, capsys):
    """A group's value of a statistic some of its stories leave undefined (no peak: Retain;
    no late position: late NR; no turn that is a peak: the comparable Retain) is the mean of
    the others (METRICS 1.5: "NaNs excluded, counted and reported"). report.md's tables and
    the terminal table of `metrics` printed it beside the group's n of stories, as if every
    story were in it: `human | 2 | … | 50.0%` was one story's Retain. Every table that
    prints a group's value with its n says so where the value rests on fewer."""
    run = write_run(tmp_path / "r", {
        "a1": ("human", [0.1, 0.3, 0.5, 0.7, 0.9], [0.5, 0.9, 0.3, 0.6, 0.4], {}),
        "a2": ("human", [0.2, 0.5, 0.85], [0.5, 0.5, 0.5], {}),
        "a3": ("human", [0.2, 0.3, 0.4], [0.5, 0.6, 0.5], {}),
        "b1": ("llm", [0.2, 0.4, 0.6, 0.85], [0.8, 0.2, 0.4, 0.1], {}),
    })
    assert main(["report", str(run), "--window", "1", "--interval-resamples", "0"]) == 0
    md = (run / "report.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| human |")]
    assert len(rows) == 3, md  # Table 6, Table 18, the comparable statistics
    # Retain of a1 and a3 (a2 is flat: no peak); late NR of a1 and a2 (a3 has no late position)
    assert "| human | 3 | 0.524 | 0.450 (n = 2) | 66.7% (n = 2) |" in rows[0], rows[0]
    assert "(n = 2)" in rows[1]
    capsys.readouterr()
    assert main(["metrics", str(run), "--out", str(tmp_path / "m"), "--window", "1",
                 "--interval-resamples", "0"]) == 0
    human = [line for line in capsys.readouterr().out.splitlines() if line.startswith("human")]
    assert "(n = 2)" in human[0], human


# --- figures ---------------------------------------------------------------------


def test_figure_triangles_are_the_sharp_reversals(tmp_path):
    rng = random.Random(7)
    checked = 0
    for i in range(25):
        x, y = random_curve(rng, rng.randint(3, 80))
        window = rng.choice([1, 3, 5])
        got = curve_figure(tmp_path / f"c{i}.png", f"c{i}", x, y, CurveSettings(window=window))
        ys = ref.smooth(y, window)
        ang = ref.vertex_angles(x, ys)
        rev = ref.reversals(ys)
        want = [j for j in range(len(x)) if rev[j] and ang[j] is not None and ang[j] <= 60 + 1e-9]
        assert list(got) == want
        assert (tmp_path / f"c{i}.png").stat().st_size > 5_000
        checked += len(want)
    assert checked > 20  # the triangles were really exercised


def test_one_reused_curve_frame_draws_each_story_as_a_fresh_figure_would(tmp_path):
    """The report draws every curve on one frame (CurvePlot, drawn once, restored per
    story): nothing of one story may be left in the next one's pixels."""
    import numpy as np
    from PIL import Image

    from tension.core.reports.figures import CurvePlot

    rng = random.Random(3)
    curves = [random_curve(rng, n) for n in (40, 7, 0, 25)]  # peaks, few points, none, again
    with closing(CurvePlot(CurveSettings())) as shared:
        for i, (x, y) in enumerate(curves):
            shared.draw(tmp_path / f"shared{i}.png", f"story {i}", x, y)
    for i, (x, y) in enumerate(curves):
        curve_figure(tmp_path / f"alone{i}.png", f"story {i}", x, y)
        a, b = (np.asarray(Image.open(tmp_path / f"{k}{i}.png")) for k in ("shared", "alone"))
        assert a.shape == b.shape and (a == b).all(), i
    empty = np.asarray(Image.open(tmp_path / "shared2.png"))
    full = np.asarray(Image.open(tmp_path / "shared1.png"))
    assert (empty != full).any()  # the empty story really has no curve of the one before


def test_a_processs_reports_share_one_curve_frame_lent_to_one_report_at_a_time(tmp_path):
    """`report_curves` keeps a report's curve frame for the process's next report of the
    same settings; a second report's curves are still each what a fresh figure draws.
    A report drawn while another holds the frame gets its own, other settings or a
    changed matplotlib style get a new frame, and a report that fails keeps nothing."""
    import matplotlib
    import numpy as np
    from PIL import Image

    from tension.core.reports.figure_cache import report_curves

    rng = random.Random(5)
    settings = CurveSettings(window=3)
    with report_curves(settings) as first:
        first.draw(tmp_path / "a.png", "story a", *random_curve(rng, 30))
        with report_curves(settings) as beside:  # two runs in flight
            assert beside is not first
    x, y = random_curve(rng, 12)
    with report_curves(settings) as second:
        assert second is first or second is beside  # kept, not drawn again
        second.draw(tmp_path / "again.png", "story b", x, y)
    curve_figure(tmp_path / "alone.png", "story b", x, y, settings)
    a, b = (np.asarray(Image.open(tmp_path / f"{k}.png")) for k in ("again", "alone"))
    assert a.shape == b.shape and (a == b).all()

    with report_curves(CurveSettings(window=5)) as other:
        assert other is not second and other.settings.window == 5
    with matplotlib.rc_context({"font.size": 14}), report_curves(settings) as restyled:
        assert restyled is not second
    with pytest.raises(OSError), report_curves(settings) as failing:
        failing.draw(tmp_path / "no such folder" / "c.png", "story c", x, y)
    with report_curves(settings) as after:
        assert after is not failing


def test_a_bar_figure_drawn_again_from_the_same_numbers_and_style_is_written_from_the_first_drawing(tmp_path,
                                                                                                   monkeypatch):
    """`bars_figure` keeps the PNGs a process drew, by what they were drawn from: the same
    numbers, labels and style are written from the bytes drawn first, without a drawing;
    a changed number, label or style is drawn anew."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from tension.core.reports.figure_cache import bars_figure
    from tension.kernels.groups import describe

    drawn = []
    draw = FigureCanvasAgg.draw
    monkeypatch.setattr(FigureCanvasAgg, "draw", lambda canvas: drawn.append(1) or draw(canvas))
    rng = np.random.default_rng(8)
    groups = {st: {g: describe(rng.random(9), 50) for g in ("human", "model")} for st in ("nr", "late_nr")}
    labels = ["NR", "Late NR"]

    def bars(name: str, groups=groups, labels=labels) -> bytes:
        bars_figure(tmp_path / f"{name}.png", groups, ["nr", "late_nr"], labels, "No-rate", "no-rate", top=1.0)
        return (tmp_path / f"{name}.png").read_bytes()

    first = bars("first")
    assert len(drawn) == 1
    assert bars("again") == first and len(drawn) == 1  # written, not drawn

    moved = {**groups, "nr": {**groups["nr"], "model": msgspec.structs.replace(groups["nr"]["model"],
                                                                                 boot_hi=groups["nr"]["model"].boot_hi
                                                                                 + 0.05)}}
    assert bars("moved", groups=moved) != first and len(drawn) == 2
    assert bars("relabelled", labels=["NR", "Late"]) != first and len(drawn) == 3
    with matplotlib.rc_context({"font.size": 14}):
        assert bars("restyled") != first and len(drawn) == 4
    assert bars("back") == first and len(drawn) == 5  # drawn again in the first style: the bytes kept before
    with pytest.raises(OSError):
        bars("no such folder/x")
    assert len(drawn) == 5 and bars("after") == first


def test_a_figure_is_kept_by_every_array_and_struct_it_was_drawn_from(tmp_path):
    """`drawn_once` keys a figure by its inputs whole: an array's values, type and shape,
    a Struct's fields; inputs it cannot encode are drawn every time."""
    from tension.core.reports.figure_cache import drawn_once
    from tension.core.reports.figures import new_figure

    calls = []

    def figure(*inputs):
        def draw():
            calls.append(inputs)
            fig = new_figure((2, 2))
            fig.subplots().plot([0, 1], [0, 1])
            return fig
        drawn_once(tmp_path / "f.png", ["test figure", *inputs], draw)
        return len(calls)

    a = np.array([[0.1, 0.5], [0.2, 0.9]])
    assert figure(a, CurveSettings()) == 1 and figure(a.copy(), CurveSettings()) == 1
    assert figure(a.T, CurveSettings()) == 2  # the same values in another order
    assert figure(a.astype(np.float32), CurveSettings()) == 3
    assert figure(a.reshape(4), CurveSettings()) == 4
    assert figure(a, CurveSettings(window=3)) == 5
    assert figure(object()) == 6 and figure(object()) == 7  # no key: drawn each time


_FILES_WITHOUT_PYPLOT = """
import sys
from pathlib import Path
from tension.core.reports.figure_cache import bars_figure, report_curves
from tension.kernels.curves import CurveSettings
from tension.kernels.groups import describe

out = Path(sys.argv[1])
groups = {"nr": {"human": describe([0.2, 0.4, 0.5], 20)}}
bars_figure(out / "bars.png", groups, ["nr"], ["NR"], "No-rate", "no-rate", top=1.0)
with report_curves(CurveSettings()) as plot:
    plot.draw(out / "curve.png", "story", [0.2, 0.5, 0.9], [0.3, 0.8, 0.4])
print("matplotlib.pyplot" in sys.modules, "matplotlib" in sys.modules)
"""


def test_a_reports_figure_files_are_drawn_without_pyplot(tmp_path):
    """The files are drawn by Agg outside pyplot (figures.py): asking matplotlib's style
    for the figures kept by style once read its backend, which imports pyplot to choose one."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FILES_WITHOUT_PYPLOT, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
    assert (tmp_path / "bars.png").stat().st_size > 0 and (tmp_path / "curve.png").stat().st_size > 0


def test_report_writes_tables_figures_and_markdown(tmp_path):
    run = random_run(tmp_path / "r", 1)
    (run / "run.json").write_text(json.dumps({"status": "complete", "corpus": "c.jsonl", "wall_seconds": 7200,
                                              "stories": {"kept": 30}, "config": {"window": 5}}))
    path = report(run, max_curves=3, gpu_hour_usd=2.5)
    text = path.read_text()
    assert "| Corpus | n | Mean NR |" in text and "![Inflection rate](figures/ir.png)" in text
    assert "2.000 h of wall time × $2.5/GPU-hour = $5.00" in text
    for f in ("figures/nr.png", "figures/ir.png", "figures/retain.png", "table6.csv", "table18.csv"):
        assert (run / f).stat().st_size > 0
    assert len(list((run / "figures" / "curves").iterdir())) == 3


# --- compare ---------------------------------------------------------------------


def test_compare_identical_runs_gives_zero_difference(tmp_path):
    a = random_run(tmp_path / "a", 2)
    c = compare(a, a, "id")
    assert c.n_pairs == 30
    for r in c.rows:
        assert r.diff == 0 and r.lo == 0 and r.hi == 0 and not r.significant
        assert math.isnan(r.p)


def test_the_paired_t_test_is_scipys_bit_for_bit_on_random_pairs():
    """`paired_t` spares compare and the view scipy.stats' import: the same statistic and
    p-value as `ttest_rel` to the last bit, on sizes 2–1,000 and scales 1e-6–1e3, with
    noise, rounded values, and zero variance (identical runs: NaN; a constant shift: inf, 0)."""
    import warnings

    from scipy import stats as sps

    from tension.core.reports.comparison import paired_t

    rng = np.random.default_rng(1)
    for i in range(500):  # 20,000 when it was written, all equal; scipy's call costs ≈ 1.5 ms
        n = int(rng.choice([2, 3, 5, 10, 30, 1000]))
        scale = 10 ** rng.uniform(-6, 3)
        a = rng.random(n) * scale
        b = (a + rng.normal(0, scale * 0.1, n), a.copy(), a + 0.25 * scale, np.round(a + rng.normal(0, scale, n), 2),
             rng.random(n) * scale)[i % 5]
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            want = sps.ttest_rel(b, a)
        got = paired_t(b, a)
        assert np.array_equal([want.statistic, want.pvalue], got, equal_nan=True), (i, n, want, got)
    assert math.isnan(paired_t(np.ones(3), np.ones(3))[0])
    assert paired_t(np.ones(3) + 1, np.ones(3)) == (math.inf, 0.0)


def test_compare_against_scipy_on_fixed_data(tmp_path):
    from scipy import stats as sps

    a = random_run(tmp_path / "a", 3)
    # B: the same prompts with other stories whose no-rates sit higher
    b = random_run(tmp_path / "b", 4, shift=0.15)
    c = compare(a, b, "prompt_id", n_resamples=10_000, seed=0)
    da, db = load_run(a, n_resamples=0), load_run(b, n_resamples=0)
    va = da.values("mean_nr")
    vb = db.values("mean_nr")  # both runs list prompts p00..p29 in the same order
    row = next(r for r in c.rows if r.stat == "mean_nr")
    t = sps.ttest_rel(vb, va)
    assert row.n_pairs == 30
    assert row.diff == pytest.approx(float(np.mean(vb - va)), abs=1e-12)
    assert (row.t, row.p) == pytest.approx((t.statistic, t.pvalue), rel=1e-9)
    s = sps.bootstrap((vb - va,), np.mean, n_resamples=10_000, method="percentile", random_state=0).confidence_interval
    assert (row.lo, row.hi) == pytest.approx((s.low, s.high), abs=1e-12)
    assert row.significant and row.lo > 0
    table = comparison_table(c)
    assert "| mean_nr | 30 |" in table and "✓" in table


def test_compare_cli_and_pairing_errors(tmp_path, capsys):
    a = random_run(tmp_path / "a", 5)
    b = random_run(tmp_path / "b", 6)
    assert main(["compare", str(a), str(b), "--pair-by", "prompt_id", "--out", str(tmp_path / "cmp")]) == 0
    assert (tmp_path / "cmp" / "compare.csv").read_text().startswith("statistic,n_pairs,mean_a,mean_b,diff")
    assert "30 pairs by `prompt_id`" in capsys.readouterr().out
    assert main(["compare", str(a), str(b), "--pair-by", "nope"]) == 1
    assert "has no field `nope` to pair by" in capsys.readouterr().err
    assert main(["compare", str(a), str(b)]) == 1  # ids differ: nothing pairs
    assert "no story of" in capsys.readouterr().err
    assert main(["compare", str(a), str(tmp_path)]) == 1
    assert "not a score run" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["report", "compare"])
@pytest.mark.parametrize("resamples", ["1", "50", "99"])
def test_too_few_bootstrap_resamples_are_a_usage_error_not_a_traceback(tmp_path, capsys, verb, resamples):
    """`compare --resamples 0` died in numpy (IndexError), `report --resamples 1` in
    matplotlib (an interval that did not hold its mean: negative error bars). A percentile
    interval's ends need 100 resamples or more (docs/metrics.md 1.6): 1–99 are refused by
    report and compare, and compare, whose ✓ needs its interval, refuses 0 too."""
    a = random_run(tmp_path / "a", 5, n=4)
    argv = {"report": ["report", str(a)], "compare": ["compare", str(a), str(a)]}[verb]
    with pytest.raises(SystemExit) as e:
        main([*argv, "--resamples", resamples])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--resamples: expected" in err and "at least 100" in err and "Traceback" not in err, err
    assert not (a / "report.md").exists()


def test_compare_refuses_no_bootstrap_and_report_takes_it_as_no_intervals(tmp_path, capsys):
    import tension
    from tension.core.errors import ConfigError

    a = random_run(tmp_path / "a", 5, n=4)
    with pytest.raises(SystemExit) as e:
        main(["compare", str(a), str(a), "--resamples", "0"])
    assert e.value.code == 2
    assert "a finding needs its bootstrap interval" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="resamples"):
        tension.compare(a, a, resamples=0)
    with pytest.raises(ConfigError, match="resamples"):
        tension.compare(a, a, resamples=20)
    assert main(["report", str(a), "--resamples", "0", "--max-curves", "0"]) == 0
    assert main(["report", str(a), "--resamples", "100", "--max-curves", "0"]) == 0
