"""A hosted API's rate-limit headers (issue 35, hosted gateways): a run that reads
`x-ratelimit-remaining-*: 0` waits for `x-ratelimit-reset-*` before its next request
to that server, so the 429s never come; the headers' forms are read as OpenAI and
the gateways write them (core/llm/ratelimit.py)."""

from __future__ import annotations

import pytest

from tension.core.cli import main
from tension.core.llm.ratelimit import RateLimit, read_rate_limit, reset_seconds
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

MODELS = ["test-gen", "test-judge"]


@pytest.mark.parametrize(("text", "seconds"), [
    ("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0.5", 0.5), ("0", 0.0), ("17", 17.0),
    ("2000000010", 10.0), ("2000000010000", 10.0),  # a Unix time, in seconds and in milliseconds
    ("", None), ("soon", None), ("1x", None), ("-3", None), ("nan", None), ("5s junk", None)])
def test_a_reset_is_read_in_every_form_the_gateways_send(text, seconds):
    got = reset_seconds(text, now=2_000_000_000.0)
    assert got == (None if seconds is None else pytest.approx(seconds))


def test_headers_are_read_case_insensitively_and_only_a_spent_window_with_its_reset_holds():
    rl = read_rate_limit({"X-RateLimit-Remaining-Requests": "0", "x-ratelimit-reset-requests": "250ms",
                          "x-ratelimit-remaining-tokens": "1200", "x-ratelimit-reset-tokens": "6m0s"})
    assert rl == RateLimit(remaining_requests=0, remaining_tokens=1200, reset_requests=0.25, reset_tokens=360.0)
    assert rl.spent() == ("requests", 0.25)
    assert read_rate_limit({"content-type": "application/json"}) is None
    assert RateLimit(remaining_requests=3, reset_requests=1.0).spent() is None
    assert RateLimit(remaining_requests=0).spent() is None  # no reset known: nothing to wait for
    both = RateLimit(remaining_requests=0, reset_requests=1.0, remaining_tokens=0, reset_tokens=5.0)
    assert both.spent() == ("tokens", 5.0)  # the later reset
    assert read_rate_limit({"x-ratelimit-remaining-requests": "many"}) == RateLimit()


def _score(tmp_path, url: str, name: str) -> list[str]:
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=6)
    return ["score", str(corpus), "--out", str(tmp_path / name), "--cache", str(tmp_path / f"{name}.lmdb"),
            "--base-url", url, "--model", "test-gen", "--judge-model", "test-judge", "--endings", "3",
            "--seed", "2", "--no-progress", "--no-report", "--retries", "20",
            # a first burst below the window: before the first answer no limit is known
            "--gen-concurrency", "2", "--judge-concurrency", "2"]


def test_a_run_paces_itself_by_the_headers_and_is_never_refused(tmp_path, capsys):
    with LoopbackServer(model=MODELS) as plain:
        assert main(_score(tmp_path, plain.base_url, "clean")) == 0
    capsys.readouterr()
    with LoopbackServer(model=MODELS, rate_limit=(8, 0.4)) as srv:
        assert main(_score(tmp_path, srv.base_url, "paced")) == 0
        refused = srv.rate_refused
    err = capsys.readouterr().err
    assert refused == 0, err
    assert err.count("rate limit is spent (x-ratelimit-remaining-requests: 0)") == 1, err
    for name in ("positions.jsonl", "stories.csv"):
        assert (tmp_path / "paced" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes()
