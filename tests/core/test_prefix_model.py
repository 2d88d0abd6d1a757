"""`estimate --block-size B --kv-blocks C` (the block-level prefix-cache model)
against an independent count: every prompt the run would send, as words, cut in
blocks, each sequence's hit the longest run of its full blocks seen before (capped
at its length - 1), as vLLM does with a cache that never evicts; then eviction,
the H200 profile, the GPU-hours and the CLI's errors."""

from __future__ import annotations

import json

import pytest

import tension
from tension.core.cli import main
from tension.core.config import load_config
from tension.core.pipelines.prefix.gpu import H200
from tension.core.pipelines.prefix.synthetic import MARKERS_AFTER, MARKERS_BEFORE
from tension.core.prompts import score as prompts
from tension.testing.corpus import write_unique_corpus

N = 5
E = 7


def block_count(stories: list[list[str]], cfg, B: int) -> tuple[int, int]:
    """(prompt tokens queried, hit) of every sequence, one after the other. (Blocks of 8
    or more: the two system prompts share their first 6 tokens, "<s>"×3 You are a.)"""
    seen: set[int] = set()
    queried = hit = 0

    def send(toks: list[str]) -> None:
        nonlocal queried, hit
        hs, h = [], 0
        for i in range(len(toks) // B):
            h = hash((h, tuple(toks[i * B:(i + 1) * B])))
            hs.append(h)
        cap, got = (len(toks) - 1) // B, 0
        while got < min(len(hs), cap) and hs[got] in seen:
            got += 1
        seen.update(hs)
        queried += len(toks)
        hit += got * B

    def chat(messages) -> list[str]:  # ChatML's markers as tokens of their own
        sys_, user = (m["content"].split() for m in messages)
        return ["<s>"] * 3 + sys_ + ["<u>"] * (MARKERS_BEFORE - 3) + user + ["<a>"] * MARKERS_AFTER

    for sents in stories:
        total = len(" ".join(sents).split())
        for k in range(1, len(sents)):
            if len(sents[k - 1].split()) < cfg.min_anchor_words:
                continue
            if not cfg.pct_min <= len(" ".join(sents[:k]).split()) / total <= cfg.pct_max:
                continue
            g = chat(prompts.ending_messages(" ".join(sents[:k])))
            for _ in range(cfg.endings):
                send(g)
            cont = " ".join(" ".join(sents[k:]).split()[: cfg.continuation_words])
            for i in range(cfg.endings):
                send(chat(prompts.judge_messages(sents[k - 1], cont, f"E{i} " + " ".join(["more"] * (E - 1)))))
    return queried, hit


@pytest.mark.parametrize(("block", "continuation_words", "warm"),
                         [(16, 2000, True), (8, 40, True), (128, 2000, True), (16, 2000, False)])
def test_a_cache_that_never_evicts_computes_what_the_blocks_seen_before_say(tmp_path, block, continuation_words,
                                                                             warm):
    """(Without the warm-up the n judge prompts go as one batch: the first computes the
    shared head, which the others find registered in the same step: the same hits.)"""
    stories = write_unique_corpus(tmp_path / "c.jsonl", 3)
    cfg = {"tokenizer": "words", "endings": N, "cache": str(tmp_path / "cache"),
           "progress": False, "min_words": 100, "continuation_words": continuation_words,
           "judge_max_tokens": 1, "warm_judge": warm}
    est = tension.estimate(tmp_path / "c.jsonl", **cfg, ending_tokens=E, block_size=block, kv_blocks=10**6).estimate
    queried, hit = block_count(stories, load_config(None, cfg), block)
    pc = est.prefix_cache
    assert pc is not None and pc.positions == est.positions > 50
    got_q = sum(r.queried for r in pc.roles.values())
    got_h = sum(r.hit for r in pc.roles.values())
    assert (got_q, got_h) == (queried, hit)
    assert pc.hit_rate == pytest.approx(hit / queried)
    # never better than the ideal: blocks only lose sharing
    for role in ("generation", "judge"):
        assert pc.roles[role].computed >= est.prompt_tokens[role].computed - MARKERS_BEFORE - MARKERS_AFTER


def test_a_small_cache_evicts_and_the_h200_profile_has_the_papers_blocks(tmp_path):
    write_unique_corpus(tmp_path / "c.jsonl", 6, seed=3)
    cfg = {"tokenizer": "words", "endings": N, "cache": str(tmp_path / "cache"),
           "progress": False, "min_words": 100, "gen_concurrency": 64}
    big = tension.estimate(tmp_path / "c.jsonl",
                           **cfg, ending_tokens=E, block_size=16, kv_blocks=10**6).estimate.prefix_cache
    small = tension.estimate(tmp_path / "c.jsonl",
                             **cfg, ending_tokens=E, block_size=16, kv_blocks=150).estimate.prefix_cache
    assert big is not None and small is not None
    assert small.roles["generation"].queried == big.roles["generation"].queried
    assert small.hit_rate < big.hit_rate
    h200 = tension.estimate(tmp_path / "c.jsonl", **cfg, ending_tokens=E, gpu_profile="h200").estimate.prefix_cache
    assert h200 is not None and h200.block_size == 16
    assert h200.kv_blocks == {"generation": 5226, "judge": 10977}
    assert big.never_fit == small.never_fit == 0
    # 112 tokens: no prompt fits
    tiny = tension.estimate(tmp_path / "c.jsonl",
                            **cfg, ending_tokens=E, block_size=16, kv_blocks=8).estimate.prefix_cache
    assert tiny is not None and tiny.never_fit > 0


def test_the_h200_profile_is_the_serving_profiles_setup():
    from tension.core.serving.profiles import paper_servers

    gen, judge = paper_servers()
    assert (H200[0].utilization, H200[1].utilization) == (gen.gpu_memory_utilization, judge.gpu_memory_utilization)
    assert (H200[0].model, H200[1].model) == (gen.served_name, judge.served_name)
    assert H200[0].bytes_per_token == 2 * 64 * 8 * 128 * 2  # Qwen3-32B: 64 layers, 8 KV heads of 128, bf16


def test_cli_prints_the_prediction_beside_the_ideal_and_rejects_half_a_model(tmp_path, capsys):
    write_unique_corpus(tmp_path / "c.jsonl", 2)
    args = ["estimate", str(tmp_path / "c.jsonl"), "--tokenizer", "words", "--min-words", "100", "--no-progress",
            "--cache", str(tmp_path / "cache"), "--base-url", "http://127.0.0.1:9", "--endings", "4"]
    assert main(args + ["--block-size", "16", "--kv-blocks", "4000", "--gen-tok-s", "100", "--judge-req-s", "10",
                        "--prefill-tok-s", "5000", "--json", str(tmp_path / "e.json")]) == 0
    out = capsys.readouterr().out
    assert "prefix cache model" in out and "blocks of 16" in out and "hit rate" in out
    assert "GPU-hours of prefill: predicted / ideal" in out
    doc = json.loads((tmp_path / "e.json").read_text())
    pc = doc["prefix_cache"]
    assert pc["kv_blocks"] == {"generation": 4000} and 0 < pc["hit_rate"] < 1
    assert doc["gpu_hours"]["prefill"] == pytest.approx(pc["computed"] / 5000 / 3600)
    assert doc["gpu_hours"]["total"] == pytest.approx(doc["gpu_hours"]["generation"] + doc["gpu_hours"]["judge"]
                                                      + doc["gpu_hours"]["prefill"])
    for bad, why in ((["--block-size", "16"], "go together"), (["--prefill-tok-s", "10"], "needs the prefix-cache"),
                     (["--gpu-profile", "h100"], "invalid choice"), (["--block-size", "0", "--kv-blocks", "9"], "")):
        with pytest.raises(SystemExit) as e:
            rc = main(args + bad)
            raise SystemExit(rc)
        assert e.value.code == 2, bad
        assert why in capsys.readouterr().err, bad


@pytest.fixture
def vllm_like():
    """A loopback server that says it is vLLM (owned_by), with its /metrics."""
    from tension.testing.openai_server import LoopbackServer

    with LoopbackServer(model=["test-gen", "test-judge"], batching=True) as srv:
        yield srv


def test_score_reports_the_prompt_tokens_computed_against_the_ideal(vllm_like, tmp_path):
    """run.json `prompt_tokens`: the ideal is estimate's (with E the run's mean ending
    tokens), usage is what the answers report, and the server's counters are read
    over the run (one server for both roles: `shared`)."""
    server = vllm_like
    write_unique_corpus(tmp_path / "c.jsonl", 2)
    common = ["--tokenizer", "words", "--min-words", "100", "--endings", "4", "--no-progress", "--seed", "3",
              "--cache", str(tmp_path / "cache"), "--base-url", server.base_url, "--model", "test-gen",
              "--judge-model", "test-judge"]
    assert main(["score", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "out"), "--no-report", *common]) == 0
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    pt = run["prompt_tokens"]
    lines = [json.loads(x) for x in (tmp_path / "out" / "positions.jsonl").read_text().splitlines()]
    assert pt["positions"] == len(lines) > 10
    assert pt["judged_endings"] == sum(p["n_endings"] - p["n_empty"] for p in lines)
    cfg = {"tokenizer": "words", "endings": 4, "min_words": 100, "progress": False,
           "cache": str(tmp_path / "cache2")}
    est = tension.estimate(tmp_path / "c.jsonl", **cfg, ending_tokens=pt["mean_ending_tokens"]).estimate
    assert pt["ideal"]["generation"] == est.prompt_tokens["generation"].computed
    assert pt["ideal"]["judge"] == pytest.approx(est.prompt_tokens["judge"].computed, abs=1)
    sent = run["usage_this_run"]  # a fresh run: every answer was sent
    used = pt["usage"]
    assert used["generation"]["prompt"] + used["judge"]["prompt"] == sent["prompt_tokens"]
    assert used["generation"]["cached"] + used["judge"]["cached"] == sent.get("cached_tokens", 0)
    shared = pt["server"]["shared"]
    assert shared["queries"] > shared["hits"] > 0 and shared["computed"] == shared["queries"] - shared["hits"]
    per = pt["per_unit"]
    assert per["generation"]["unit"] == "position"
    assert per["generation"]["ideal"] == round(pt["ideal"]["generation"] / pt["positions"], 3)
    assert per["judge"]["usage_computed"] == round(used["judge"]["computed"] / pt["judged_endings"], 3)
    assert per["judge"]["server_computed"] is None  # one server for both roles: not split by role
    assert per["judge"]["server_none"].startswith("one server for both roles")
    # computed / ideal: by usage per role, by the server for both roles together
    assert per["judge"]["usage_over_ideal"] == round(used["judge"]["computed"] / pt["ideal"]["judge"], 4)
    everything = per["all"]
    assert everything["server_computed"] == shared["computed"]
    assert everything["ideal"] == pt["ideal"]["generation"] + pt["ideal"]["judge"]
    assert everything["server_over_ideal"] == round(shared["computed"] / everything["ideal"], 4)
    assert everything["server_over_ideal"] >= 1 and everything["server_none"] is None


def test_score_splits_computed_over_ideal_by_role_with_a_server_per_role(tmp_path):
    """A generation server and a judge server, both vLLM: per generated position and per
    judged ending, the server's computed tokens and their ratio to the ideal."""
    from tension.testing.openai_server import LoopbackServer

    write_unique_corpus(tmp_path / "c.jsonl", 2)
    with LoopbackServer(model="test-gen", batching=True) as g, LoopbackServer(model="test-judge", batching=True) as j:
        assert main(["score", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "out"), "--no-report",
                     "--tokenizer", "words", "--min-words", "100", "--endings", "4", "--no-progress",
                     "--cache", str(tmp_path / "cache"), "--base-url", g.base_url, "--model", "test-gen",
                     "--judge-base-url", j.base_url, "--judge-model", "test-judge"]) == 0
        counted = {"generation": g.metrics(), "judge": j.metrics()}
    pt = json.loads((tmp_path / "out" / "run.json").read_text())["prompt_tokens"]
    units = {"generation": pt["positions"], "judge": pt["judged_endings"]}
    for role, m in counted.items():
        computed = m["prefix_cache_queries"] - m["prefix_cache_hits"]
        got = pt["per_unit"][role]
        assert pt["server"][role]["computed"] == computed
        assert got["server_computed"] == round(computed / units[role], 3)
        assert got["server_over_ideal"] == round(computed / pt["ideal"][role], 4)
        assert got["server_none"] is None


@pytest.mark.parametrize("kind", ["llamacpp", "proxy", "no_metrics"])
def test_score_says_why_a_server_gives_no_computed_tokens(kind, tmp_path):
    """llama.cpp, a proxy in front of vLLM (owned_by renamed) and a server without
    /metrics: the server's figures are null with the reason, never a made-up figure."""
    from tension.testing.openai_server import LoopbackServer

    kw = {"llamacpp": {"dialect": "llamacpp"}, "proxy": {"batching": True, "owned_by": "openai"},
          "no_metrics": {"batching": True, "serve_metrics": False}}[kind]
    write_unique_corpus(tmp_path / "c.jsonl", 1)
    with LoopbackServer(model="test-gen", **kw) as srv:
        assert main(["score", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "out"), "--no-report",
                     "--tokenizer", "words", "--min-words", "100", "--endings", "3", "--no-progress",
                     "--cache", str(tmp_path / "cache"), "--base-url", srv.base_url, "--model", "test-gen"]) == 0
    pt = json.loads((tmp_path / "out" / "run.json").read_text())["prompt_tokens"]
    assert pt["server"] is None and pt["ideal"] is not None
    for role in ("generation", "judge", "all"):
        got = pt["per_unit"][role]
        assert got["server_computed"] is None and got["server_over_ideal"] is None
        want = "does not say it is vLLM" if kind != "no_metrics" else "no prefix-cache counters"
        assert want in got["server_none"]
    assert pt["per_unit"]["judge"]["usage_over_ideal"] is not None  # the answers' usage is still there


def test_the_docs_commands_run(tmp_path, capsys):
    """docs/cost.md's commands of the block-level model, on a small corpus."""
    import shlex
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "cost.md").read_text()
    section = doc[doc.index("## Block-level prefix cache (issue 29)"):]
    block = section[section.index("```sh") + 5:section.index("```", section.index("```sh") + 5)]
    commands = [shlex.split(line) for line in block.strip().splitlines()]
    assert len(commands) == 2
    write_unique_corpus(tmp_path / "stories.jsonl", 2)
    for argv in commands:
        assert argv[:2] == ["tension-run", "estimate"]
        argv = [str(tmp_path / a) if a == "stories.jsonl" else a for a in argv[1:]]
        assert main(argv + ["--min-words", "100", "--no-progress", "--cache", str(tmp_path / "cache"),
                            "--base-url", "http://127.0.0.1:9"]) == 0
        assert "prefix cache model" in capsys.readouterr().out


def test_the_bench_of_the_docs_table_runs(tmp_path):
    """docs/cost.md's `bench/prefix_model.py` command (--quick: the default concurrency's cells)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    write_unique_corpus(tmp_path / "pd_short_stories.jsonl", 1)
    r = subprocess.run([sys.executable, str(root / "bench" / "prefix_model.py"), str(tmp_path / "pd_short_stories.jsonl"),
                        "--tokenizer", "words", "--json", str(tmp_path / "model.json"), "--quick", "--min-words", "100"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads((tmp_path / "model.json").read_text())
    assert {row["block_size"] for row in rows} == {16, 32, 128}
    assert any(not row["warm_judge"] for row in rows)
    assert all(0 < row["hit_rate"] < 1 for row in rows)


def test_a_fully_cached_rerun_reads_no_metrics_and_says_so(vllm_like, server, tmp_path):
    """A vLLM server's /metrics twice, a rerun from the cache nothing; a server that
    does not say it is vLLM is not asked for /metrics at all."""
    other, server = server, vllm_like
    write_unique_corpus(tmp_path / "c.jsonl", 1)
    args = ["score", str(tmp_path / "c.jsonl"), "--no-report", "--tokenizer", "words", "--min-words", "100",
            "--endings", "3", "--no-progress", "--seed", "3", "--cache", str(tmp_path / "cache"),
            "--base-url", server.base_url, "--model", "test-gen", "--judge-model", "test-judge"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert server.count(path="/metrics") == 2  # before the first request, after the last
    server.reset_records()
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    assert server.count() == 0
    pt = json.loads((tmp_path / "b" / "run.json").read_text())["prompt_tokens"]
    assert pt["server"] is None and pt["ideal"] is not None
    assert pt["per_unit"]["all"]["server_none"].startswith("nothing was sent")
    i, j = args.index("--base-url") + 1, args.index("--cache") + 1
    fresh = [*args[:j], str(tmp_path / "cache2"), *args[j + 1:]]
    assert main([*fresh[:i], other.base_url, *fresh[i + 1:], "--out", str(tmp_path / "c")]) == 0
    assert other.count(path="/metrics") == 0 and other.count(kind="generation") > 0
