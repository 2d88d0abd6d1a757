"""Computed prompt tokens against the ideal (docs/cost.md): the ratio `score`'s
run.json (`prompt_tokens.per_unit`) and `bench` (its table and `--save`) report per
generated position and per judged ending, and why a server gives none.

The computed figure is the server's own: Δ ``vllm:prefix_cache_queries`` − Δ
``vllm:prefix_cache_hits`` on /metrics, which counts every copy of an n > 1
request. Only vLLM publishes those counters; llama.cpp's /metrics has no prefix-cache
counter and a proxy (LiteLLM) publishes its own, so there the figure is null with
the reason, never an estimate.
"""

from __future__ import annotations

__all__ = ["over_ideal", "per", "NOT_VLLM", "NOTHING_SENT", "NO_METRICS", "NO_COUNTERS", "SHARED", "NO_IDEAL"]

NOT_VLLM = ("the server does not say it is vLLM (/v1/models owned_by), so its /metrics was not read; "
            "llama.cpp and proxies publish no prefix-cache counters")
NOTHING_SENT = "nothing was sent: every answer came from the cache"
NO_METRICS = "the server has no /metrics (only vLLM's prefix-cache counters give this figure)"
NO_COUNTERS = ("the server's /metrics has no prefix-cache counters (vllm:prefix_cache_queries); llama.cpp and "
               "proxies publish none")
SHARED = "one server for both roles: its counters do not split by role (see per_unit.all)"
NO_IDEAL = "the ideal is unknown: the prompts' fixed texts could not be counted"


def per(x: float | None, units: float) -> float | None:
    """`x` per unit, rounded for the record; None without `x` or without a unit."""
    return round(x / units, 3) if x is not None and units else None


def over_ideal(computed: float | None, ideal: float | None) -> float | None:
    """computed / ideal (1.0 is the ideal: every shared prefix prefilled once)."""
    return round(computed / ideal, 4) if computed is not None and ideal else None
