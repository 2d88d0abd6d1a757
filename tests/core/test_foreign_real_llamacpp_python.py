"""The real llama-cpp-python server (`python -m llama_cpp.server`, built once into the
user cache by tension.testing.llamacpp_python) serving the GGUF the llama-server tests
serve (slow: .ci/run's step 3; issue 61). What ../shared/reviews/external-servers-2026-12-02.md
section 1 measured by hand, kept: the server is recognised (owned_by "me" and a counter
that answers), its dropped `n` asked in chunks of one, tokens counted by its own
/extras/tokenize/count, a cached rerun generates and judges nothing again, and bench
refuses the figures a streamed bench cannot give here and gives them unstreamed.

The server's own access log (uvicorn's, one line a request) is the count of what arrived,
independent of the tool's counters. Two bugs it showed are tests here: a cached rerun asking its counter for a context
length it never says, and a stream cut before its first token called a dropped n."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.testing.corpus import EMBEDDED_STORY as STORY
from tension.testing.llamacpp_python import ALIAS, ENDINGS, SCALED, Served

pytestmark = pytest.mark.slow

BENCH = ["--positions", "2", "--endings", "4", "--max-tokens", "32", "--no-progress"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from tension.testing.llamacpp_python import serve_built

    with serve_built(tmp_path_factory.mktemp("lcp") / "server.log") as s:
        yield s


def _story(tmp_path: Path) -> Path:
    p = tmp_path / "story.jsonl"
    p.write_text(json.dumps({"id": "baker", "text": STORY}) + "\n")
    return p


def _main(argv: list[str]) -> tuple[int, str]:
    """`main(argv)`, with what it printed (stdout and stderr together)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = main(argv)
    return code, printed.getvalue()


@dataclass(frozen=True)
class Scored:
    folder: Path  # a/ (the first run) and b/ (its cached rerun)
    first: tuple[int, str]  # exit status, what it printed
    rerun: tuple[int, str]
    after_first: Counter[tuple[str, str, int]]  # the server's access log after each run
    after_rerun: Counter[tuple[str, str, int]]


@pytest.fixture(scope="module")
def scored(served: Served, tmp_path_factory) -> Scored:
    """The scaled score, then the same command again on its cache (once, for the tests below)."""
    tmp = tmp_path_factory.mktemp("score")
    story = _story(tmp)
    base = ["--base-url", served.url, "--model", ALIAS, "--cache", str(tmp / "cache"), "--seed", "1"]
    first = _main(["score", str(story), "--out", str(tmp / "a"), *base, *SCALED])
    after_first = served.arrived()
    rerun = _main(["score", str(story), "--out", str(tmp / "b"), *base, *SCALED])
    return Scored(tmp, first, rerun, after_first, served.arrived())


def test_score_is_recognised_chunks_n_and_counts_tokens_with_its_counter(served, scored):
    code, printed = scored.first
    assert code == 0, printed
    rec = json.loads((scored.folder / "a" / "run.json").read_text())
    (server,) = rec["servers"]
    assert (server["kind"], server["max_n"], server["tokenize"], server["constraint"]) == (
        "llamacpp_python", 1, "count", "grammar"), server
    assert printed.count(f"{served.url} is llama-cpp-python's server") == 1, printed
    assert "--tokenizer" not in printed, printed  # its counter counts: no advice to count words
    rows = [json.loads(x) for x in (scored.folder / "a" / "positions.jsonl").read_text().splitlines()]
    assert rows and all(r["n_endings"] == ENDINGS and r["n_malformed"] == 0 for r in rows), rows
    seen = scored.after_first
    chats = seen[("POST", "/v1/chat/completions", 200)]
    # n dropped: each ending its own request (chunks of one), then one judge request per ending
    assert chats == 2 * ENDINGS * len(rows), seen
    assert rec["http"]["retries"] == 0 and rec["http"]["attempts"] >= chats, rec["http"]
    assert seen[("POST", "/extras/tokenize/count", 200)] > 0, seen
    assert not any(p == "/tokenize" for _, p, _ in seen), seen  # llama.cpp's dialect never asked
    assert not any(s >= 400 for *_, s in seen), seen


def test_a_cached_rerun_generates_and_judges_nothing_and_writes_the_same_bytes(scored):
    code, printed = scored.rerun
    assert code == 0, printed
    new = scored.after_rerun - scored.after_first
    assert new[("POST", "/v1/chat/completions", 200)] == 0, new
    a, b = scored.folder / "a", scored.folder / "b"
    assert (a / "positions.jsonl").read_bytes() == (b / "positions.jsonl").read_bytes()


def test_a_cached_rerun_sends_nothing_at_all(scored):
    """As on llama-server (test_foreign_real.py: attempts 0): a cached rerun is answered by the cache alone."""
    new = scored.after_rerun - scored.after_first
    again = json.loads((scored.folder / "b" / "run.json").read_text())
    assert not new and again["http"]["attempts"] == 0, (new, again["http"])


def test_bench_refuses_streamed_figures_and_gives_them_unstreamed(served, tmp_path):
    """It drops n and cuts a stream as soon as another request waits (interrupt_requests):
    the streamed bench stops after its first run with the way out, and estimate will not
    take its file; --no-stream measures what it can (throughput, latency) and says what it
    cannot (time to first token, prefix-cache hits), and estimate takes that file."""
    story = _story(tmp_path)
    common = ["bench", "--corpus", str(story), "--base-url", served.url, "--model", ALIAS, *BENCH]
    before = served.arrived()
    code, printed = _main([*common, "--cache", str(tmp_path / "c1"), "--save", str(tmp_path / "s.json")])
    assert code == 1, printed
    assert "bench stopped after its first run" in printed and "--no-stream" in printed, printed
    assert "not sent: the judge phase" in printed, printed
    fig = json.loads((tmp_path / "s.json").read_text())
    assert fig["failed"] > 0, fig
    assert (served.arrived() - before)[("POST", "/v1/chat/completions", 200)] <= 8, printed  # the first run's only
    est = ["estimate", str(story), "--base-url", served.url, "--model", ALIAS, "--cache", str(tmp_path / "ce"),
           "--no-progress"]
    code, said = _main([*est, "--bench", str(tmp_path / "s.json")])
    assert code == 2 and "requests failed" in said, said

    code, printed = _main([*common, "--no-stream", "--no-variants", "--cache", str(tmp_path / "c2"),
                           "--save", str(tmp_path / "p.json")])
    assert code == 0, printed
    fig = json.loads((tmp_path / "p.json").read_text())
    assert fig["failed"] == 0 and 8 < fig["mean_ending_tokens"] <= 32, (fig["mean_ending_tokens"], printed)
    assert fig["gen_tok_s"] > 0 and fig["judge_req_s"] > 0 and fig["seconds_per_story"] > 0, printed
    rows = {line[:34].strip(): line[34:].strip() for line in printed.splitlines() if len(line) > 34}
    assert rows["TTFT gen p50/p90/p99 (ms)"] == "–" and rows["TTFT judge p50/p90/p99 (ms)"] == "–", printed
    prefix = next(line for line in printed.splitlines() if line.startswith("prefix-cache hits"))
    assert prefix.endswith(" no /metrics"), printed
    code, said = _main([*est, "--bench", str(tmp_path / "p.json")])
    assert code == 0, said


def test_a_stream_cut_before_its_first_token_is_called_a_cut_not_n(served, tmp_path):
    story = _story(tmp_path)
    code, printed = _main(["bench", "--corpus", str(story), "--base-url", served.url, "--model", ALIAS, *BENCH,
                           "--cache", str(tmp_path / "c")])
    assert code == 1, printed
    assert "ended the stream before" in printed and "does not honour n" not in printed, printed
