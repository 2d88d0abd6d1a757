"""`bench` against the loopback server: every figure is produced, the counts and
the /metrics deltas agree with what the server saw, and the saved figures feed
`estimate --bench`. Streaming in the client; request bytes of score unchanged."""

from __future__ import annotations

import asyncio
import itertools
import json
import math

import msgspec
import pytest
from sigterm import run_until_sigterm

from tension.core.cli import main
from tension.core.errors import ConfigError, RefusedError
from tension.core.llm.client import Client
from tension.core.llm.protocol import ChatRequest
from tension.core.pipelines.bench import load_figures
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import CHAT_PATH, expected_endings

N = 4


def _cfg(server, tmp_path, **kw):
    """bench's settings, as the flags `_flags` writes."""
    return {"base_url": server.base_url, "model": "test-gen", "judge_model": "test-judge", "endings": N, "seed": 3,
            "progress": False, "cache": str(tmp_path / "cache"), **kw}


def _flags(settings: dict) -> list[str]:
    """Settings as the command line's flags (`progress=False` is --no-progress)."""
    out: list[str] = []
    for k, v in settings.items():
        flag = "--" + k.replace("_", "-")
        out += [flag] if v is True else ["--no-" + flag[2:]] if v is False else [flag, str(v)]
    return out


_saved = itertools.count()


def bench(settings: dict, corpus, *, positions: int, variants: bool = True, stream: bool = True,
          gpu_hour_usd: float | None = None):
    """`tension-run bench` as a user runs it (the verb's one door), its figures read back
    from what --save wrote."""
    saved = corpus.parent / f"bench-{next(_saved)}.json"
    argv = ["bench", "--corpus", str(corpus), "--positions", str(positions), "--save", str(saved),
            *_flags(settings), *([] if variants else ["--no-variants"]), *([] if stream else ["--no-stream"]),
            *([] if gpu_hour_usd is None else ["--gpu-hour-usd", str(gpu_hour_usd)])]
    rc = main(argv)
    assert rc in (0, 1) and saved.is_file(), rc  # 1: some request failed (the figures count it)
    return load_figures(saved)


def _filled(p) -> bool:
    return p.count > 0 and all(isinstance(v, float) and math.isfinite(v) and v >= 0
                               for v in (p.mean, p.p50, p.p90, p.p99)) and p.p50 <= p.p90 <= p.p99


def test_bench_produces_every_field(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    fig = bench(_cfg(server, tmp_path), corpus, positions=3, gpu_hour_usd=2.5)
    assert [r.name.split(":")[0] for r in fig.runs] == ["baseline", "story order, warm-up off", "shuffled, warm-up on"]
    assert len(fig.positions_benched) == 3 and fig.story_positions >= 3
    gens = [r for r in server.requests if r.kind == "generation"]
    judges = [r for r in server.requests if r.kind == "judge"]
    assert len(gens) == 3 * 3 and len(judges) == sum(r.judge_requests for r in fig.runs)
    assert all(r.body["stream"] is True for r in gens + judges)
    for r in fig.runs:
        assert r.failed == 0 and r.errors == []
        assert r.generation_requests == 3 and r.judge_requests == 3 * N  # the test server's endings are never empty
        assert r.gen_tok_s > 0 and r.judge_req_s > 0 and r.mean_ending_tokens > 0
        for lane in ("generation", "judge"):
            assert _filled(r.ttft[lane]) and _filled(r.latency[lane])
            assert r.ttft[lane].p50 <= r.latency[lane].p99
            assert 0 < r.cached_token_rate[lane] <= 1
        (url, sf), = r.servers.items()
        assert url == server.base_url and sf.roles == ["generation", "judge"] and sf.metrics_available
        assert 0 < sf.prefix_cache_hit_rate <= 1
    # Δ of the counters over the runs add up to what the server counted in all.
    m = server.metrics()
    assert sum(r.servers[server.base_url].prefix_cache_hits for r in fig.runs) == m["prefix_cache_hits"]
    assert sum(r.servers[server.base_url].prefix_cache_queries for r in fig.runs) == m["prefix_cache_queries"]
    base = fig.runs[0]
    assert fig.gen_tok_s == base.gen_tok_s and fig.judge_req_s == base.judge_req_s
    per_story = (base.generation_seconds + base.judge_seconds) / 3 * fig.story_positions
    assert fig.seconds_per_story == pytest.approx(per_story)
    assert fig.usd_per_story == pytest.approx(per_story / 3600 * 2.5)
    assert fig.usd_per_100_stories == pytest.approx(100 * fig.usd_per_story)
    # Each run's prompts carry its own tag: no run finds another's in the prefix cache.
    tags = {g.body["messages"][0]["content"].split("]")[0] for g in gens}
    assert len(tags) == 3 and all(t.startswith("[bench ") for t in tags)
    assert {t.rsplit(" ", 1)[1] for t in tags} == {"0", "1", "2"}
    # ... nor another bench's: a second bench gets other tags.
    bench(_cfg(server, tmp_path), corpus, positions=1, variants=False)
    later = {r.body["messages"][0]["content"].split("]")[0] for r in server.requests if r.kind == "generation"}
    assert len(later - tags) == 1


def test_bench_without_streaming_sends_plain_requests(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    fig = bench(_cfg(server, tmp_path), corpus, positions=2, variants=False, stream=False)
    r = fig.runs[0]
    assert r.failed == 0 and r.generation_requests == 2 and r.judge_requests == 2 * N
    assert all("stream" not in q.body for q in server.requests if q.kind in ("generation", "judge"))
    assert r.ttft["generation"].count == 0 and _filled(r.latency["generation"]) and r.gen_tok_s > 0


def test_bench_failures_are_counted_not_raised(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    server.fail_next("503", times=2)
    fig = bench(_cfg(server, tmp_path), corpus, positions=2, variants=False)
    assert len(fig.runs) == 1 and fig.failed == 2
    assert all("503" in e for e in fig.runs[0].errors)


def test_bench_save_feeds_estimate(server, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 2)
    saved = tmp_path / "bench.json"
    common = ["--base-url", server.base_url, "--model", "test-gen", "--endings", str(N), "--no-progress",
              "--cache", str(tmp_path / "cache")]
    assert main(["bench", "--corpus", str(corpus), "--positions", "2", "--no-variants", "--gpu-hour-usd", "4",
                 "--save", str(saved), *common]) == 0
    out = capsys.readouterr().out
    assert "generation output tok/s" in out and "per 100 stories" in out
    fig = load_figures(saved)
    assert fig.gen_tok_s > 0 and fig.gpu_hour_usd == 4
    chats = server.count(path=CHAT_PATH)
    assert main(["estimate", str(corpus), "--bench", str(saved), "--json", str(tmp_path / "e.json"), *common]) == 0
    assert server.count(path=CHAT_PATH) == chats  # estimate sends no chat request
    est = json.loads((tmp_path / "e.json").read_text())
    assert est["throughput"]["source"] == str(saved) and est["ending_tokens"] == fig.mean_ending_tokens
    gen_h = est["generation_to_send"] * N * fig.mean_ending_tokens / fig.gen_tok_s / 3600
    judge_h = est["judge_to_send"] / fig.judge_req_s / 3600
    assert est["gpu_hours"]["total"] == pytest.approx(gen_h + judge_h)
    assert est["usd"] == pytest.approx((gen_h + judge_h) * 4)
    (tmp_path / "bad.json").write_text('{"gen_tok_s": "fast"}')
    with pytest.raises(ConfigError, match="bad.json"):
        load_figures(tmp_path / "bad.json")


def test_stream_matches_the_plain_answer_and_reports_errors(server):
    msgs = [{"role": "system", "content": "You are a fiction writer."}, {"role": "user", "content": "Go on."}]
    req = ChatRequest(model="test-gen", messages=msgs, n=3, seed=5, max_tokens=20)

    async def go():
        async with Client() as c:
            plain = await c.chat(c.server(server.base_url), req)
            streamed = await c.chat_stream(c.server(server.base_url), req)
            with pytest.raises(RefusedError) as e:  # every request to it would be refused alike
                await c.chat_stream(c.server(server.base_url), msgspec.structs.replace(req, model="nope"))
            assert e.value.status == 404 and e.value.missing == "model"
            assert await c.get_text(server.base_url, "/nowhere") is None
            return plain, streamed

    plain, streamed = asyncio.run(go())
    assert streamed.texts == plain.texts == expected_endings(msgs, 3, 5)
    assert streamed.usage.prompt_tokens == plain.usage.prompt_tokens
    assert streamed.usage.completion_tokens == plain.usage.completion_tokens
    assert 0 < streamed.ttft <= streamed.seconds


def test_score_request_bytes_are_unchanged():
    # The streaming fields are left out unless set, so score's bodies and keys stay as they were.
    req = ChatRequest(model="m", messages=[{"role": "user", "content": "x"}], n=2, seed=1)
    assert msgspec.json.encode(req) == b'{"model":"m","messages":[{"role":"user","content":"x"}],"n":2,"seed":1}'
    assert set(req.key_fields()) == {"model", "messages", "n", "seed"}


def test_bench_positions_flag_is_checked(server, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    with pytest.raises(SystemExit) as e:  # the command line refuses it first
        main(["bench", "--corpus", str(corpus), "--positions", "0", *_flags(_cfg(server, tmp_path))])
    assert e.value.code == 2 and "--positions" in capsys.readouterr().err
    # and the pipeline itself, for whatever else hands it the options (the unit on purpose)
    from tension.core.config import load_config
    from tension.core.pipelines.bench import BenchOptions, run_bench

    with pytest.raises(ConfigError, match="--positions"):
        asyncio.run(run_bench(load_config(None, _cfg(server, tmp_path)), corpus, BenchOptions(positions=0)))


def test_bench_over_replicas_gives_each_its_share_and_its_figures(server, tmp_path):
    from tension.testing.openai_server import LoopbackServer

    with LoopbackServer(model=["test-gen", "test-judge"]) as other:
        urls = [server.base_url, other.base_url]
        corpus = make_corpus(tmp_path / "c.jsonl", 1)
        fig = bench(_cfg(server, tmp_path, base_url=",".join(urls)), corpus,
                    positions=4, variants=False, gpu_hour_usd=1.0)
        r = fig.runs[0]
        assert r.failed == 0 and fig.base_url == ",".join(urls)
        assert list(r.servers) == urls
        for srv, url in ((server, server.base_url), (other, other.base_url)):
            sf = r.servers[url]
            seen = [q for q in srv.requests if q.path == CHAT_PATH]
            # positions are dealt out in turn: 2 of 4 each, with their n judge requests
            assert sf.requests == len(seen) == 2 * (1 + N)
            assert sf.roles == ["generation", "judge"] and sf.output_tokens > 0
            assert sf.metrics_available and 0 < sf.prefix_cache_hit_rate <= 1


def test_bench_honours_the_retry_budget(server, tmp_path):
    """--retries is the client's attempts per request (plain requests are retried;
    a streamed one never is, as a benchmark reports what the server did)."""
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    opts = {"positions": 2, "variants": False, "stream": False}
    server.fail_next("503", times=2)
    fig = bench(_cfg(server, tmp_path, retries=1), corpus, **opts)  # one attempt: both faults are failures
    assert fig.failed == 2 and all("503" in e for e in fig.runs[0].errors)
    server.fail_next("503", times=2)
    fig = bench(_cfg(server, tmp_path, retries=5, retry_seconds=30), corpus, **opts)
    assert fig.failed == 0 and fig.runs[0].generation_requests == 2 and fig.runs[0].judge_requests == 2 * N
    assert server.pending_faults() == 0


def test_sigterm_stops_bench_cleanly(server, tmp_path):
    server.delay = 0.5
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    code, err = run_until_sigterm(
        ["bench", "--corpus", str(corpus), "--base-url", server.base_url, "--model", "test-gen", "--endings",
         str(N), "--positions", "4", "--no-progress", "--cache", str(tmp_path / "cache")],
        lambda: server.count(path=CHAT_PATH) >= 1)
    assert code == 130, err
    assert "interrupted" in err and "Traceback" not in err


def test_the_api_bench_is_the_command_lines_verb(server, tmp_path):
    """`tension.bench` (issue 59: bench's door in the API, which the CLI's verb calls):
    settings as keywords, the figures it saves, the text the command prints."""
    import tension

    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    saved = tmp_path / "b.json"
    r = tension.bench(corpus, positions=2, variants=False, stream=False, save=saved, **_cfg(server, tmp_path))
    assert isinstance(r, tension.BenchResult) and r.exit_status == 0 and r.saved == str(saved)
    assert r.figures.runs[0].failed == 0 and r.figures.gen_tok_s > 0
    assert load_figures(saved).runs[0].generation_requests == r.figures.runs[0].generation_requests == 2
    assert "generation output tok/s" in r.text
    with pytest.raises(ConfigError, match="nope"):  # a keyword that is no setting, named
        tension.bench(corpus, positions=1, nope=1, **_cfg(server, tmp_path))
