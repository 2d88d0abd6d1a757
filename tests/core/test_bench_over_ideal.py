"""`tension-run bench` reports the prompt tokens the servers computed per generated
position and per judged ending against the ideal (issue 29): from each server's
prefix-cache counters on /metrics, read before, between and after the two phases,
in the printed table and in `--save`; and null with the reason where a server has
no such counters (llama.cpp, a proxy, no /metrics), never a made-up figure."""

from __future__ import annotations

import json

import pytest

import tension
from tension.core.cli import main
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

N = 4


def _bench(tmp_path, capsys, gen: str, judge: str | None = None, *extra: str, positions: int = 3
           ) -> tuple[dict, str]:
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    args = ["bench", "--corpus", str(corpus), "--base-url", gen, "--model", "test-gen", "--judge-model", "test-judge",
            "--positions", str(positions), "--endings", str(N), "--no-progress", "--tokenizer", "words",
            "--save", str(tmp_path / "bench.json"), *extra]
    if judge is not None:
        args += ["--judge-base-url", judge]
    assert main(args) == 0, capsys.readouterr().err
    return json.loads((tmp_path / "bench.json").read_text()), capsys.readouterr().out


def test_one_vllm_server_gives_both_roles_split_by_phase(tmp_path, capsys):
    """One server for both roles (the embedded demo's case): the phases run one after
    the other, so its counters split by role all the same, and the two add up to what
    the server counted."""
    with LoopbackServer(model=["test-gen", "test-judge"]) as srv:
        fig, out = _bench(tmp_path, capsys, srv.base_url, None, "--no-variants")
        m = srv.metrics()
    (run,) = fig["runs"]
    gen, judge = run["prompt_tokens"]["generation"], run["prompt_tokens"]["judge"]
    assert gen["unit"] == "position" and gen["units"] == 3
    assert judge["unit"] == "judged ending" and judge["units"] == run["judge_requests"] == 3 * N
    total = gen["computed"] * gen["units"] + judge["computed"] * judge["units"]
    assert total == pytest.approx(m["prefix_cache_queries"] - m["prefix_cache_hits"], abs=0.01)
    for t in (gen, judge):
        assert t["computed"] > 0 and t["ideal"] > 0 and t["why_none"] is None
        assert t["over_ideal"] == round(t["computed"] / t["ideal"], 4)
    assert "prompt tok / position, computed" in out and f"{gen['over_ideal']:.2f}× ideal" in out
    assert f"{judge['over_ideal']:.2f}× ideal" in out


def test_the_ideal_is_estimates_over_the_positions_benched(tmp_path, capsys):
    """With every position of the story benched, the ideal is `estimate`'s for that
    story (E the run's mean ending tokens), plus the run's tag, which both system
    prompts carry, counted once per role."""
    with LoopbackServer(model=["test-gen", "test-judge"]) as srv:
        fig, _ = _bench(tmp_path, capsys, srv.base_url, None, "--no-variants", positions=1000)
        system = next(r.body["messages"][0]["content"] for r in srv.requests if r.kind == "generation")
    (run,) = fig["runs"]
    tag_words = len(system.split("] ")[0].split())
    cfg = {"tokenizer": "words", "endings": N, "progress": False, "min_words": 1,
           "cache": str(tmp_path / "cache2")}
    est = tension.estimate(tmp_path / "c.jsonl", **cfg, ending_tokens=run["mean_ending_tokens"]).estimate
    positions = fig["story_positions"]
    assert len(fig["positions_benched"]) == positions == run["prompt_tokens"]["generation"]["units"]
    for role, units in (("generation", positions), ("judge", positions * N)):
        want = (est.prompt_tokens[role].computed + tag_words) / units
        assert run["prompt_tokens"][role]["ideal"] == pytest.approx(want, abs=0.01 + 1 / units)


def test_a_server_per_role_is_read_per_role(tmp_path, capsys):
    with LoopbackServer(model="test-gen") as g, LoopbackServer(model="test-judge") as j:
        fig, _ = _bench(tmp_path, capsys, g.base_url, j.base_url)
        counted = {"generation": g.metrics(), "judge": j.metrics()}
    for role, m in counted.items():
        computed = sum(r["prompt_tokens"][role]["computed"] * r["prompt_tokens"][role]["units"] for r in fig["runs"])
        assert computed == pytest.approx(m["prefix_cache_queries"] - m["prefix_cache_hits"], abs=0.05)
    # warm-up off sends a position's judge prompts at once: none finds its head cached yet
    base, cold = fig["runs"][0]["prompt_tokens"]["judge"], fig["runs"][1]["prompt_tokens"]["judge"]
    assert cold["over_ideal"] >= base["over_ideal"]


@pytest.mark.parametrize("kind, reason", [
    ("llamacpp", "no prefix-cache counters"),
    ("no_metrics", "has no /metrics"),
])
def test_a_server_without_prefix_cache_counters_gives_null_and_says_why(kind, reason, tmp_path, capsys):
    kw = {"llamacpp": {"dialect": "llamacpp"}, "no_metrics": {"serve_metrics": False}}[kind]
    with LoopbackServer(model=["test-gen", "test-judge"], **kw) as srv:
        fig, out = _bench(tmp_path, capsys, srv.base_url, None, "--no-variants")
    for role in ("generation", "judge"):
        t = fig["runs"][0]["prompt_tokens"][role]
        assert t["computed"] is None and t["over_ideal"] is None and reason in t["why_none"]
        assert t["ideal"] > 0  # the ideal needs no counter
    assert f"no generation figure: {fig['runs'][0]['prompt_tokens']['generation']['why_none']}" in out


def test_only_the_judge_server_lacking_counters_loses_only_the_judge_figure(tmp_path, capsys):
    with LoopbackServer(model="test-gen") as g, LoopbackServer(model="test-judge", dialect="llamacpp") as j:
        fig, _ = _bench(tmp_path, capsys, g.base_url, j.base_url, "--no-variants")
    pt = fig["runs"][0]["prompt_tokens"]
    assert pt["generation"]["over_ideal"] is not None and pt["generation"]["why_none"] is None
    assert pt["judge"]["computed"] is None and "no prefix-cache counters" in pt["judge"]["why_none"]


def test_the_docs_command_runs(tmp_path, capsys, monkeypatch):
    """docs/cost.md's `bench` command of this section, against a loopback server at its URL's place."""
    import shlex
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "cost.md").read_text()
    section = doc[doc.index("## Computed prompt tokens over the ideal on a live server (issue 29)"):]
    start = section.index("```sh") + 5
    (line,) = section[start:section.index("```", start)].strip().splitlines()
    argv = shlex.split(line)
    assert argv[:2] == ["tension-run", "bench"]
    monkeypatch.chdir(tmp_path)
    with LoopbackServer(model="smollm2-135m") as srv:
        argv = [srv.base_url if a == "http://127.0.0.1:8765" else a for a in argv[1:]]
        assert main([*argv, "--model", "smollm2-135m", "--judge-model", "smollm2-135m", "--tokenizer", "words",
                     "--endings", "3", "--no-progress", "--cache", str(tmp_path / "cache")]) == 0
    assert "× ideal" in capsys.readouterr().out
    fig = json.loads((tmp_path / "bench.json").read_text())
    assert fig["runs"][0]["prompt_tokens"]["judge"]["over_ideal"] > 0
