"""Money where tokens are billed, not GPU-hours (issue 35, hosted gateways):
`estimate --input-usd-per-mtok/--output-usd-per-mtok` prices what is still to send,
and the report of a run prices the tokens the server counted. Both checked against
sums written here from the estimate's own counts and run.json's usage."""

from __future__ import annotations

import json

import pytest

from tension.core.cli import main
from tension.testing.corpus import make_corpus


def _estimate(tmp_path, server, *extra: str) -> dict:
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=2)
    out = tmp_path / "est.json"
    argv = ["estimate", str(corpus), "--base-url", server.base_url, "--model", "test-gen", "--judge-model",
            "test-judge", "--tokenizer", "words", "--endings", "5", "--cache", str(tmp_path / "cache"),
            "--no-progress", "--json", str(out), *extra]
    assert main(argv) == 0
    return json.loads(out.read_text())


def test_estimate_prices_the_tokens_still_to_send(tmp_path, server, capsys):
    est = _estimate(tmp_path, server, "--input-usd-per-mtok", "2.5", "--output-usd-per-mtok", "10")
    text = capsys.readouterr().out
    pt = est["prompt_tokens"]
    # nothing is cached: every prompt is still to send, every ending and verdict still to generate
    want_in = pt["generation"]["sent"] + pt["judge"]["sent"]
    want_out = est["positions"] * 5 * est["ending_tokens"] + est["output_tokens_max"]["judge"]
    tc = est["tokens_usd"]
    assert tc["input_tokens"] == want_in and tc["output_tokens"] == round(want_out)
    assert tc["usd"] == pytest.approx((want_in * 2.5 + round(want_out) * 10) / 1e6)
    assert f"${tc['usd']:,.2f}" in text and "$2.5 per million prompt tokens" in text


def test_estimate_names_a_price_not_given_and_prices_nothing_without_one(tmp_path, server, capsys):
    est = _estimate(tmp_path, server, "--output-usd-per-mtok", "10")
    assert est["tokens_usd"]["usd"] == pytest.approx(est["tokens_usd"]["output_tokens"] * 10 / 1e6)
    assert "prompt tokens not priced" in capsys.readouterr().out
    (tmp_path / "b").mkdir()
    assert _estimate(tmp_path / "b", server)["tokens_usd"] is None


def test_estimate_refuses_a_negative_price(tmp_path, server, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    assert main(["estimate", str(corpus), "--tokenizer", "words", "--input-usd-per-mtok", "-1",
                 "--base-url", server.base_url]) == 2
    err = capsys.readouterr().err
    assert "input-usd-per-mtok: expected a number >= 0, got -1" in err and "Traceback" not in err


def test_the_report_prices_the_run_s_tokens(tmp_path, server):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    out = tmp_path / "run"
    assert main(["score", str(corpus), "--out", str(out), "--base-url", server.base_url, "--model", "test-gen",
                 "--judge-model", "test-judge", "--endings", "3", "--seed", "1", "--no-progress",
                 "--cache", str(tmp_path / "cache"), "--input-usd-per-mtok", "3", "--output-usd-per-mtok", "15"]) == 0
    usage = json.loads((out / "run.json").read_text())["usage_this_run"]
    usd = (usage["prompt_tokens"] * 3 + usage["completion_tokens"] * 15) / 1e6
    md = (out / "report.md").read_text()
    assert f"- cost by tokens: {usage['prompt_tokens']:,} prompt × $3/M + {usage['completion_tokens']:,} " \
           f"completion × $15/M = ${usd:,.2f}" in md
    # `report` draws it again from the run alone, as the advice at the foot of report.md says
    assert main(["report", str(out), "--input-usd-per-mtok", "3"]) == 0
    assert f"{usage['completion_tokens']:,} completion (not priced)" in (out / "report.md").read_text()
