"""`tension-run subsample RUN_DIR` on the user's path (issue 37, docs/metrics.md 1.8):
a finished score run on the test server (its in-process door: the run's cache is the
subject, not the wire), read back from its cache without a request; its k = n row is the run's own stories.csv and groups.csv; the recommended
k on simulated corpora; the kernel against a plain reference."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tension.core.cli import main
from tension.core.reports.metrics import stat_columns
from tension.core.reports.subsampling import SHIFT_TOLERANCE, WIDTH_TOLERANCE, first_k, format_subsampling, subsample
from tension.kernels.curves import CurveSettings, batch_stats
from tension.kernels.intervals import story_seeds
from tension.kernels.subsample import first_k_counts, subsample_stats
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer
from tension.testing.precision import simulated_verdicts


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text().splitlines()))


def _score(server, tmp: Path, *extra: str) -> Path:
    corpus = tmp / "corpus.jsonl"
    make_corpus(corpus, 4, seed=3)  # groups a and b, two stories each
    out = tmp / "run"
    assert main(["score", str(corpus), "--out", str(out), "--base-url", server.base_url, "--model", "test-gen",
                 "--judge-model", "test-judge", "--endings", "12", "--seed", "5", "--no-progress", "--cache",
                 str(tmp / "cache"), *extra]) == 0
    return out


@pytest.fixture(scope="module")
def _module_server():
    with InProcessServer(["test-gen", "test-judge"]).serving() as srv:
        yield srv


@pytest.fixture(scope="module")
def _scored_once(_module_server, tmp_path_factory):
    """One run for the module (scoring is the slow part), in a home of its own."""
    tmp = tmp_path_factory.mktemp("subsample")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(tmp / "home"))
        mp.setenv("XDG_CACHE_HOME", str(tmp / "home" / ".cache"))
        mp.delenv("OPENAI_API_KEY", raising=False)
        return _score(_module_server, tmp), tmp


@pytest.fixture
def scored(_scored_once, _module_server):
    run, tmp = _scored_once
    return run, _module_server, tmp


def test_subsample_of_a_finished_run_sends_no_request_and_its_full_row_is_the_runs_own(scored, capsys):
    run, server, tmp = scored
    before = server.count()
    capsys.readouterr()
    rc = main(["subsample", str(run), "--ks", "2,4,8", "--out", str(tmp / "sub")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert server.count() == before  # read from the cache alone
    assert "recommended endings for mean_nr, late_nr" in out
    doc = json.loads((tmp / "sub" / "subsample.json").read_text())
    assert (tmp / "sub" / "subsample.png").stat().st_size > 1000
    res = doc["result"]
    assert res["ks"] == [2, 4, 8, 12]
    names = res["stat_names"]
    stories = _rows(run / "stories.csv")
    full = res["story_stats"]["12"]
    assert len(full) == len(stories)
    for row, values in zip(stories, full):
        for name, v in zip(names, values):
            want = row[name]
            assert (want == "" and v is None) or math.isclose(float(want), v, rel_tol=1e-9, abs_tol=1e-12), name
    groups = res["groups"]["12"]
    for g in _rows(run / "groups.csv"):
        got = groups[g["statistic"]][g["group"]]
        for field in ("mean", "sd", "ci95", "boot_lo", "boot_hi"):
            want = g[field]
            assert (want == "" and got[field] is None) or math.isclose(float(want), got[field], rel_tol=1e-9,
                                                                        abs_tol=1e-12), (g, field)
        assert int(g["n"]) == got["n"]
    # the k = n row moves nothing
    for r in res["rows"]:
        if r["k"] == 12 and r["full"] is not None:
            assert r["shift"] == 0.0 and r["spread"] == 0.0


def test_subsample_first_k_is_what_a_run_at_fewer_endings_with_the_same_seed_scores(scored, capsys):
    """On a seed-per-choice server, --endings 4 draws the first 4 of --endings 12's endings:
    subsample's k = 4 row holds that run's stories.csv."""
    run, server, tmp = scored
    corpus = tmp / "corpus.jsonl"
    small = tmp / "run4"
    assert main(["score", str(corpus), "--out", str(small), "--base-url", server.base_url, "--model", "test-gen",
                 "--judge-model", "test-judge", "--endings", "4", "--seed", "5", "--no-progress", "--cache",
                 str(tmp / "cache")]) == 0
    capsys.readouterr()
    assert main(["subsample", str(run), "--ks", "4", "--out", str(tmp / "sub")]) == 0
    res = json.loads((tmp / "sub" / "subsample.json").read_text())["result"]
    for row, values in zip(_rows(small / "stories.csv"), res["story_stats"]["4"]):
        for name, v in zip(res["stat_names"], values):
            assert (row[name] == "" and v is None) or math.isclose(float(row[name]), v, rel_tol=1e-9), name


def test_subsample_of_a_folder_without_its_cache_says_where_it_looked(scored, capsys):
    run, _, tmp = scored
    capsys.readouterr()
    assert main(["subsample", str(run), "--cache", str(tmp / "nowhere")]) == 1  # a missing input
    err = capsys.readouterr().err
    assert "no cache at" in err and "--cache PATH" in err and "Traceback" not in err


def test_subsample_of_an_unknown_statistic_is_a_usage_error(scored, capsys):
    run, _, _ = scored
    capsys.readouterr()
    assert main(["subsample", str(run), "--stats", "mean_nr,tension"]) == 2
    assert "tension" in capsys.readouterr().err


def test_subsample_of_a_folder_that_is_no_run_is_a_bad_input(tmp_path, capsys):
    assert main(["subsample", str(tmp_path)]) == 1  # as `report` of it is (test_exit_statuses.py)
    assert "not a score run folder" in capsys.readouterr().err


# --- the kernel against a plain reference ---------------------------------------

def _reference_subsets(v, k, draws, seeds, settings):
    """The same draws in plain Python: numba's generator seeded per story, the same
    partial Fisher–Yates shuffle, the statistics by the batch kernel."""
    import numba

    @numba.njit
    def draw_story(seed, match, starts, a, b, k, draws):
        np.random.seed(seed)
        out = np.empty((draws, b - a))
        for r in range(draws):
            for j in range(a, b):
                nj = starts[j + 1] - starts[j]
                idx = np.arange(nj)
                use = min(k, nj)
                m = 0
                for t in range(use):
                    c = t + np.random.randint(0, nj - t)
                    idx[c], idx[t] = idx[t], idx[c]
                    m += match[starts[j] + idx[t]]
                out[r, j - a] = 1.0 - m / use
        return out

    rows = []
    for i in range(len(v.ids)):
        a, b = int(v.offsets[i]), int(v.offsets[i + 1])
        ys = draw_story(seeds[i], v.match, v.starts, a, b, k, draws)
        xs = np.tile(v.x[a:b], draws)
        st = batch_stats(xs, ys.ravel(), np.arange(draws + 1) * (b - a), settings)
        rows.append(np.column_stack([st.mean_nr, st.late_nr, st.retain, st.convergence, st.ir]))
    return np.stack(rows)


def test_subsample_kernel_matches_a_plain_reference():
    v, _ = simulated_verdicts(3, 25, 30, seed=4, shapes=["spiky (0.8 ± 0.12, reversals)", "flat high (0.95)"])
    s = CurveSettings()
    seeds = story_seeds(v.ids, 9)
    got = subsample_stats(v.x, v.match, v.starts, v.offsets, seeds, 7, 5, s)
    want = _reference_subsets(v, 7, 5, seeds, s)
    np.testing.assert_allclose(got, want, equal_nan=True)
    # a subset of all n endings is the full curve
    full = subsample_stats(v.x, v.match, v.starts, v.offsets, seeds, 30, 2, s)
    n, m = first_k_counts(v.match, v.starts, 30)
    st = batch_stats(v.x, 1.0 - m / n, v.offsets, s)
    np.testing.assert_allclose(full[:, 0, :], np.column_stack([st.mean_nr, st.late_nr, st.retain, st.convergence,
                                                               st.ir]), equal_nan=True)


def test_first_k_counts_are_the_first_endings_of_every_position():
    match = np.array([1, 0, 1, 1, 0, 0, 1], dtype=np.int64)
    starts = np.array([0, 4, 7])
    n, m = first_k_counts(match, starts, 3)
    assert n.tolist() == [3, 3] and m.tolist() == [2, 1]
    n, m = first_k_counts(match, starts, 10)  # fewer endings than k: all of them
    assert n.tolist() == [4, 3] and m.tolist() == [3, 1]


# --- done when (issue 37): the recommended k on simulated corpora ---------------

@pytest.mark.parametrize("seed", [1, 2])
def test_recommended_endings_on_simulated_corpora_are_at_most_20_within_the_tolerances(seed):
    """Four groups (the documented shapes) of 32 stories of 150 positions, 100 endings
    a position, stories' levels spread as the paper's are: mean and late NR need at
    most 20 endings, and at that k every group mean and interval is within the stated
    tolerances of the full-100 values."""
    v, _ = simulated_verdicts(32, 150, 100, seed=seed)
    s = CurveSettings()
    r = subsample(v, s, ks=(5, 10, 15, 20, 30, 40, 50, 60, 80))
    k = r.recommendation.k
    assert k is not None and k <= 20, r.recommendation
    _, _, groups = first_k(v, k, s)
    _, _, full = first_k(v, 100, s)
    for stat in ("mean_nr", "late_nr"):
        for g, f in full[stat].items():
            assert abs(groups[stat][g].mean - f.mean) <= SHIFT_TOLERANCE * f.ci95
            assert groups[stat][g].ci95 <= (1 + WIDTH_TOLERANCE) * f.ci95
    assert r.recommendation.endings_at_k == k * len(v.x)
    # the second-order statistics are not within them at that k: noise adds reversals
    ir60 = [row for row in r.rows if row.stat == "ir60" and row.k == k]
    assert not all(row.passes for row in ir60)
    assert stat_columns(s) == r.stat_names


def test_estimate_with_a_pilot_prints_the_recommended_endings_and_their_cost_beside_the_papers(scored, capsys):
    run, _, tmp = scored
    capsys.readouterr()
    assert main(["estimate", str(tmp / "corpus.jsonl"), "--tokenizer", "words", "--no-progress", "--cache",
                 str(tmp / "ecache"), "--gen-tok-s", "1000", "--judge-req-s", "50", "--pilot", str(run)]) == 0
    out = capsys.readouterr().out
    block = out[out.index("endings by the question"):]
    assert "mean_nr, late_nr" in block
    assert "at 100 endings (--endings)" in block and "GPU-hours" in block  # the paper's default beside it


def test_estimate_with_a_pilot_whose_cache_is_gone_says_so(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "run.json").write_text(json.dumps({"command": "score", "config": {"cache": str(tmp_path / "x")}}))
    (tmp_path / "p" / "positions.jsonl").write_text('{"id": "a", "k": 3, "pct": 0.5, "n_endings": 4, "n_match": 2, '
                                                   '"no_rate": 0.5}\n')
    base = ["estimate", str(corpus), "--tokenizer", "words", "--no-progress", "--cache", str(tmp_path / "c")]
    assert main([*base, "--pilot", str(tmp_path / "p")]) == 1  # its verdicts are not there: a missing input
    assert "no cache at" in capsys.readouterr().err
    assert main([*base, "--pilot", str(tmp_path / "p"), "--target-half-width", "0.1", "--seed", "1"]) == 0
    assert "endings by the question: not available (" in capsys.readouterr().out


def test_second_order_statistics_report_their_noise_floor_and_trend():
    """On simulated stories whose true curves have few reversals, noise adds them: the
    IRs' noise floor (curves resampled at n, one more layer of the same noise) lies
    above their value at n; the trend over k is given; mean and late NR get no row."""
    v, _ = simulated_verdicts(16, 150, 100, seed=3, shapes=["steadily falling (0.97 → 0.55)",
                                                             "spiky (0.8 ± 0.12, reversals)"])
    r = subsample(v, CurveSettings(), ks=(5, 10, 20, 50))
    assert {row.stat for row in r.noise} == {"retain", "convergence", "ir30", "ir60", "ir120"}
    for row in r.noise:
        if row.stat == "ir60":
            assert row.floor > row.value and row.smallest_k == 5 and math.isfinite(row.slope), row
    text = format_subsampling(r)
    assert "noise floor" in text and "ir60" in text


def test_the_report_gives_the_corrected_second_order_statistics_beside_the_paper_s():
    """The corrected estimate (docs/metrics.md 1.8: the comparable statistic of 1.9, turns
    beyond the endings' noise) is a column beside the value at n, closer to its own
    noise-free value (the turns of the noise-free curves) than the paper's value at n is
    to the paper's noise-free value, on simulated stories, and in the text and JSON."""
    import numpy as np

    from tension.core.reports.metrics import Curve, compute
    from tension.kernels.turns import turn_stats_of_curves

    falling, spiky = "steadily falling (0.97 → 0.55)", "spiky (0.8 ± 0.12, reversals)"
    v, truth = simulated_verdicts(16, 150, 100, seed=3, shapes=[falling, spiky])
    r = subsample(v, CurveSettings(), ks=(5, 20))
    _, groups = compute([Curve(id=sid, group=g, x=truth[sid][0].tolist(), y=truth[sid][1].tolist())
                             for sid, g in zip(v.ids, v.groups)], CurveSettings())
    names = ["retain", "convergence", "ir30", "ir60", "ir120"]
    for row in r.noise:
        if row.stat.startswith("ir"):
            ids = [sid for sid, g in zip(v.ids, v.groups) if g == row.group]
            turns = np.array([turn_stats_of_curves(truth[sid][0], truth[sid][1], [0, len(truth[sid][0])])[0]
                              for sid in ids])
            free_turns = float(turns[:, names.index(row.stat)].mean())
            free = groups[row.stat][row.group].mean
            assert abs(row.corrected - free_turns) < abs(row.value - free), row
            assert row.corrected_n == 16
    text = format_subsampling(r)
    assert "corrected" in text
    import msgspec

    doc = msgspec.to_builtins(r)
    assert {"corrected", "corrected_n"} <= set(doc["noise"][0])


def test_a_group_whose_stories_agree_exactly_is_not_said_to_have_one_story(tmp_path, capsys):
    """A judge that says N to everything: every no-rate is 1, so each group's mean and late NR
    have an interval of zero width over its two stories. subsample said "no group has two
    stories or more", which was false; it now says why no k passes: a zero-width interval
    leaves the tolerances, relative to it, no room."""
    with InProcessServer(["test-gen", "test-judge"], yes_rate=0.0).serving() as srv:
        run = _score(srv, tmp_path)
    capsys.readouterr()
    assert main(["subsample", str(run), "--cache", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "no group has two stories" not in out, out
    assert ("recommended endings for mean_nr, late_nr: none below 12 (every group's 95 % interval of mean_nr, "
            "late_nr has zero width: its stories agree exactly") in out, out
