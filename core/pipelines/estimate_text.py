"""The table `tension-run estimate` prints (pipelines/estimate.py computes it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tension.core.pipelines.estimate import Estimate

__all__ = ["format_estimate"]


def format_estimate(e: Estimate) -> str:
    """The table `tension-run estimate` prints."""
    def row(label: str, value: str) -> str:
        return f"{label:<44} {value}"

    pt = e.prompt_tokens
    lines = [
        "=" * 60,
        f"estimate of {e.corpus}  (tokens: {e.tokenizer}"
        + (", a rough count in whitespace words" if e.tokenizer == "words" else "") + ")",
        "=" * 60,
        row("stories kept / skipped (word filter)", f"{e.stories_kept:,} / {e.stories_skipped:,}"),
    ]
    if e.input_errors:
        lines.append(row("records with errors", f"{len(e.input_errors):,}"))
    if e.stories_failed:
        lines.append(row("stories the server could not count", f"{len(e.stories_failed):,}"))
    lines += [
        row("stories without a position", f"{e.stories_without_positions:,}"),
        row("positions (skipped: prompt over context)", f"{e.positions:,} ({e.positions_too_long:,})"),
        row("generation requests (n endings each)", f"{e.generation_requests:,} (n = {e.endings_per_position})"),
        *_http_rows(e, row),
        row("judge requests (≤, one per ending)", f"{e.judge_requests:,}"),
        row("prompt tokens, generation: sent", f"{pt['generation'].sent:,}"),
        row("                  computed with prefix cache", f"{pt['generation'].computed:,}"),
        row("prompt tokens, judge: sent", f"{pt['judge'].sent:,}"),
        row("                  computed with prefix cache", f"{pt['judge'].computed:,}"),
        *_prefix_rows(e, row),
        row("tokens per ending assumed (E)", f"{e.ending_tokens:g} ({_e_source(e)})"),
        row("output tokens, bound: generation / judge",
            f"≤ {e.output_tokens_max['generation']:,} / ≤ {e.output_tokens_max['judge']:,} "
            "(every ending at max_tokens, every verdict at judge_max_tokens)"),
    ]
    if e.throughput is not None:
        lines += [f"warning: {w}" for w in e.throughput.warnings]
    if e.cache_checked:
        lines += [
            row("cache: generation requests found", f"{e.generation_cached:,} of {e.generation_requests:,}"),
            row("cache: judge requests found", f"{e.judge_cached:,} of {e.judge_checkable:,} checkable"),
        ]
    else:
        lines.append(row("cache", "not checked (give --model to name the cache keys)"))
    http = e.choices.http_to_send if e.choices is not None and e.choices.max_n is not None else None
    lines.append(row("to send: generation / judge", f"{e.generation_to_send:,} / {e.judge_to_send:,}"
                     + (f" ({http:,} generation HTTP requests)" if http is not None else "")))
    thr = e.throughput
    if e.gpu_hours is not None and thr is not None:
        lines += [
            row("throughput" + (f" (from {thr.source})" if thr.source != "flags" else ""),
                f"{thr.gen_tok_s:,.1f} gen tok/s, {thr.judge_req_s:,.2f} judge req/s"),
            *([row("GPU-hours of prefill: predicted / ideal",
                   f"{e.gpu_hours['prefill']:.3f} / {e.gpu_hours['prefill_ideal']:.3f} (in the total)")]
              if "prefill" in e.gpu_hours else []),
            row("GPU-hours: generation / judge / total",
                f"{e.gpu_hours['generation']:.3f} / {e.gpu_hours['judge']:.3f} / {e.gpu_hours['total']:.3f}"),
        ]
        if e.usd is not None:
            lines.append(row(f"cost at ${thr.gpu_hour_usd:g}/GPU-hour", f"${e.usd:,.2f}"))
        lines.append(f"formula: {e.formula}")
    else:
        lines.append("GPU-hours: give --gen-tok-s and --judge-req-s (or --bench FILE from `tension-run bench`)")
    if (tc := e.tokens_usd) is not None:
        def price(p: float | None, what: str) -> str:
            return f"${p:g} per million {what}" if p is not None else f"{what} not priced"

        lines.append(row("tokens to send: prompt / generated (at E)", f"{tc.input_tokens:,} / {tc.output_tokens:,} "
                         f"(endings at E = {e.ending_tokens:g} tokens, verdicts at judge_max_tokens)"))
        if not tc.chunks_known:
            lines.append(row("  prompt tokens: a lower bound", "the servers' n limit is not known: a generation "
                             "prompt is counted once, though a server that takes n in chunks is sent it once per "
                             "chunk"))
        lines.append(row("cost of the tokens to send", f"${tc.usd:,.2f} (at "
                         f"{price(tc.input_usd_per_mtok, 'prompt tokens')}, "
                         f"{price(tc.output_usd_per_mtok, 'generated tokens')})"))
    if e.adaptive is not None:
        from tension.core.pipelines.estimate_adaptive import adaptive_lines

        lines += adaptive_lines(e.adaptive)
    if e.precision is not None:
        from tension.core.pipelines.estimate_precision import precision_lines

        lines += precision_lines(e.precision)
    elif e.precision_note is not None:
        lines.append(f"endings by the question: not available ({e.precision_note})")
    lines.append(f"({e.seconds:.1f} s)")
    return "\n".join(lines)


def _http_rows(e: Estimate, row: Callable[[str, str], str]) -> list[str]:
    """The HTTP requests the generation requests take on these servers, where they
    take fewer choices a request than n; where it is not known, that it is not."""
    c = e.choices
    if c is None or e.endings_per_position <= 1:
        return []
    if not c.known:
        return [row("  HTTP requests for them", f"not known ({c.how}; `score` learns it from the first answers): "
                    f"{e.generation_requests:,} if the servers answer n whole, up to "
                    f"{e.generation_requests * e.endings_per_position:,} if one choice a request "
                    "(transformers serve, llama-cpp-python)")]
    if c.max_n is None or c.http_requests is None:
        return []
    return [row("  HTTP requests for them", f"{c.http_requests:,} ({c.per_position} per position, in chunks of "
                f"{c.max_n}: {c.how})")]


def _e_source(e: Estimate) -> str:
    """Where E came from: the bench file, the flag, or max_tokens (a bound)."""
    thr = e.throughput
    if thr is None or thr.ending_tokens is None:
        return "max_tokens: a bound; --ending-tokens or --bench FILE gives a measured one"
    return "measured by `tension-run bench`, " + thr.source if thr.source != "flags" else "--ending-tokens"


def _prefix_rows(e: Estimate, row: Callable[[str, str], str]) -> list[str]:
    """The prefix-cache model's lines: per role, the hit rate and the prompt tokens
    the servers compute, beside the ideal's."""
    pc = e.prefix_cache
    if pc is None:
        return []
    kv = " / ".join(f"{v:,}" for v in pc.kv_blocks.values())
    where = f"{pc.profile}: " if pc.profile else ""
    out = [row("prefix cache model", f"{where}blocks of {pc.block_size}, KV {kv} blocks "
               + ("(generation / judge server)" if len(pc.kv_blocks) > 1 else "(one server)"))]
    for role, r in pc.roles.items():
        out.append(row(f"  {role}: hit rate, computed (× ideal)",
                       f"{r.hit_rate:.1%}, {r.computed:,} ({r.over_ideal:.2f}× of {r.ideal_computed:,})"))
    over = pc.computed / pc.ideal_computed if pc.ideal_computed else float("nan")
    out.append(row("  all: hit rate, computed (× ideal)",
                   f"{pc.hit_rate:.1%}, {pc.computed:,} ({over:.2f}× of {pc.ideal_computed:,}); "
                   f"model {pc.seconds:.1f} s"))
    if pc.never_fit:
        out.append(row("  requests larger than a KV cache (left out)",
                       f"{pc.never_fit:,}: give the servers more KV blocks than the longest prompt needs"))
    return out
