"""Findings M2, M3, L1 and L3 of ../shared/reviews/external-servers-2026-12-02.md, each
as the user met it (the test server taught the server's measured behaviour), and
each piece of advice the tool prints tested by running it as printed. M4 (a slow
server's run timed, and what to lower) is in test_run_pace.py, L4 (a router backend
whose /health needs the key) in test_router_process.py."""

from __future__ import annotations

import json
import re
import shlex

from tension.core.cli import main
from tension.testing.ideas import script_pipeline, write_ideas
from tension.testing.openai_server import CHAT_PATH, LoopbackServer

# docs/servers.md's llama-server (-c 16384 -np 4) holds 4,096 tokens a slot, and the
# warmup prompt was 111 of them; the test server counts that prompt in fewer, so its
# context is as much smaller
LLAMA_CONTEXT = 4050


def test_generate_defaults_on_a_4096_token_llama_server_say_the_max_tokens_that_fits(tmp_path, capsys):
    """M3: the default 4,000 tokens and the prompt exceed the context of docs/servers.md's
    own llama-server; every idea failed, "no idea could be generated", exit 1. Now a
    usage error naming the --max-tokens that fits, and that advice, run as printed,
    completes."""
    ideas = write_ideas(tmp_path / "ideas.jsonl")
    out = tmp_path / "s.jsonl"
    with LoopbackServer(model="test-gen", dialect="llamacpp", max_model_len=LLAMA_CONTEXT) as srv:
        script_pipeline(srv)
        argv = ["generate", str(ideas), "--out", str(out), "--base-url", srv.base_url, "--model", "test-gen",
                "--cache", str(tmp_path / "cache"), "--no-progress"]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "no idea could be generated" not in err
        m = re.search(r"pass (--max-tokens (\d+))", err)
        assert m and f"context of {LLAMA_CONTEXT} tokens" in err, err
        assert int(m.group(2)) <= LLAMA_CONTEXT // 2
        assert main([*argv, *shlex.split(m.group(1))]) == 0, capsys.readouterr().err
        sent = [r.body["max_tokens"] for r in srv.requests if r.path == CHAT_PATH and r.status == 200]
    assert sent and set(sent) == {int(m.group(2))}
    assert json.loads((tmp_path / "s.run.json").read_text())["status"] == "complete"


def test_every_position_skipped_for_the_context_is_said_so_not_blamed_on_the_anchors(tmp_path, capsys):
    """L3: with --pct-min 0.93 on a long story every position's prompt was over the
    context, and the closing error blamed the anchors and --pct-min, with empty
    parentheses. Now it names the context; a lower --pct-min, as it advises, scores."""
    import random

    from tension.testing.corpus import write_story

    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "long", "text": write_story(random.Random(1), 3300)}) + "\n")
    with LoopbackServer(model="test-gen", max_model_len=3500) as srv:
        argv = ["score", str(corpus), "--base-url", srv.base_url, "--model", "test-gen", "--endings", "2",
                "--cache", str(tmp_path / "cache"), "--no-progress"]
        assert main([*argv, "--out", str(tmp_path / "a"), "--pct-min", "0.93"]) == 1
        err = capsys.readouterr().err
        assert "()" not in err and "--min-anchor-words" not in err
        assert "would not fit the generation model's context of 3500 tokens" in err and "lower --pct-min" in err
        assert main([*argv, "--out", str(tmp_path / "b"), "--pct-min", "0.1"]) == 0, capsys.readouterr().err
    assert (tmp_path / "b" / "positions.jsonl").read_text().strip()


def test_bench_no_stream_on_llamacpp_counts_every_choice_of_its_chunks(tmp_path, capsys):
    """L1: `bench --no-stream --endings 20` on llama-server said 11.9 tokens per ending
    where the streamed bench said 48: its usage counts one choice of each chunk of 4.
    Each chunk's count now stands for each of its choices, so the figure is within
    sampling of the vLLM server's (exact counts per choice: the streamed bench)."""
    figures = {}
    for dialect in ("vllm", "llamacpp"):
        with LoopbackServer(model="test-gen", dialect=dialect) as srv:
            got = main(["bench", "--base-url", srv.base_url, "--model", "test-gen", "--positions", "3", "--endings",
                        "20", "--no-stream", "--no-variants", "--no-progress", "--save",
                        str(tmp_path / f"{dialect}.json")])
        assert got == 0, capsys.readouterr().err
        figures[dialect] = json.loads((tmp_path / f"{dialect}.json").read_text())["mean_ending_tokens"]
    assert abs(figures["llamacpp"] - figures["vllm"]) <= 0.25 * figures["vllm"], figures


def test_the_early_stop_on_an_ignored_choice_constraint_advises_logprobs_and_that_scores(tmp_path, capsys):
    """M2: with --judge-constraint choice on a server that is neither vLLM nor llama.cpp
    (it ignores structured_outputs), 92 % of verdicts were malformed and the early
    stop's causes said "try --judge-constraint choice", the flag in use. Now the
    first cause is the ignored constraint, the advice --judge-constraint logprobs,
    and that advice, run as printed, scores."""
    from tension.testing.corpus import make_corpus

    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    with LoopbackServer(model="test-gen", malformed_rate=0.9) as srv:  # owned_by "test": neither vLLM nor llama.cpp
        srv.yn_logprobs = True  # its free-text answers still have Y and N among the first token's top logprobs
        argv = ["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", srv.base_url, "--model",
                "test-gen", "--endings", "10", "--cache", str(tmp_path / "cache"), "--no-progress",
                "--judge-constraint", "choice"]
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "the judge is not answering Y or N" in err, err
        assert "try --judge-constraint choice" not in err
        causes = err.split("Likely causes: ", 1)[1]
        m = re.match(r"\(1\) the judge server is neither vLLM nor llama\.cpp.*?rerun with (--judge-constraint \w+)",
                     causes)
        assert m, causes
        advised = [*argv[:-2], *shlex.split(m.group(1))]
        assert main(advised) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "run.json").read_text())["status"] == "complete"
