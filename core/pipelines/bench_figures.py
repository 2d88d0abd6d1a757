"""The figures of `tension-run bench`: what ``--save`` writes (JSON), what
`tension-run estimate --bench FILE` reads, and the table the command prints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import numpy as np

from tension.core.errors import ConfigError
from tension.core.inputs.jsonl import atomic_write
from tension.core.run.record import RunHeader

__all__ = ["Percentiles", "ServerFigures", "RoleTokens", "RunFigures", "BenchFigures", "percentiles", "format_bench",
           "save_figures", "load_figures", "implausible", "FIGURES_VERSION"]

FIGURES_VERSION = 1
# Throughputs no server reaches (issue 58 S7): an H200 serving an 8B model does ≈ 10⁴ output
# tok/s and 10²–10³ judge req/s; a figure 100× over those is a server's usage or clock gone wrong
MAX_GEN_TOK_S = 1_000_000.0
MAX_JUDGE_REQ_S = 100_000.0


class Percentiles(msgspec.Struct, kw_only=True):
    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class ServerFigures(msgspec.Struct, kw_only=True):
    """One server (keyed by its base URL; replicas will each get one)."""

    roles: list[str]
    requests: int = 0  # answers it gave in this run
    output_tokens: int = 0
    metrics_available: bool = False
    prefix_cache_queries: float | None = None  # Δ over the run, tokens
    prefix_cache_hits: float | None = None
    prefix_cache_hit_rate: float | None = None


class RoleTokens(msgspec.Struct, kw_only=True):
    """One role's prompt tokens in a run against the ideal (over_ideal.py): per generated
    position (generation) or per judged ending (judge)."""

    unit: str  # "position" or "judged ending"
    units: int
    ideal: float | None = None  # the ideal's prompt tokens per unit (every shared prefix once)
    computed: float | None = None  # the servers' per unit: Δ prefix_cache_queries − Δ hits over the role's phase
    over_ideal: float | None = None  # computed / ideal
    why_none: str | None = None  # why `computed` is null (no counters: llama.cpp, proxies)


class RunFigures(msgspec.Struct, kw_only=True):
    name: str
    order: str  # "story" or "shuffled"
    warm_judge: bool
    generation_requests: int = 0
    judge_requests: int = 0
    failed: int = 0
    errors: list[str] = []
    plain: int = 0  # streamed requests answered with a plain JSON body (the server ignores `stream`): no ttft
    generation_seconds: float = 0.0
    judge_seconds: float = 0.0
    generation_output_tokens: int = 0
    gen_tok_s: float | None = None
    judge_req_s: float | None = None
    mean_ending_tokens: float | None = None
    ttft: dict[str, Percentiles] = {}  # "generation", "judge"; seconds
    latency: dict[str, Percentiles] = {}  # end to end, seconds
    # from usage.prompt_tokens_details.cached_tokens, over the answers that report it; None where none did
    cached_token_rate: dict[str, float | None] = {}
    servers: dict[str, ServerFigures] = {}
    prompt_tokens: dict[str, RoleTokens] = {}  # "generation", "judge"


class BenchFigures(msgspec.Struct, kw_only=True):
    """What `--save` writes and `estimate --bench` reads (the baseline's figures on top)."""

    version: int = FIGURES_VERSION
    created: float
    corpus: str
    story: str
    story_positions: int
    positions_benched: list[int]
    base_url: str
    judge_base_url: str
    model: str
    judge_model: str
    endings: int
    max_tokens: int
    gen_concurrency: int
    judge_concurrency: int
    seed: int
    gen_tok_s: float | None
    judge_req_s: float | None
    mean_ending_tokens: float | None
    seconds_per_story: float | None
    gpu_hour_usd: float | None = None
    usd_per_story: float | None = None
    usd_per_100_stories: float | None = None
    failed: int = 0
    stopped: str | None = None  # why the bench stopped after its first run (a failure there: no figure)
    runs: list[RunFigures] = []
    run: RunHeader | None = None  # the run record header every verb shares (core/run/record.py)


def percentiles(xs: list[float]) -> Percentiles:
    if not xs:
        return Percentiles()
    a = np.asarray(xs, dtype=float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return Percentiles(count=len(xs), mean=float(a.mean()), p50=float(p50), p90=float(p90), p99=float(p99))


_encoder = msgspec.json.Encoder()


def save_figures(path: str | Path, fig: BenchFigures) -> None:
    atomic_write(path, msgspec.json.format(_encoder.encode(fig), indent=2) + b"\n")


def load_figures(path: str | Path) -> BenchFigures:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"--bench {path}: cannot read it: {e.strerror or e}") from e
    try:
        return msgspec.json.decode(data, type=BenchFigures)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ConfigError(f"--bench {path}: not a file written by `tension-run bench --save`: {e}") from e


def _ms(p: Percentiles) -> str:
    if not p.count or p.p50 is None or p.p90 is None or p.p99 is None:
        return "–"
    return f"{p.p50 * 1e3:,.0f} / {p.p90 * 1e3:,.0f} / {p.p99 * 1e3:,.0f}"


def _rate(x: float | None, fmt: str = "{:.1%}") -> str:
    return "–" if x is None else fmt.format(x)


def format_bench(f: BenchFigures) -> str:
    """The report `tension-run bench` prints: configuration, then one column per run."""
    def row(label: str, values: list[str]) -> str:
        return f"{label:<34}" + "".join(f"{v:>26}" for v in values)

    lines = [
        "=" * 60,
        f"bench: {f.model} at {f.base_url}; judge {f.judge_model} at {f.judge_base_url}",
        f"story {f.story!r} of {f.corpus}: positions k = {f.positions_benched} (the story has {f.story_positions}); "
        f"n = {f.endings}, max_tokens = {f.max_tokens}; concurrency {f.gen_concurrency} / "
        f"{f.judge_concurrency}; seed {f.seed}",
        "=" * 60,
        row("", [r.name.split(":")[0] if ":" in r.name else r.name for r in f.runs]),
        row("order / judge warm-up", [f"{r.order} / {'on' if r.warm_judge else 'off'}" for r in f.runs]),
        row("generation requests / s", [f"{r.generation_requests} / {r.generation_seconds:.2f}" for r in f.runs]),
        row("generation output tok/s", [_rate(r.gen_tok_s, "{:,.1f}") for r in f.runs]),
        row("mean tokens per ending", [_rate(r.mean_ending_tokens, "{:.1f}") for r in f.runs]),
        row("judge requests / s", [f"{r.judge_requests} / {r.judge_seconds:.2f}" for r in f.runs]),
        row("judge req/s", [_rate(r.judge_req_s, "{:,.2f}") for r in f.runs]),
        row("TTFT gen p50/p90/p99 (ms)", [_ms(r.ttft.get("generation", Percentiles())) for r in f.runs]),
        row("TTFT judge p50/p90/p99 (ms)", [_ms(r.ttft.get("judge", Percentiles())) for r in f.runs]),
        row("latency gen p50/p90/p99 (ms)", [_ms(r.latency.get("generation", Percentiles())) for r in f.runs]),
        row("latency judge p50/p90/p99 (ms)", [_ms(r.latency.get("judge", Percentiles())) for r in f.runs]),
        row("cached_tokens share gen / judge", [
            f"{_rate(r.cached_token_rate.get('generation'))} / {_rate(r.cached_token_rate.get('judge'))}"
            for r in f.runs]),
    ]
    urls = list(f.runs[0].servers) if f.runs else []
    for url in urls:
        if len(urls) > 1:
            lines.append(row(f"requests / output tok, {'+'.join(f.runs[0].servers[url].roles)}",
                             [f"{r.servers[url].requests} / {r.servers[url].output_tokens}" for r in f.runs]))
        lines.append(row(f"prefix-cache hits, {'+'.join(f.runs[0].servers[url].roles)}",
                         [_rate(r.servers[url].prefix_cache_hit_rate) if r.servers[url].metrics_available
                          else "no /metrics" for r in f.runs]))
        lines.append(f"    ({url}: Δ vllm:prefix_cache_hits / Δ vllm:prefix_cache_queries)")
    lines += _over_ideal_rows(f, row)
    plain = sum(r.plain for r in f.runs)
    if plain:
        lines.append(f"note: {plain} streamed requests were answered with a plain JSON body (the server ignores "
                     "`stream`): time to first token was not measured for them (–); their choices and usage are "
                     "the figures (or use --no-stream, which asks as score does)")
    lines.append(row("failed requests", [str(r.failed) for r in f.runs]))
    for r in f.runs:
        for e in r.errors:
            lines.append(f"  error ({r.name}): {e}")
    if f.stopped:
        lines.append(f"bench stopped after its first run: {f.stopped}")
    if f.seconds_per_story is not None:
        lines.append(f"seconds per story ({f.story_positions} positions, baseline): {f.seconds_per_story:,.1f}")
    if f.usd_per_story is not None:
        lines.append(f"cost at ${f.gpu_hour_usd:g}/GPU-hour: ${f.usd_per_story:.4f} per story, "
                     f"${f.usd_per_100_stories:.2f} per 100 stories "
                     "(= seconds per story / 3600 × price; one GPU serving both models)")
    lines += [f"warning: {w}" for w in implausible(f)]
    return "\n".join(lines)


def implausible(f: BenchFigures) -> list[str]:
    """The figures no model or server can produce, each said with what it means (issue
    58 S7: a stub's fixed usage gave 0.05 tokens an ending, and `estimate` took it)."""
    out = []
    e = f.mean_ending_tokens
    if e is not None and e < 1:
        out.append(f"mean tokens per ending {e:.3g}: an ending is at least 1 token, so the servers' usage does not "
                   "count the endings (a fixed or missing usage?); GPU-hours estimated from it are too low")
    elif e is not None and e > f.max_tokens:
        out.append(f"mean tokens per ending {e:,.1f} is over max_tokens {f.max_tokens}: no ending is that long, so "
                   "the servers' usage counts more than the endings")
    if f.gen_tok_s is not None and f.gen_tok_s > MAX_GEN_TOK_S:
        out.append(f"generation output tok/s {f.gen_tok_s:,.0f} is over {MAX_GEN_TOK_S:,.0f}, which no server "
                   "reaches: the servers' usage is wrong")
    if f.judge_req_s is not None and f.judge_req_s > MAX_JUDGE_REQ_S:
        out.append(f"judge req/s {f.judge_req_s:,.0f} is over {MAX_JUDGE_REQ_S:,.0f}, which no server reaches")
    over = sorted({lane for r in f.runs for lane, rate in r.cached_token_rate.items() if rate is not None and rate > 1})
    if over:
        out.append(f"the servers report more cached prompt tokens than prompt tokens ({' and '.join(over)}: "
                   "cached_tokens share over 100%): their usage is wrong, and so are the shares above")
    return out


def _over_ideal_rows(f: BenchFigures, row: Callable[[str, list[str]], str]) -> list[str]:
    """Computed prompt tokens per unit against the ideal's, and why a figure is missing."""
    lines: list[str] = []
    why: dict[str, str] = {}  # reason -> the first role it was given for
    for role, label in (("generation", "prompt tok / position, computed"),
                        ("judge", "prompt tok / judged ending, comp.")):
        cells = []
        for r in f.runs:
            t = r.prompt_tokens.get(role)
            if t is None or t.computed is None:
                cells.append("–")
                if t is not None and t.why_none:
                    why.setdefault(t.why_none, role)
            elif t.over_ideal is None:
                cells.append(f"{t.computed:,.0f}")
            else:
                cells.append(f"{t.computed:,.0f} = {t.over_ideal:.2f}× ideal")
        lines.append(row(label, cells))
    lines.append("    (Δ vllm:prefix_cache_queries − Δ hits over the phase; ideal: every shared prefix once)")
    lines += [f"    no {role} figure: {reason}" for reason, role in why.items()]
    return lines
