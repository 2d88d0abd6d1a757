"""The review's precision findings on the user's paths (reviews/newuser-2026-12-02.md):
I1 (too few interval resamples for a 95 % interval), I6 (intervals empty for want of
counts, said), D8 (a pilot of few endings taken at face value), D10 (an adaptive
run's cached rounds counted by estimate), D11 (compare of runs of different endings,
seeds or models says so, and names runs A and B)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tension
from tension.core.cli import main
from tension.testing.corpus import make_corpus

SEED = 3


def _score(server, corpus: Path, out: Path, cache: Path, *flags: str) -> int:
    return main(["score", str(corpus), "--out", str(out), "--base-url", server.base_url, "--model", "test-gen",
                 "--no-progress", "--cache", str(cache), *flags])


# --- I1 ---------------------------------------------------------------------------

@pytest.mark.parametrize("verb", ["metrics", "report", "compare", "score"])
def test_every_verb_refuses_too_few_interval_resamples_for_a_95_percent_interval(verb, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    argv = {"metrics": ["metrics", str(tmp_path), "--out", str(tmp_path / "m")],
            "report": ["report", str(tmp_path)],
            "compare": ["compare", str(tmp_path), str(tmp_path)],
            "score": ["score", str(corpus), "--out", str(tmp_path / "s"), "--base-url", "http://127.0.0.1:9",
                      "--no-progress"]}[verb]
    assert main([*argv, "--interval-resamples", "50"]) == 2
    err = capsys.readouterr().err
    assert "interval-resamples" in err and "100" in err and "Traceback" not in err


def test_the_python_api_refuses_too_few_interval_resamples(tmp_path):
    curves = tmp_path / "c.jsonl"
    curves.write_text('{"id": "a", "x": [0.1, 0.5, 0.9], "y": [0.5, 0.5, 0.5]}\n')
    with pytest.raises(tension.ConfigError, match="interval.resamples"):
        tension.metrics(curves, out=tmp_path / "m", interval_resamples=1)
    assert tension.metrics(curves, out=tmp_path / "m", interval_resamples=100).exit_status == 0


# --- I6 ---------------------------------------------------------------------------

@pytest.mark.parametrize("source", ["run folder", "curves file"])
def test_metrics_says_why_the_intervals_are_empty_when_the_counts_are_missing(source, tmp_path, capsys):
    if source == "run folder":
        path = tmp_path / "run"
        path.mkdir()
        (path / "positions.jsonl").write_text("".join(
            json.dumps({"id": "a", "k": k, "pct": k / 10, "no_rate": 0.5}) + "\n" for k in range(1, 6)))
    else:
        path = tmp_path / "c.jsonl"
        path.write_text('{"id": "a", "x": [0.1, 0.5, 0.9], "y": [0.5, 0.4, 0.5]}\n')
    assert main(["metrics", str(path), "--out", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "intervals: none for 1 of 1 stories" in out and "n_endings" in out


def test_metrics_with_counts_says_nothing_about_missing_intervals(tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "x": [0.1, 0.5, 0.9], "y": [0.5, 0.5, 0.5], "n_endings": [4, 4, 4], '
                    '"n_match": [2, 2, 2]}\n')
    assert main(["metrics", str(path), "--out", str(tmp_path / "m")]) == 0
    assert "intervals: none" not in capsys.readouterr().out


# --- D8 ---------------------------------------------------------------------------

@pytest.mark.parametrize("endings, warned", [(4, True), (20, False)])
@pytest.mark.in_process
def test_estimate_warns_of_a_pilot_whose_no_rates_rest_on_few_endings(server, tmp_path, capsys, endings, warned):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=2)
    assert _score(server, corpus, tmp_path / "pilot", tmp_path / "cache", "--judge-model", "test-judge",
                  "--endings", str(endings), "--seed", str(SEED)) == 0
    capsys.readouterr()
    assert main(["estimate", str(corpus), "--tokenizer", "words", "--no-progress", "--cache", str(tmp_path / "e"),
                 "--target-half-width", "0.1", "--seed", "1", "--pilot", str(tmp_path / "pilot")]) == 0
    out = capsys.readouterr().out
    assert (f"rest on {endings} endings a position" in out) is warned, out


# --- D10 --------------------------------------------------------------------------

@pytest.mark.in_process
def test_estimate_of_an_adaptive_run_whose_rounds_are_cached_counts_them(server, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=2)
    server.yes_rate = 0.97
    flags = ["--target-half-width", "0.2", "--seed", "1"]
    assert _score(server, corpus, tmp_path / "ad", tmp_path / "cache", "--judge-model", "test-gen", *flags) == 0
    run = json.loads((tmp_path / "ad" / "run.json").read_text())["adaptive"]
    capsys.readouterr()
    assert main(["estimate", str(corpus), "--tokenizer", "words", "--no-progress", "--cache", str(tmp_path / "cache"),
                 "--model", "test-gen", "--judge-model", "test-gen", *flags]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "cached rounds" in x)
    assert f"{run['endings_used']:,} endings" in line and "to send: 0" in line, out


# --- D11 --------------------------------------------------------------------------

@pytest.mark.in_process
def test_compare_of_runs_of_different_endings_seeds_or_models_says_so_and_names_a_and_b(server, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=2)
    assert _score(server, corpus, tmp_path / "a", tmp_path / "cache", "--judge-model", "test-judge",
                  "--endings", "4", "--seed", "1") == 0
    assert _score(server, corpus, tmp_path / "b", tmp_path / "cache", "--judge-model", "test-gen",
                  "--endings", "8", "--seed", "2") == 0
    assert _score(server, corpus, tmp_path / "a2", tmp_path / "cache", "--judge-model", "test-judge",
                  "--endings", "4", "--seed", "1", "--window", "3") == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]) == 0
    out, err = capsys.readouterr()
    md = (tmp_path / "cmp" / "compare.md").read_text()
    for text in (md, err):
        assert "different numbers of endings (A: 4, B: 8)" in text
        assert "different seeds (A: 1, B: 2)" in text
        assert "different judge models (A: test-judge, B: test-gen)" in text
    assert f"Run A: {tmp_path / 'a'}" in md and f"Run B: {tmp_path / 'b'}" in md
    assert "4 endings a position" in md and "8 endings a position" in md
    # two runs of the same endings, seed and models: no warning
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a2")]) == 0
    assert "different" not in capsys.readouterr().err
