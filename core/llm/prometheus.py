"""Reading a server's ``/metrics`` (Prometheus text format 0.0.4), for the
counters `tension-run bench` and the replica router take deltas of.

vLLM names its prefix-cache counters ``vllm:prefix_cache_queries_total`` and
``vllm:prefix_cache_hits_total`` (tokens), one sample per engine and model label
set; versions before the rename used ``vllm:gpu_prefix_cache_*``. A counter is the
sum of its samples over every label set.
"""

from __future__ import annotations

import math
import re

__all__ = ["parse_samples", "by_label", "counter", "prefix_cache_delta", "prefix_cache_hit_rate", "PREFIX_CACHE_HITS",
           "PREFIX_CACHE_QUERIES"]

PREFIX_CACHE_HITS = ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits")
PREFIX_CACHE_QUERIES = ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries")

# name, optional {labels} (label values may hold spaces, braces and escaped quotes),
# value, optional timestamp
_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)(?:\s+-?\d+)?\s*$')


_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_samples(text: str) -> dict[str, float]:
    """Metric name → sum of its samples over all label sets. Comments, blank
    lines and lines that are not samples are skipped; NaN samples are ignored."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def by_label(text: str, name: str, label: str, where: dict[str, str] | None = None) -> dict[str, float]:
    """The samples of metric `name` by the value of its label `label` (e.g. the
    router's ``vllm_router_processed_requests_total{worker="…"}`` per worker),
    counting only samples whose labels include every pair of `where`."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if m is None or m.group(1) != name or m.group(2) is None:
            continue
        labels = dict(_LABEL.findall(m.group(2)))
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if label in labels and not math.isnan(value) and all(labels.get(k) == v for k, v in (where or {}).items()):
            out[labels[label]] = out.get(labels[label], 0.0) + value
    return out


def counter(samples: dict[str, float], names: tuple[str, ...] | str) -> float | None:
    """The first of `names` present, as written or with the ``_total`` suffix
    counters carry in the text format (OpenMetrics names them without it)."""
    for name in (names,) if isinstance(names, str) else names:
        base = name.removesuffix("_total")
        for candidate in (base + "_total", base):
            if candidate in samples:
                return samples[candidate]
    return None


def prefix_cache_delta(start: dict[str, float] | None, end: dict[str, float] | None
                       ) -> tuple[float, float] | None:
    """(Δ hits, Δ queries) of the prefix cache, in tokens, between two readings of
    /metrics; None when the end reading has no query counter. A missing start
    reading counts from zero (since the server started), and so does one larger
    than the end: the server restarted and reset its counters."""
    if end is None:
        return None
    q1 = counter(end, PREFIX_CACHE_QUERIES)
    if q1 is None:
        return None
    h1 = counter(end, PREFIX_CACHE_HITS) or 0.0
    q0 = h0 = 0.0
    s_q = counter(start, PREFIX_CACHE_QUERIES) if start is not None else None
    if start is not None and s_q is not None and s_q <= q1:
        q0, h0 = s_q, counter(start, PREFIX_CACHE_HITS) or 0.0
    return h1 - h0, q1 - q0


def prefix_cache_hit_rate(start: dict[str, float] | None, end: dict[str, float] | None) -> float | None:
    """Δ hits / Δ queries between two readings (`prefix_cache_delta`); None without
    the counters or without a query in between."""
    delta = prefix_cache_delta(start, end)
    if delta is None or delta[1] <= 0:
        return None
    return delta[0] / delta[1]
