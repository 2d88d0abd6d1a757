"""Each position's own seed (issue 57; docs/metrics.md 1.2-1.3): the requests
`ScoreRequests` builds, and `score`, `estimate` and the recall of a run against
the loopback server, whose choice i of a seeded request is drawn with seed + i."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

import tension
from tension.cache.store import Store
from tension.core.cli import build_parser
from tension.core.config import ScoreConfig, load_config
from tension.core.config.score import MOST_ENDINGS
from tension.core.errors import ConfigError
from tension.core.inputs.segment import prefix_text, split_sentences
from tension.core.llm.choices import chunk
from tension.core.pipelines.recalls import score_recall
from tension.core.pipelines.score.requests import SEED_SPAN, ScoreRequests, position_seed
from tension.kernels.settings import bounds_of
from tension.testing.corpus import make_corpus

SEED = 3
INT32_MAX = 2**31 - 1


def _requests(**settings) -> ScoreRequests:
    return ScoreRequests(load_config(None, {"seed": SEED, **settings}), "test-gen", "test-judge")


def _sentences(tmp_path: Path) -> list[str]:
    corpus = make_corpus(tmp_path / "one.jsonl", 1, seed=4)
    return split_sentences(json.loads(corpus.read_text().splitlines()[0])["text"])


def _run(server, tmp_path: Path, corpus: Path, out: str, cache: str = "cache", **settings):
    return tension.score(corpus, out=tmp_path / out, base_url=server.base_url, model="test-gen", endings=4,
                         progress=False, cache=str(tmp_path / cache), report=False, **{"seed": SEED, **settings})


def _gen_bodies(server) -> list[dict]:
    return [r.body for r in server.requests if r.kind == "generation"]


def _prefix(body: dict) -> str:
    return body["messages"][-1]["content"].split("STORY SO FAR:\n", 1)[1]


# --- the seeds ------------------------------------------------------------------

def test_two_positions_of_a_story_get_different_seeds_and_streams(tmp_path):
    reqs = _requests(endings=100)
    sentences = _sentences(tmp_path)
    seeds = sorted(reqs.endings(sentences, k).seed for k in range(1, len(sentences)))
    assert len(seeds) == len(sentences) - 1 > 20
    # no two positions' choices seed … seed + 99 overlap: every ending its own stream
    assert all(b - a >= 100 for a, b in zip(seeds, seeds[1:]))
    # another run seed gives other seeds at the same positions
    other = _requests(endings=100, seed=SEED + 1)
    assert all(other.endings(sentences, k).seed != reqs.endings(sentences, k).seed for k in range(1, 10))


def test_the_seed_is_the_documented_function_of_the_run_seed_and_the_prefix(tmp_path):
    sentences = _sentences(tmp_path)
    for k in (1, 5, 9):
        prefix = prefix_text(sentences, k)
        assert _requests().endings(sentences, k).seed == position_seed(SEED, prefix)
    # pinned: a change of the formula would leave every seeded cache behind, silently
    assert position_seed(1, "Once upon a time.") == 918268855
    assert position_seed(0, "") == 1424041326


def test_the_same_position_gets_the_same_seed_in_another_process():
    prefixes = ["Once upon a time.", "Zoë’s ferry left at dawn.\nShe stayed.", "x" * 5000]
    code = ("import json, sys; from tension.core.pipelines.score.requests import position_seed; "
            "print(json.dumps([position_seed(s, p) for s, p in json.loads(sys.stdin.read())]))")
    pairs = [(s, p) for s in (0, 1, 2**40) for p in prefixes]
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # another str hash: the seed is not Python's hash()
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(pairs), capture_output=True, text=True,
                          env=env, check=True)
    assert json.loads(done.stdout) == [position_seed(s, p) for s, p in pairs]


def test_seeds_stay_within_bounds_for_the_largest_endings(tmp_path):
    # the most endings a request may ask, as the settings declare them
    declared = bounds_of(ScoreConfig)
    for field in ("endings", "round_endings", "max_endings"):
        assert declared[field][0].le == MOST_ENDINGS
    assert SEED_SPAN + MOST_ENDINGS - 1 <= INT32_MAX
    sentences = _sentences(tmp_path)
    for run_seed in (0, 1, 2**31 - 1, 2**63 - 1):
        reqs = _requests(endings=MOST_ENDINGS, seed=run_seed)
        for k in range(1, len(sentences)):
            req = reqs.endings(sentences, k)
            last = chunk(req, MOST_ENDINGS - 1, 1)  # the last choice, asked alone as a follow-up would
            assert 0 <= req.seed < SEED_SPAN and last.seed == req.seed + MOST_ENDINGS - 1 <= INT32_MAX
    # and for prefixes of every kind
    assert all(0 <= position_seed(s, str(i) * (i % 7)) < SEED_SPAN for s in (0, 9, 2**62) for i in range(3000))
    # adaptive endings' last round of the largest maximum
    adaptive = _requests(target_half_width=0.05, round_endings=1000, max_endings=MOST_ENDINGS)
    last_round = adaptive.endings_round(sentences, 3, MOST_ENDINGS // 1000 - 1)
    assert last_round.seed + last_round.n - 1 <= INT32_MAX


def test_unseeded_runs_stay_unseeded(tmp_path):
    sentences = _sentences(tmp_path)
    for scheme in ("position", "run"):
        assert _requests(seed=None, seed_scheme=scheme).endings(sentences, 4).seed is None


def test_adaptive_rounds_are_chunks_of_the_positions_one_request(tmp_path):
    sentences = _sentences(tmp_path)
    adaptive = _requests(target_half_width=0.05, round_endings=30, max_endings=100)
    fixed = _requests(endings=100)  # the fixed run of --max-endings
    for k in (2, 7):
        whole = fixed.endings(sentences, k)
        rounds = [adaptive.endings_round(sentences, k, r) for r in range(4)]
        assert rounds == [chunk(whole, 0, 30), chunk(whole, 30, 30), chunk(whole, 60, 30), chunk(whole, 90, 10)]
        assert [r.seed - whole.seed for r in rounds] == [0, 30, 60, 90]
        assert whole.seed == position_seed(SEED, prefix_text(sentences, k))
    # R = M: the one round is the fixed request itself (its cache key)
    one = _requests(target_half_width=0.05, round_endings=12, max_endings=12)
    assert one.endings_round(sentences, 3, 0) == _requests(endings=12).endings(sentences, 3)


def test_the_run_scheme_is_the_earlier_releases_request(tmp_path):
    """--seed-scheme run: every position's request is seeded with --seed, as before issue 57."""
    sentences = _sentences(tmp_path)
    reqs = _requests(seed_scheme="run", endings=6)
    for k in (1, 4, 8):
        got = reqs.endings(sentences, k)
        assert got.seed == SEED
        # the request as the earlier release built it: the run's settings, the run's seed
        cfg = reqs.cfg
        assert msgspec.structs.replace(got, seed=None) == msgspec.structs.replace(
            _requests(seed=None, endings=6).endings(sentences, k), seed=None)
        assert (got.n, got.temperature, got.top_p, got.max_tokens) == (6, cfg.temperature, cfg.top_p, cfg.max_tokens)


# --- the setting ----------------------------------------------------------------

def test_the_seed_scheme_is_a_flag_a_config_key_and_a_keyword(tmp_path):
    p = build_parser()
    for verb in ("score", "estimate", "bench"):
        args = ["--out", "o"] if verb == "score" else []
        ns = p.parse_args([verb, "c.jsonl", *args, "--seed-scheme", "run"] if verb != "bench"
                          else [verb, "--seed-scheme", "run"])
        assert ns.seed_scheme == "run"
    toml = tmp_path / "s.toml"
    toml.write_text('seed = 1\nseed-scheme = "run"\n')
    assert load_config(toml, {}).seed_scheme == "run"
    assert load_config(None, {}).seed_scheme == "position"
    with pytest.raises(ConfigError, match="seed-scheme: expected position or run, got 'story'"):
        load_config(None, {"seed_scheme": "story"})


# --- score, estimate and the recall of a run, on the loopback server -------------

@pytest.mark.in_process
def test_score_sends_each_position_its_seed_and_a_second_run_the_same(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=5)
    assert _run(server, tmp_path, corpus, "a", cache="ca").summary.status == "complete"
    first = _gen_bodies(server)
    assert len(first) > 20 and all(b["seed"] == position_seed(SEED, _prefix(b)) for b in first)
    assert len({b["seed"] for b in first}) == len(first)
    server.reset_records()
    assert _run(server, tmp_path, corpus, "b", cache="cb").summary.status == "complete"
    assert _gen_bodies(server) == first  # another run (and cache): the very same requests
    assert (tmp_path / "a" / "positions.jsonl").read_bytes() == (tmp_path / "b" / "positions.jsonl").read_bytes()
    assert json.loads((tmp_path / "a" / "run.json").read_text())["config"]["seed_scheme"] == "position"
    # the story's id is no part of a seed: renamed stories keep their requests, and the cache
    renamed = tmp_path / "renamed.jsonl"
    renamed.write_text("".join(json.dumps({**json.loads(line), "id": f"new-{i}"}) + "\n"
                               for i, line in enumerate(corpus.read_text().splitlines())))
    server.reset_records()
    assert _run(server, tmp_path, renamed, "c", cache="ca").summary.status == "complete"
    assert server.count(kind="generation") == 0


@pytest.mark.in_process
def test_the_run_scheme_reuses_an_earlier_releases_cache(server, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=6)
    # a run as releases before issue 57 made it: every position seeded with --seed
    assert _run(server, tmp_path, corpus, "old", seed_scheme="run").summary.status == "complete"
    assert {b["seed"] for b in _gen_bodies(server)} == {SEED}
    record = tmp_path / "old" / "run.json"
    doc = json.loads(record.read_text())
    del doc["config"]["seed_scheme"]  # as its run.json was written: without the setting
    record.write_text(json.dumps(doc))
    server.reset_records()
    # with the old scheme: nothing is sent, the same outputs
    rerun = _run(server, tmp_path, corpus, "again", seed_scheme="run")
    assert rerun.summary.status == "complete" and server.requests == []
    assert (tmp_path / "old" / "positions.jsonl").read_bytes() == (tmp_path / "again" / "positions.jsonl").read_bytes()
    # estimate looks the same keys up: all cached with the old scheme, none with the new one
    cfg = {"base_url": server.base_url, "model": "test-gen", "endings": 4, "seed": SEED,
           "cache": str(tmp_path / "cache"), "progress": False}
    old = tension.estimate(corpus, **cfg, seed_scheme="run").estimate
    new = tension.estimate(corpus, **cfg).estimate
    assert old.generation_cached == old.generation_requests > 0 and old.generation_to_send == 0
    assert new.generation_cached == 0 and new.generation_to_send == new.generation_requests
    # the earlier run, read back without the setting in its run.json, finds its records
    with Store(tmp_path / "cache", readonly=True) as store:
        recall = score_recall(doc, store)
        assert recall.cfg.seed_scheme == "run"
        sentences = split_sentences(json.loads(corpus.read_text().splitlines()[0])["text"])
        line = json.loads((tmp_path / "old" / "positions.jsonl").read_text().splitlines()[0])
        assert recall.position(sentences, line["k"]).endings is not None
    # the new scheme into the old folder is another run, said, and draws anew
    capsys.readouterr()
    new_run = _run(server, tmp_path, corpus, "old")
    assert new_run.summary.status == "complete"
    assert "seed-scheme 'run' → 'position'" in capsys.readouterr().err
    assert len(_gen_bodies(server)) == new.generation_requests
