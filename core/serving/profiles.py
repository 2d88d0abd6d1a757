"""Server launch profiles and the settings that go with them.

- ``paper``: the engine configuration of paper 000 (App. C.4–C.5) on one GPU host:
  generator Qwen3-32B and judge Qwen3-8B, bf16, max_model_len 8192 / 16384, prefix
  caching, both on one 141 GB H200. Model paths are settings: nothing is
  downloaded unless the user passes hub names on purpose.
- ``embedded``: the small CPU model; its scoring settings (below) differ from the
  paper's because a 135M model drifts into gibberish at T = 1.2 and, as a judge,
  echoes the candidate instead of answering Y or N.
"""

from __future__ import annotations

import shlex
from typing import Any

import msgspec

__all__ = ["GpuServer", "paper_servers", "paper_replicas", "shell_line",
           "EMBEDDED_SCORE_SETTINGS", "DEMO_SCORE_SETTINGS", "DEMO_KV_CACHE_GIB"]


class GpuServer(msgspec.Struct, frozen=True, kw_only=True):
    role: str  # "generation" or "judge"
    model_path: str  # local folder (or a hub name, if the user chooses to download)
    served_name: str
    port: int
    max_model_len: int
    gpu_memory_utilization: float
    gpu: str = "0"

    def command(self) -> list[str]:
        return ["vllm", "serve", self.model_path,
                "--served-model-name", self.served_name,
                "--host", "0.0.0.0", "--port", str(self.port),
                "--dtype", "bfloat16",
                "--max-model-len", str(self.max_model_len),
                "--gpu-memory-utilization", f"{self.gpu_memory_utilization:g}",
                "--enable-prefix-caching", "--enable-prompt-tokens-details",
                "--max-num-seqs", "512" if self.role == "judge" else "256"]

    def env(self) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": self.gpu, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}


def paper_servers(generator_path: str = "/models/Qwen3-32B", judge_path: str = "/models/Qwen3-8B",
                  gen_port: int = 8000, judge_port: int = 8001, gpu: str = "0") -> list[GpuServer]:
    """The paper's two engines on one H200 (141 GB). Weights: Qwen3-32B ≈ 65.5 GB and
    Qwen3-8B ≈ 16.4 GB in bf16; the shares 0.62 + 0.30 = 0.92 (the paper's
    utilisation) leave ≈ 22 GB and ≈ 26 GB of KV cache: the judge's long shared
    continuation prefixes are what its prefix cache must hold."""
    return [
        GpuServer(role="generation", model_path=generator_path, served_name="Qwen/Qwen3-32B", port=gen_port,
                  max_model_len=8192, gpu_memory_utilization=0.62, gpu=gpu),
        GpuServer(role="judge", model_path=judge_path, served_name="Qwen/Qwen3-8B", port=judge_port,
                  max_model_len=16384, gpu_memory_utilization=0.30, gpu=gpu),
    ]


def paper_replicas(n: int, generator_path: str = "/models/Qwen3-32B", judge_path: str = "/models/Qwen3-8B",
                   first_port: int = 8000) -> list[list[GpuServer]]:
    """`n` copies of the paper's setup, one per GPU: replica i runs its generator
    on port first_port + 2i and its judge on first_port + 2i + 1, on GPU i."""
    if n < 1:
        raise ValueError(f"replicas: expected an integer >= 1, got {n}")
    return [paper_servers(generator_path, judge_path, gen_port=first_port + 2 * i,
                          judge_port=first_port + 2 * i + 1, gpu=str(i)) for i in range(n)]


def shell_line(server: GpuServer) -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in server.env().items())
    return f"{env} {shlex.join(server.command())}"


# Scoring settings for the embedded 135M model (docs/embedded.md has the measurements
# behind them). The paper's settings stay the defaults for real models.
EMBEDDED_SCORE_SETTINGS: dict[str, Any] = {
    "temperature": 0.8,
    "max_tokens": 48,
    "endings": 8,
    # Constrained to Y/N the 135M judge answers Y to everything (measured); its
    # first-token Y-vs-N probabilities still separate endings.
    "judge_constraint": "logprobs",
    "judge_max_tokens": 1,
    "gen_concurrency": 4,
    "judge_concurrency": 16,
}

# The demo: one short story, few endings, so it finishes in minutes on 2 cores. Its
# 18 positions (anchors of 18 words or more, of the story's 30 of 10) still draw a
# curve. (A 200-word continuation and 24-token endings would halve the prompt tokens
# too, but then the 135M judge said Y to all 72 endings: a flat curve; docs/embedded.md.)
# The demo's KV space, GiB (`serve --embedded` keeps 4): 23,296 float32 tokens, over twice the
# demo's need of under 10,000, and a quarter of the memory to set up at start (16 % less CPU
# time to /health, measured; docs/embedded.md, "A first run in minutes").
DEMO_KV_CACHE_GIB = 1

DEMO_SCORE_SETTINGS: dict[str, Any] = {
    **EMBEDDED_SCORE_SETTINGS,
    "endings": 4,
    "max_tokens": 32,
    "min_words": 300,
    "min_anchor_words": 18,
    # Seeded, as the README's runs are: every first demo draws the same curve (the same 18
    # no-rates on two runs here), not at random a flat one, as one unseeded fresh-clone demo
    # drew: the 135M judge said Y to all 72 endings (docs/embedded.md).
    "seed": 1,
}
