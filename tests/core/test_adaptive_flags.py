"""Adaptive endings' flags given together (issue 36 D1, D3–D5; docs/reliability.md
"Inputs and settings"): --endings with a target is refused; a round or maximum
without a target is ignored and said; the default round is at most the maximum
given; a target no position can meet before the maximum is said."""

from __future__ import annotations

import json

import pytest

from tension.core.cli import main
from tension.core.config import load_config
from tension.core.errors import ConfigError
from tension.testing.corpus import make_corpus

BASE = {"base_url": "http://127.0.0.1:1", "seed": 1}


def _score(server, tmp_path, *flags: str) -> list[str]:
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=2)
    return ["score", str(corpus), "--out", str(tmp_path / "o"), "--base-url", server.base_url, "--model", "test-gen",
            "--seed", "1", "--no-progress", "--no-report", "--cache", str(tmp_path / "cache"), *flags]


@pytest.mark.parametrize("where", ["flags", "config file", "file and flag"])
def test_endings_with_a_target_is_refused_wherever_each_is_given(where, tmp_path):
    path = None
    values = {"target_half_width": 0.2, "endings": 4}
    if where != "flags":
        path = tmp_path / "t.toml"
        in_file = values if where == "config file" else {"endings": 4}
        path.write_text("".join(f"{k} = {v}\n" for k, v in in_file.items()))
        values = {} if where == "config file" else {"target_half_width": 0.2}
    with pytest.raises(ConfigError, match=r"^endings: not with --target-half-width"):
        load_config(path, {**BASE, **values})


@pytest.mark.in_process
def test_score_with_endings_and_a_target_exits_2_before_any_request(server, tmp_path, capsys):
    rc = main(_score(server, tmp_path, "--target-half-width", "0.2", "--endings", "4"))
    err = capsys.readouterr().err
    assert rc == 2
    assert "error: endings: not with --target-half-width, which draws each position's endings in rounds" in err
    assert server.requests == []


@pytest.mark.in_process
def test_the_api_refuses_endings_with_a_target(server, tmp_path):
    import tension

    with pytest.raises(ConfigError, match=r"^endings: not with --target-half-width"):
        tension.score(make_corpus(tmp_path / "c.jsonl", 1), out=tmp_path / "o", base_url=server.base_url,
                      model="test-gen", seed=1, progress=False, cache=str(tmp_path / "cache"),
                      target_half_width=0.2, endings=4)


@pytest.mark.parametrize(("flags", "said"), [
    ({"round_endings": 8}, "--round-endings is ignored"),
    ({"max_endings": 50}, "--max-endings is ignored"),
    ({"round_endings": 3, "max_endings": 50}, "--round-endings and --max-endings are ignored"),
])
def test_round_or_maximum_without_a_target_is_said_to_be_ignored(flags, said, capsys):
    cfg = load_config(None, {**BASE, "endings": 8, **flags})
    assert not cfg.adaptive and cfg.endings_per_request() == 8
    err = capsys.readouterr().err
    assert err == (f"warning: {said} without --target-half-width (adaptive endings); each position gets "
                   "--endings (8) endings\n")


@pytest.mark.in_process
def test_score_says_the_ignored_flags_and_sends_the_fixed_requests(server, tmp_path, capsys):
    rc = main(_score(server, tmp_path, "--endings", "3", "--max-endings", "50"))
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "warning: --max-endings is ignored without --target-half-width" in err
    assert {r.body["n"] for r in server.requests if r.kind == "generation"} == {3}


def test_a_recalled_run_record_says_nothing(tmp_path, capsys):
    # a run record holds every setting: recalling one (the view, cache drop --run) is no user's flags
    from tension.core.pipelines.score.recall import _config

    saved = json.loads(json.dumps(load_config(None, {**BASE, "target_half_width": 0.2}).public()))
    capsys.readouterr()
    assert _config(saved).target_half_width == 0.2
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("m", "round_"), [(1, 1), (5, 5), (19, 19), (20, 20), (30, 20)])
def test_the_default_round_is_at_most_the_maximum_given(m, round_):
    cfg = load_config(None, {**BASE, "target_half_width": 0.45, "max_endings": m})
    assert (cfg.round_endings, cfg.max_endings) == (round_, m)


def test_a_round_given_above_the_maximum_is_still_refused():
    with pytest.raises(ConfigError, match=r"round-endings: expected at most --max-endings \(5\), got 8"):
        load_config(None, {**BASE, "target_half_width": 0.2, "max_endings": 5, "round_endings": 8})


@pytest.mark.parametrize(("w", "r", "m", "need"), [(0.2, 1, 1, 6), (0.2, 20, 20, 6), (0.01, 12, 12, 189),
                                                   (0.05, 20, 30, 35)])
def test_a_target_no_position_can_meet_before_the_maximum_is_said(w, r, m, need, capsys):
    load_config(None, {**BASE, "target_half_width": w, "round_endings": r, "max_endings": m})
    err = capsys.readouterr().err
    assert err.startswith(f"warning: --target-half-width {w:g} cannot be met before --max-endings ({m}): a 95% "
                          f"interval is that narrow only from {need} endings on")
    assert f"every position gets {m} endings, as --endings {m} gives" in err


@pytest.mark.parametrize(("w", "r", "m"), [(0.2, 1, 10), (0.2, 6, 7), (0.05, 20, 100), (0.45, 20, 100)])
def test_a_target_some_position_can_meet_says_nothing(w, r, m, capsys):
    load_config(None, {**BASE, "target_half_width": w, "round_endings": r, "max_endings": m})
    assert capsys.readouterr().err == ""
