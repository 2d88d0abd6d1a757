"""Adaptive endings (docs/metrics.md 1.7) on the user's path: the real CLI and
`tension.score` against the loopback server, its requests counted.

The loopback server seeds choice i of a request with seed + i (as vLLM and llama.cpp
do), so an adaptive run's endings are the first k of a fixed run of --max-endings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tension
from tension.core.cli import main
from tension.core.config import load_config
from tension.core.errors import ConfigError
from tension.core.pipelines.score.requests import position_seed
from tension.kernels.stopping import Z95
from tension.testing.corpus import make_corpus
from tension.testing.interrupt import cancel_midway

SEED = 5


def _score(server, corpus: Path, out: Path, cache: Path, *flags: str, report: bool = False) -> int:
    """A score run; its report is drawn only where a test reads it (`report`)."""
    return main(["score", str(corpus), "--out", str(out), "--base-url", server.base_url, "--model", "test-gen",
                 "--seed", str(SEED), "--no-progress", "--cache", str(cache), *(() if report else ("--no-report",)),
                 *flags])


def _positions(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "positions.jsonl").read_text().splitlines()]


def _texts(out: Path) -> dict[tuple[str, int], list[str]]:
    return {(d["id"], d["k"]): d["endings"] for d in map(json.loads, (out / "texts.jsonl").read_text().splitlines())}


def _gen_bodies(server) -> list[dict]:
    return [r.body for r in server.requests if r.kind == "generation"]


def _offset(body: dict) -> int:
    """A generation request's seed less its position's (docs/metrics.md 1.2-1.3): r·R for round r."""
    prefix = body["messages"][-1]["content"].split("STORY SO FAR:\n", 1)[1]
    return body["seed"] - position_seed(SEED, prefix)


def _wilson_half_width(n: int, no: int) -> float:
    # written from Wilson (1927): the interval's ends, then half their distance
    p, z = no / n, Z95
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    lo = centre - z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return centre - lo


def _rule_holds(pos: dict, target: float, r: int, m: int) -> None:
    """The plain rule: stops at the first round end where the half-width ≤ target, else at m.
    Checked at the position's stop; the earlier rounds are checked by the kernel tests."""
    n = pos["n_endings"]
    assert n % r == 0 or n == m
    no = n - pos["n_match"]
    assert n == m or _wilson_half_width(n, no) <= target + 1e-12


@pytest.mark.in_process
def test_adaptive_run_is_reproducible_and_saves_endings_where_the_judge_is_sure(server, tmp_path):
    server.yes_rate = 0.98  # no-rates near 0: most positions are known after a round or two
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=11)
    flags = ("--target-half-width", "0.1", "--save-texts")
    assert _score(server, corpus, tmp_path / "a", tmp_path / "ca", *flags, report=True) == 0  # its report.md is read
    assert _score(server, corpus, tmp_path / "b", tmp_path / "cb", *flags) == 0
    for name in ("positions.jsonl", "stories.csv", "texts.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    ps = _positions(tmp_path / "a")
    for p in ps:
        _rule_holds(p, 0.1, 20, 100)
    run = json.loads((tmp_path / "a" / "run.json").read_text())["adaptive"]
    assert run["endings_used"] == sum(p["n_endings"] for p in ps) < run["endings_fixed"] == 100 * len(ps)
    assert sum(run["rounds"].values()) == len(ps) and min(p["n_endings"] for p in ps) == 20
    assert "Adaptive endings" in (tmp_path / "a" / "report.md").read_text()

    # paired: each position's endings are the first k of the fixed-100 run's
    assert _score(server, corpus, tmp_path / "f", tmp_path / "cf", "--endings", "100", "--save-texts") == 0
    fixed, adaptive = _texts(tmp_path / "f"), _texts(tmp_path / "a")
    assert adaptive.keys() == fixed.keys()
    for key, endings in adaptive.items():
        assert endings == fixed[key][: len(endings)]
    # run.json's ideal prompt tokens count each position's own endings, not --endings'
    ideal = [json.loads((tmp_path / d / "run.json").read_text())["prompt_tokens"]["ideal"] for d in ("a", "f")]
    assert ideal[0]["generation"] == ideal[1]["generation"] and ideal[0]["judge"] < 0.5 * ideal[1]["judge"]


@pytest.mark.in_process
def test_no_rate_near_one_half_goes_to_the_maximum(server, tmp_path):
    server.yes_rate = 0.5
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    res = tension.score(corpus, out=tmp_path / "o", base_url=server.base_url, model="test-gen", seed=SEED,
                        progress=False, cache=str(tmp_path / "cache"), target_half_width=0.05, round_endings=30,
                        max_endings=100)
    ps = _positions(tmp_path / "o")
    assert {p["n_endings"] for p in ps} == {100}  # rounds of 30, 30, 30, then the last 10
    assert res.run["adaptive"]["rounds"] == {"4": len(ps)}
    bodies = _gen_bodies(server)
    assert len({b["seed"] for b in bodies}) == len(bodies) == 4 * len(ps)  # each position its own seeds
    assert sorted({(b["n"], _offset(b)) for b in bodies}) == [(10, 90), (30, 0), (30, 30), (30, 60)]


@pytest.mark.in_process
def test_a_tighter_target_asks_only_for_the_missing_rounds(server, tmp_path):
    server.yes_rate = 0.9
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=8)
    cache = tmp_path / "cache"
    assert _score(server, corpus, tmp_path / "loose", cache, "--target-half-width", "0.12", "--save-texts") == 0
    loose = {(p["id"], p["k"]): p["n_endings"] for p in _positions(tmp_path / "loose")}
    server.reset_records()
    assert _score(server, corpus, tmp_path / "tight", cache, "--target-half-width", "0.05", "--save-texts") == 0
    tight = {(p["id"], p["k"]): p["n_endings"] for p in _positions(tmp_path / "tight")}
    assert all(tight[key] >= n for key, n in loose.items()) and sum(tight.values()) > sum(loose.values())
    # exactly the rounds the first run did not draw: round r of a position is its seed + 20 r
    sent = _gen_bodies(server)
    assert len(sent) == sum((tight[key] - n) // 20 for key, n in loose.items())
    assert all(b["n"] == 20 and _offset(b) >= 20 and _offset(b) % 20 == 0 for b in sent)
    a, b = _texts(tmp_path / "loose"), _texts(tmp_path / "tight")
    for key, endings in a.items():
        assert b[key][: len(endings)] == endings


@pytest.mark.in_process
def test_fixed_runs_send_todays_requests(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=2)
    assert _score(server, corpus, tmp_path / "a", tmp_path / "ca", "--endings", "8") == 0
    plain = _gen_bodies(server)
    server.reset_records()
    # the adaptive flags without a target change nothing
    assert _score(server, corpus, tmp_path / "b", tmp_path / "cb", "--endings", "8", "--round-endings", "3",
                  "--max-endings", "50") == 0
    assert _gen_bodies(server) == plain and all(b["n"] == 8 and _offset(b) == 0 for b in plain)
    assert (tmp_path / "a" / "positions.jsonl").read_bytes() == (tmp_path / "b" / "positions.jsonl").read_bytes()
    assert "adaptive" not in json.loads((tmp_path / "a" / "run.json").read_text())


@pytest.mark.in_process
def test_one_round_of_the_maximum_is_the_fixed_request(server, tmp_path):
    """R = M: one round, the very request (and cache key) of a fixed run of M endings."""
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=2)
    cache = tmp_path / "cache"
    assert _score(server, corpus, tmp_path / "f", cache, "--endings", "12") == 0
    server.reset_records()
    assert _score(server, corpus, tmp_path / "a", cache, "--target-half-width", "0.01", "--round-endings", "12",
                  "--max-endings", "12") == 0
    assert server.count(kind="generation") == 0 and server.count(kind="judge") == 0
    f, a = _positions(tmp_path / "f"), _positions(tmp_path / "a")
    assert [(p["k"], p["n_match"], p["n_endings"]) for p in a] == [(p["k"], p["n_match"], p["n_endings"]) for p in f]


@pytest.mark.in_process
def test_a_target_one_round_meets_stops_every_position_there(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=2)
    assert _score(server, corpus, tmp_path / "o", tmp_path / "cache", "--target-half-width", "0.49",
                  "--round-endings", "7") == 0
    assert {p["n_endings"] for p in _positions(tmp_path / "o")} == {7}
    assert {b["n"] for b in _gen_bodies(server)} == {7}


@pytest.mark.in_process
def test_malformed_verdicts_count_as_no(server, tmp_path):
    """A round judged all malformed: every ending a no (no-rate 1), as docs/metrics.md 1.3
    counts them; its Wilson half-width at 20 of 20 is 0.081, within 0.1: one round."""
    server.malformed_rate = 1.0
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=2)
    assert _score(server, corpus, tmp_path / "o", tmp_path / "cache", "--target-half-width", "0.1",
                  "--keep-going") == 0
    ps = _positions(tmp_path / "o")
    assert ps and all(p["n_endings"] == 20 and p["n_malformed"] == 20 and p["no_rate"] == 1.0 for p in ps)


@pytest.mark.in_process
def test_empty_endings_count_as_no(server, tmp_path):
    server.empty_rate = 0.5
    server.yes_rate = 1.0
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=2)
    assert _score(server, corpus, tmp_path / "o", tmp_path / "cache", "--target-half-width", "0.15") == 0
    for p in _positions(tmp_path / "o"):
        assert p["n_empty"] > 0 and p["n_endings"] - p["n_match"] == p["n_empty"]
        _rule_holds(p, 0.15, 20, 100)


def test_an_interrupted_adaptive_run_resumes_to_the_same_outputs(inprocess_server, tmp_path):
    server = inprocess_server  # the answers, not the wire: the in-process door
    server.yes_rate = 0.85
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=4)
    kw = {"base_url": server.base_url, "model": "test-gen", "seed": SEED, "progress": False,
          "target_half_width": 0.08, "gen_concurrency": 2, "judge_concurrency": 4}
    clean = tension.score(corpus, out=tmp_path / "clean", **kw, cache=str(tmp_path / "clean-cache")).summary
    total = clean.requests["judge"]
    cfg = {**kw, "cache": str(tmp_path / "cache")}
    server.delay = 0.002
    server.reset_records()

    cancel_midway(lambda: tension.score_async(corpus, out=tmp_path / "out", **cfg),
                  lambda: server.count(kind="judge") >= total // 3)
    assert not (tmp_path / "out" / "positions.jsonl").exists()
    server.delay = 0.0
    resumed = tension.score(corpus, out=tmp_path / "out", **cfg).summary
    assert resumed.status == "complete" and resumed.requests["judge"] < total
    assert resumed.requests["generation"] < clean.requests["generation"]  # the rounds cached before the stop
    for name in ("positions.jsonl", "stories.csv"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes()


@pytest.mark.parametrize("settings, field", [
    ({"target_half_width": 0.1, "round_endings": 30, "max_endings": 20}, "round-endings"),
    ({"target_half_width": 0.1}, "seed"),  # unseeded, every round would be the same request
    ({"target_half_width": 0.5, "seed": 1}, "target-half-width"),
    ({"target_half_width": 0.0, "seed": 1}, "target-half-width"),
])
def test_bad_adaptive_settings_are_config_errors(settings, field):
    with pytest.raises(ConfigError, match=field):
        load_config(None, {"base_url": "http://127.0.0.1:1", **settings})


def test_bad_adaptive_flags_exit_2(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    rc = main(["score", str(corpus), "--out", str(tmp_path / "o"), "--base-url", "http://127.0.0.1:1",
               "--target-half-width", "0.1", "--round-endings", "50", "--max-endings", "40", "--seed", "1"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "round-endings" in err and "Traceback" not in err


@pytest.mark.in_process
def test_config_file_keys(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=2)
    conf = tmp_path / "c.toml"
    conf.write_text("target_half_width = 0.49\nround_endings = 5\nmax_endings = 10\nseed = 3\n")
    rc = main(["score", str(corpus), "--out", str(tmp_path / "o"), "--base-url", server.base_url, "--model",
               "test-gen", "--no-progress", "--cache", str(tmp_path / "cache"), "--config", str(conf)])
    assert rc == 0 and {p["n_endings"] for p in _positions(tmp_path / "o")} == {5}


@pytest.mark.in_process
def test_the_view_and_cache_drop_find_an_adaptive_runs_rounds(server, tmp_path):
    """positions.jsonl names no one key for a position of several rounds: the view's
    recall and `cache drop --run` walk the rounds under the run's settings instead."""
    from tension.cache.store import Store
    from tension.core.inputs.corpus import read_corpus
    from tension.core.inputs.segment import split_sentences
    from tension.core.pipelines.score.recall import ScoreRecall, run_keys

    server.yes_rate = 0.9
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=8)
    out = tmp_path / "o"
    assert _score(server, corpus, out, tmp_path / "cache", "--target-half-width", "0.1", "--save-texts") == 0
    record = json.loads((out / "run.json").read_text())
    texts = _texts(out)
    story = read_corpus(corpus, 0, 10**9).stories[0]
    sentences = split_sentences(story.text)
    with Store(tmp_path / "cache") as store:
        recall = ScoreRecall(record, store)
        lines = _positions(out)
        assert len({p["n_endings"] for p in lines}) > 1  # positions of different rounds
        for p in lines:
            got = recall.position(sentences, p["k"], p.get("endings_key"), p.get("judged_key"))
            assert got.endings == texts[(p["id"], p["k"])] and got.missing == 0
            assert sum(v == "match" for v in got.verdicts) == p["n_match"]
        keys = run_keys(out, store).keys
    assert len(keys["endings"]) == sum(p["n_endings"] // 20 for p in lines) == record["requests"]["generation"]


@pytest.mark.in_process
def test_the_docs_estimate_commands_run(server, tmp_path, capsys):
    """docs/cost.md's `estimate --target-half-width` commands, the pilot an adaptive run."""
    import shlex

    doc = (Path(__file__).resolve().parents[2] / "docs" / "cost.md").read_text()
    section = doc[doc.index("## Adaptive endings (issue 27)"):]
    start = section.index("```sh") + 5
    commands = [shlex.split(line) for line in section[start:section.index("```", start)].strip().splitlines()]
    assert len(commands) == 2
    corpus = make_corpus(tmp_path / "stories.jsonl", 1, seed=2)
    server.yes_rate = 0.97
    assert _score(server, corpus, tmp_path / "pilot", tmp_path / "cache", "--target-half-width", "0.1") == 0
    capsys.readouterr()
    printed = []
    for argv in commands:
        assert argv[:2] == ["tension-run", "estimate"]
        argv = [str(tmp_path / a) if a in ("stories.jsonl", "pilot") else a for a in argv[1:]]
        assert main(argv + ["--no-progress", "--cache", str(tmp_path / "ecache"),
                            "--base-url", "http://127.0.0.1:9"]) == 0
        printed.append(capsys.readouterr().out)
    assert "first round:" in printed[0] and "maximum:" in printed[0] and "GPU-hours" in printed[0]
    expected = next(x for x in printed[1].splitlines() if "expected (pilot" in x)
    n_pos = len(_positions(tmp_path / "pilot"))
    run = json.loads((tmp_path / "pilot" / "run.json").read_text())["adaptive"]
    # the pilot's own corpus: the expected endings are near what the pilot used
    got = float(expected.split("): ")[1].split(" endings")[0].replace(",", ""))
    assert 20 * n_pos <= got <= 100 * n_pos
    assert abs(got - run["endings_used"]) <= 0.35 * run["endings_used"]


def test_estimate_pilot_errors(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    base = ["estimate", str(corpus), "--tokenizer", "words", "--no-progress", "--cache", str(tmp_path / "c"),
            "--base-url", "http://127.0.0.1:9"]
    assert main([*base, "--pilot", str(tmp_path)]) == 1  # not a run: a missing input
    assert "needs --target-half-width" in capsys.readouterr().err
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "positions.jsonl").write_text('{"id": "a", "k": 3, "pct": 0.5, "no_rate": 0.5}\n{"id": 1}\n')
    assert main([*base, "--target-half-width", "0.1", "--seed", "1", "--pilot", str(tmp_path / "p")]) == 1  # malformed
    err = capsys.readouterr().err
    assert "positions.jsonl:1 field `n_endings`" in err and "Traceback" not in err
