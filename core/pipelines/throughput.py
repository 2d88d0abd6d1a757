"""What the servers do per second and what their GPU-hour costs (`Throughput`), from the
flags or from the figures `tension-run bench --save FILE` wrote: what `estimate`, `subsample`
and `precision` turn endings and requests into GPU-hours and money with."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec

from tension.core.errors import ConfigError

__all__ = ["Throughput", "endings_gpu_hours", "throughput_from_bench", "check_throughput"]


class Throughput(msgspec.Struct, kw_only=True):
    """What the servers do per second, and the price of their GPU-hour."""

    gen_tok_s: float | None = None  # generation output tokens per second
    judge_req_s: float | None = None  # judge requests per second
    gpu_hour_usd: float | None = None
    ending_tokens: float | None = None  # E; None: max_tokens (an upper bound)
    source: str = "flags"  # "flags" or the bench file they came from
    warnings: list[str] = []  # figures no model or server can produce (bench_figures.py `implausible`)


def endings_gpu_hours(endings: float, ending_tokens: float, thr: Throughput) -> float | None:
    """GPU-hours of `endings` endings of `ending_tokens` tokens each, each judged once
    (estimate.py's COST_FORMULA with the endings in place of requests × n); None without a throughput."""
    if not thr.gen_tok_s or not thr.judge_req_s:
        return None
    return endings * ending_tokens / thr.gen_tok_s / 3600 + endings / thr.judge_req_s / 3600


def throughput_from_bench(path: str | Path, gpu_hour_usd: float | None) -> Throughput:
    """The figures `tension-run bench --save FILE` wrote."""
    from tension.core.pipelines.bench_figures import implausible, load_figures

    fig = load_figures(path)
    if fig.failed:  # a figure from answers that failed, or were cut short, is not the server's (H3)
        raise ConfigError(f"--bench {path}: {fig.failed} of its requests failed, so its figures are not what the "
                          "server does; run `tension-run bench` again until it reports 0 failed requests "
                          "(its errors say why: try --no-stream)")
    return Throughput(gen_tok_s=fig.gen_tok_s, judge_req_s=fig.judge_req_s,
                      gpu_hour_usd=gpu_hour_usd if gpu_hour_usd is not None else fig.gpu_hour_usd,
                      ending_tokens=fig.mean_ending_tokens, source=str(path),
                      warnings=[f"--bench {path}: {w}" for w in implausible(fig)])


def check_throughput(thr: Throughput) -> None:
    for name in ("gen_tok_s", "judge_req_s", "gpu_hour_usd", "ending_tokens"):
        v = getattr(thr, name)
        if v is not None and not (math.isfinite(v) and v > 0):
            raise ConfigError(f"--{name.replace('_', '-')}: expected a number > 0, got {v!r}")
