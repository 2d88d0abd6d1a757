"""The prefix-cache model against the real embedded vLLM server (slow): score's
defaults at a small n on one short story, the server's /metrics hit rate against
the model's replay of the same run, at the embedded server's default block size
(32; bench/prefix_cache.py runs all three workloads at 32 and 128, bench/RESULTS.md
has the table)."""

from __future__ import annotations

import pytest

from tension.core.serving.settings import EmbeddedSettings
from tension.testing.prefix_check import WORKLOADS, run_workload, server_blocks

pytestmark = pytest.mark.slow


def test_the_model_predicts_the_servers_hit_rate_within_3_points(vllm_server, tmp_path):
    block, blocks = server_blocks(vllm_server.log)
    assert block == EmbeddedSettings().block_size == 32  # the default the demo and `serve --embedded` use
    small = {**WORKLOADS["small"], "words": (150, 180)}  # the smallest: one story, n = 4
    row = run_workload("small", vllm_server.url, block, blocks, tmp_path, workload=small)
    assert row["status"] == "complete"
    assert row["positions"] >= 4
    # the same prompts: the tokens the server looked up are the ones the model replayed
    assert row["predicted_queries"] == pytest.approx(row["measured_queries"], rel=1e-3)
    assert abs(row["points_off"]) <= 3, row
