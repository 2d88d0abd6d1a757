"""Figures a command says and what they are (issue 58 item 3: S4, S5, S7, M11, E31 of
../shared/reviews/newuser-2026-12-07.md): `bench` against a server that ignores
`stream` takes the plain body's choices and says time to first token was not
measured, never blaming `n`; figures no model or server can produce (fewer than 1
token an ending, more than max_tokens, more cached prompt tokens than prompt tokens)
are warnings in bench's output and when `estimate --bench FILE` reads them; run.json
never shows negative computed prompt tokens; `estimate` says which output tokens are
a bound and which use E, and `--pilot` errors name `--pilot`.

The servers are real loopback HTTP servers (`LoopbackServer`, `server`) taught each
case (``stream_ignored``, ``fixed_usage``)."""

from __future__ import annotations

import json
import re

import pytest

from tension.core.cli import main
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

BENCH = ["--positions", "2", "--endings", "6", "--no-variants", "--no-progress"]


def test_bench_on_a_server_that_ignores_stream_takes_the_plain_answers_and_says_ttft_was_not_measured(
        tmp_path, capsys):
    with LoopbackServer(model="test-gen", stream_ignored=True) as srv:
        got = main(["bench", "--base-url", srv.base_url, *BENCH, "--save", str(tmp_path / "b.json")])
    out = capsys.readouterr()
    assert got == 0, out.out + out.err
    said = out.out + out.err
    assert "honour n" not in said and "error" not in said
    plain = re.search(r"note: (\d+) streamed requests were answered with a plain JSON body \(the server ignores "
                      r"`stream`\): time to first token was not measured for them \(–\); their choices and usage "
                      r"are the figures \(or use --no-stream, which asks as score does\)", out.out)
    assert plain, out.out
    fig = json.loads((tmp_path / "b.json").read_text())
    assert int(plain.group(1)) == fig["runs"][0]["generation_requests"] + fig["runs"][0]["judge_requests"]
    assert fig["failed"] == 0 and fig["mean_ending_tokens"] > 1
    assert re.search(r"TTFT gen p50/p90/p99 \(ms\)\s+–", out.out)
    # the advice, run as printed: --no-stream gives the same figures, with no note
    with LoopbackServer(model="test-gen", stream_ignored=True) as srv:
        assert main(["bench", "--base-url", srv.base_url, *BENCH, "--no-stream"]) == 0
    assert "note:" not in capsys.readouterr().out


@pytest.mark.parametrize("usage, said", [
    ((40, 1, 0), ["mean tokens per ending 0.167: an ending is at least 1 token, so the servers' usage does not "
                  "count the endings (a fixed or missing usage?); GPU-hours estimated from it are too low"]),
    ((40, 6_000, 80), ["mean tokens per ending 1,000.0 is over max_tokens 150: no ending is that long, so the "
                       "servers' usage counts more than the endings",
                       "the servers report more cached prompt tokens than prompt tokens (generation and judge: "
                       "cached_tokens share over 100%): their usage is wrong, and so are the shares above"]),
])
def test_bench_figures_no_model_produces_are_warnings_in_bench_and_in_estimate_bench(tmp_path, capsys, usage,
                                                                                      said):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    saved = tmp_path / "b.json"
    with LoopbackServer(model="test-gen", fixed_usage=usage) as srv:
        assert main(["bench", "--base-url", srv.base_url, *BENCH, "--max-tokens", "150", "--save", str(saved)]) == 0
        out = capsys.readouterr().out
        for w in said:
            assert f"warning: {w}" in out, out
        assert main(["estimate", str(corpus), "--base-url", srv.base_url, "--no-progress", "--cache",
                     str(tmp_path / "cache"), "--max-tokens", "150", "--bench", str(saved)]) == 0
    out = capsys.readouterr().out
    for w in said:
        assert f"warning: --bench {saved}: {w}" in out, out


def test_bench_of_a_plausible_server_warns_of_nothing(tmp_path, capsys, server):
    assert main(["bench", "--base-url", server.base_url, "--model", "test-gen", *BENCH]) == 0
    assert "warning" not in capsys.readouterr().out


def _estimate(tmp_path, url: str, *flags: str) -> str:
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    assert main(["estimate", str(corpus), "--base-url", url, "--model", "test-gen", "--no-progress", "--cache",
                 str(tmp_path / "cache"), *flags]) == 0
    return ""


def test_estimate_says_which_output_tokens_are_a_bound_and_which_use_e(tmp_path, capsys, server):
    _estimate(tmp_path, server.base_url, "--max-tokens", "150", "--ending-tokens", "100",
              "--input-usd-per-mtok", "0.1", "--output-usd-per-mtok", "0.4")
    out = capsys.readouterr().out
    assert re.search(r"^tokens per ending assumed \(E\)\s+100 \(--ending-tokens\)$", out, re.M), out
    bound = re.search(r"^output tokens, bound: generation / judge\s+≤ ([\d,]+) / ≤ [\d,]+ \(every ending at "
                      r"max_tokens, every verdict at judge_max_tokens\)$", out, re.M)
    sent = re.search(r"^tokens to send: prompt / generated \(at E\)\s+[\d,]+ / ([\d,]+) \(endings at E = 100 "
                     r"tokens, verdicts at judge_max_tokens\)$", out, re.M)
    assert bound and sent, out
    assert int(sent.group(1).replace(",", "")) < int(bound.group(1).replace(",", ""))  # E = 100 < the bound of 150
    assert re.search(r"^cost of the tokens to send\s+\$[\d.,]+ \(at \$0\.1 per million prompt tokens, \$0\.4 per "
                     r"million generated tokens\)$", out, re.M), out
    assert "warning" not in out


def test_estimate_without_a_measured_e_says_it_is_the_bound_and_an_impossible_e_is_a_warning(tmp_path, capsys,
                                                                                              server):
    _estimate(tmp_path, server.base_url)
    out = capsys.readouterr().out
    assert re.search(r"^tokens per ending assumed \(E\)\s+\d+ \(max_tokens: a bound; --ending-tokens or --bench "
                     r"FILE gives a measured one\)$", out, re.M), out
    _estimate(tmp_path, server.base_url, "--max-tokens", "150", "--ending-tokens", "0.05")
    out = capsys.readouterr().out
    assert ("warning: --ending-tokens 0.05: an ending is at least 1 token and at most max_tokens (150); the figures "
            "below that use E are off by as much") in out


def test_estimate_pilot_that_is_no_run_names_estimates_own_flag(tmp_path, capsys, server):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    got = main(["estimate", str(corpus), "--base-url", server.base_url, "--model", "test-gen", "--no-progress",
                "--cache", str(tmp_path / "cache"), "--pilot", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert got == 1
    assert (f"error: {tmp_path / 'nope'}: not a score run folder (no run.json in it), given to --pilot; the "
            "recommended endings are read from a finished score run's cached verdicts") in err, err
    assert "subsample" not in err


def test_score_run_json_clamps_computed_prompt_tokens_when_a_server_reports_more_cached_than_prompt(
        tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    with LoopbackServer(model="test-gen", fixed_usage=(10, 5, 50)) as srv:
        got = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", srv.base_url, "--model",
                    "test-gen", "--endings", "4", "--seed", "1", "--no-progress", "--no-report", "--cache",
                    str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert got == 0, err
    usage = json.loads((tmp_path / "out" / "run.json").read_text())["prompt_tokens"]["usage"]
    for role in ("generation", "judge"):
        u = usage[role]
        assert u["cached"] > u["prompt"] and u["computed"] == 0
        assert u["note"] == (f"the {role} servers reported {u['cached']:,} cached prompt tokens of {u['prompt']:,} "
                             "prompt tokens: computed taken as 0 (their usage is wrong)")
    said = re.findall(r"warning: the \w+ servers reported [\d,]+ cached prompt tokens of [\d,]+ prompt tokens: "
                      r"computed taken as 0 \(their usage is wrong\); run.json prompt_tokens.usage says it", err)
    assert len(said) == 1, err
