"""What `compare` (the CLI, compare.md, the API and the view's compare page) says about
two runs whose setups differ (review of the reports, 2026-12-07). A run scored at another
temperature, with a shorter continuation for the judge or over another window of positions
(`--pct-min`) measures something else: its no-rates, mean and late NR included, are not
those of the same stories under the same measurement. `compare` said so for the endings,
the seed and the models only; every other setting of `score` that changes what a no-rate
is was compared in silence. And the view's compare page showed none of the warnings the
terminal printed."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.core.reports import comparison
from tension.testing.corpus import make_corpus

pytestmark = pytest.mark.in_process


def _score(server, corpus: Path, out: Path, cache: Path, *flags: str) -> None:
    assert main(["score", str(corpus), "--out", str(out), "--base-url", server.base_url, "--model", "test-gen",
                 "--judge-model", "test-judge", "--no-progress", "--cache", str(cache), "--endings", "4",
                 "--seed", "1", *flags]) == 0


# Every setting of `score` that changes the endings, the verdicts or the positions, a value
# other than the default, and how it is printed in the warning.
OTHER = {"temperature": (0.7, "0.7"), "top_p": (0.5, "0.5"), "max_tokens": (40, "40"),
         "extra_body": ({"min_p": 0.1}, '{"min_p": 0.1}'), "reasoning_off": (False, "false"),
         "judge_temperature": (0.5, "0.5"), "judge_max_tokens": (3, "3"),
         "judge_extra_body": ({"x": 1}, '{"x": 1}'), "judge_constraint": ("choice", '"choice"'),
         "continuation_words": (50, "50"), "min_anchor_words": (5, "5"), "pct_min": (0.5, "0.5"),
         "pct_max": (0.9, "0.9"), "tokenizer": ("words", '"words"'), "max_model_len": (4096, "4096")}
DEFAULT = {"temperature": 1.2, "top_p": 0.95, "max_tokens": 150, "extra_body": None, "reasoning_off": True,
           "judge_temperature": 0.0, "judge_max_tokens": 10, "judge_extra_body": None, "judge_constraint": "none",
           "continuation_words": 2000, "min_anchor_words": 10, "pct_min": 0.1, "pct_max": 0.99, "tokenizer": None,
           "max_model_len": None}


def test_every_measurement_setting_is_checked():
    assert set(comparison.MEASUREMENT_SETTINGS) == set(OTHER) == set(DEFAULT)


@pytest.mark.parametrize("key", sorted(OTHER))
def test_a_setting_that_changes_the_measurement_is_warned_about(key):
    value, shown = OTHER[key]
    a = comparison.run_about({"config": {**DEFAULT, "endings": 4, "seed": 1}})
    b = comparison.run_about({"config": {**DEFAULT, key: value, "endings": 4, "seed": 1}})
    said = comparison.setup_warnings(a, b)
    assert len(said) == 1, said
    assert f"{key} (A: " in said[0] and f"B: {shown})" in said[0], said
    assert "mean and late NR" in said[0]
    assert comparison.setup_warnings(a, a) == []
    # a run.json that does not record a setting (an older release) is not called different
    old = comparison.run_about({"config": {k: v for k, v in DEFAULT.items() if k != key} | {"endings": 4, "seed": 1}})
    assert comparison.setup_warnings(old, b) == []


def test_compare_and_the_view_say_when_runs_were_scored_with_other_settings(server, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=4)
    cache = tmp_path / "cache"
    _score(server, corpus, tmp_path / "a", cache)
    _score(server, corpus, tmp_path / "b", cache, "--temperature", "0.7", "--pct-min", "0.3")
    _score(server, corpus, tmp_path / "a2", cache, "--window", "3")  # a curve setting: compare recomputes it
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]) == 0
    out, err = capsys.readouterr()
    md = (tmp_path / "cmp" / "compare.md").read_text()
    for text in (err, md):
        assert "A and B were scored with different settings (temperature (A: 1.2, B: 0.7); " \
               "pct_min (A: 0.1, B: 0.3))" in text, text
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a2"), "--out", str(tmp_path / "cmp2")]) == 0
    err = capsys.readouterr().err
    assert "different" not in err
    # but compare computes B with A's curve settings: B's numbers are not its stories.csv's, and it says so
    said = "B's statistics here are computed with the curve settings used for both runs: window 5 (scored with 3)"
    assert f"note: {said}" in err and said in (tmp_path / "cmp2" / "compare.md").read_text(), err
    assert "A's statistics" not in err
    # the view's compare page (served or exported) carries the same warnings
    assert main(["view", str(tmp_path / "a"), str(tmp_path / "b"), "--export", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "compare" / "r0-r1.html").read_text()
    assert "scored with different settings (temperature (A: 1.2, B: 0.7)" in page
    # every warning of the terminal: other endings and seed, and the note on second-order statistics
    assert main(["score", str(corpus), "--out", str(tmp_path / "c"), "--base-url", server.base_url, "--model",
                 "test-gen", "--judge-model", "test-judge", "--no-progress", "--cache", str(cache), "--endings", "8",
                 "--seed", "2"]) == 0
    assert main(["view", str(tmp_path / "a"), str(tmp_path / "c"), "--export", str(tmp_path / "site2")]) == 0
    page = (tmp_path / "site2" / "compare" / "r0-r1.html").read_text()
    for said in ("different numbers of endings (A: 4, B: 8)", "different seeds (A: 1, B: 2)",
                 "† a second-order statistic compared across different numbers of endings"):
        assert said in page, said
    # and the API's result
    import tension

    r = tension.compare(tmp_path / "a", tmp_path / "b")
    assert any("temperature (A: 1.2, B: 0.7)" in w for w in r.comparison.warnings)


def test_the_per_pair_table_has_a_cell_under_every_column(server, tmp_path, capsys):
    """compare.md's per-pair table named the comparable statistics as columns, but its rows
    held the paper's statistics only: every row was short of five cells, and a Markdown
    reader shifted nothing into them, the table read as if those columns were empty."""
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=4)
    _score(server, corpus, tmp_path / "a", tmp_path / "cache")
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(tmp_path / "cmp")]) == 0
    md = (tmp_path / "cmp" / "compare.md").read_text()
    tables = [block for block in md.split("\n\n") if block.startswith("| ")]
    assert len(tables) == 2, md
    for table in tables:
        widths = {line.count(" | ") for line in table.splitlines() if line.startswith("| ")}
        assert len(widths) == 1, table
    header = tables[1].splitlines()[0]
    with open(tmp_path / "cmp" / "compare_stories.csv") as f:
        stats = {row["statistic"] for row in csv.DictReader(f)}
    assert {c.strip() for c in header.strip("|").split("|")[1:]} == stats


def test_compare_carries_the_degenerate_answer_warnings_of_either_run(server, tmp_path, capsys):
    """A run whose judge said N to every ending was flagged when scored (run.json
    `warnings`: "the numbers show the judge's bias, … their differences carry no
    information"), and compare called its difference from a sound run a finding (✓)
    without a word of it. Each run's warnings now head the comparison, everywhere it is shown."""
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=4)
    _score(server, corpus, tmp_path / "a", tmp_path / "cache")
    server.yes_rate = 0.0  # the judge says N to everything: every no-rate is 1
    _score(server, corpus, tmp_path / "b", tmp_path / "cache-b")  # its own cache: answers asked anew
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]) == 0
    err = capsys.readouterr().err
    said = f"run B ({tmp_path / 'b'}) was flagged when scored: the judge answered N to "
    assert said in err and "their differences carry no information [judge_one_letter]" in err, err
    assert said in (tmp_path / "cmp" / "compare.md").read_text()
    assert "run A (" not in err
    assert main(["view", str(tmp_path / "a"), str(tmp_path / "b"), "--export", str(tmp_path / "site")]) == 0
    assert "was flagged when scored: the judge answered N to" in (tmp_path / "site" / "compare" / "r0-r1.html").read_text()


def test_a_run_without_its_record_is_said_unknown_not_different(server, tmp_path, capsys):
    """A run folder without run.json (moved away, as the message of a damaged one advises)
    has no known setup. compare said A and B "used different numbers of endings (A: 4, B:
    None)", "different seeds", "different generation models (A: test-gen, B: None)", and
    marked the second-order rows † for endings it did not know: claims of a difference where
    there is only an unknown. It now says the setup is unknown, once."""
    import shutil

    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=4)
    _score(server, corpus, tmp_path / "a", tmp_path / "cache")
    shutil.copytree(tmp_path / "a", tmp_path / "bare")
    (tmp_path / "bare" / "run.json").unlink()
    for a, b, label in (("a", "bare", "B"), ("bare", "a", "A")):
        capsys.readouterr()
        assert main(["compare", str(tmp_path / a), str(tmp_path / b), "--out", str(tmp_path / f"cmp-{a}")]) == 0
        out, err = capsys.readouterr()
        md = (tmp_path / f"cmp-{a}" / "compare.md").read_text()
        assert "different" not in err and "None" not in err and "None" not in md, err
        said = (f"run {label} ({tmp_path / 'bare'}) has no run.json: its endings, seed, models and settings are "
                "unknown, so compare cannot say whether they are A's and B's alike")
        assert said in err and said in md, err
        assert "†" not in md
        assert "(setup unknown: no run.json)" in md


def test_stories_paired_by_id_whose_texts_differ_are_named(server, tmp_path, capsys):
    """Paired by id (the default), a story of B whose text is not A's (another corpus that
    reuses the ids, an edited story) is another story: its B − A compares two stories, not
    two measurements of one. compare paired them in silence; it now names them from the
    runs' meta.jsonl (their word counts differ). Paired by a corpus field (`--pair-by
    idea_id`: two pipelines' stories of one idea) the texts are meant to differ: nothing said."""
    import json

    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=4)
    lines = [json.loads(line) for line in corpus.read_text().splitlines()]
    lines[1]["text"] += " And then, at the very end of it all, the old house fell quiet for good."
    for line in lines:
        line["idea"] = line["id"]
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(line) + "\n" for line in lines))
    _score(server, corpus, tmp_path / "a", tmp_path / "cache")
    _score(server, edited, tmp_path / "b", tmp_path / "cache")
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]) == 0
    err = capsys.readouterr().err
    said = (f"1 pair by id holds stories of different lengths in A and B ({lines[1]['id']}: ")
    assert said in err and said in (tmp_path / "cmp" / "compare.md").read_text(), err
    assert lines[0]["id"] + ":" not in err
