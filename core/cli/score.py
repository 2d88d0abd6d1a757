"""`score`, `estimate` and `bench`: the verbs whose settings are ScoreConfig."""

from __future__ import annotations

import sys

from tension.core.cli.flags import (
    SERVER_ENV,
    Verb,
    add_settings_flags,
    count,
    fields_in,
    given,
    group_for,
    number,
)
from tension.core.cli.messages import (
    EXIT_FAILED,
    print_answer_warnings,
    print_errors,
    print_replica_events,
    print_stopped,
)
from tension.core.config.score import CONCURRENCY, CORPUS, ENDINGS, JUDGING, SERVERS, ScoreConfig

__all__ = ["VERBS", "cmd_score", "cmd_estimate", "cmd_bench"]

CORPUS_HELP = ("JSON Lines, one object per line (id, text, group?, …), a .csv, .tsv or .parquet file with those "
               "columns, a folder of .txt files (id = file stem) or one .txt file (one story)")


def cmd_score(args) -> int:
    """Score a corpus with the 100-Endings metric against OpenAI-compatible servers.

    Settings: defaults (the paper's) < --config file < flags."""
    from tension.core.api.verbs import score

    summary = score(args.corpus, out=args.out, config=args.config, **given(args, ScoreConfig)).summary
    print_errors(summary.input_errors)
    for f in summary.failures:
        print(f"error: story {f.id!r} failed at {f.stage}: {f.error}", file=sys.stderr)
    for sk in summary.skipped_stories:
        print(f"skipped: story {sk.id!r}: {sk.reason}", file=sys.stderr)
    for sid, why in summary.no_positions.items():
        print(f"warning: story {sid!r} has no position to score ({why}); its statistics are empty",
              file=sys.stderr)
    if summary.too_long:
        print(f"warning: {sum(summary.too_long.values())} positions in {len(summary.too_long)} stories skipped: "
              "their prompt would not fit the generation model's context ("
              + ", ".join(f"{k}: {v}" for k, v in summary.too_long.items()) + ")", file=sys.stderr)
    print_replica_events(summary)
    print_answer_warnings(summary.warnings)
    req = summary.requests
    print(f"{summary.stories} stories ({summary.skipped} skipped by the word filter), "
          f"{summary.positions} positions; requests sent: {req.get('generation', 0)} generation, "
          f"{req.get('judge', 0)} judge, {req.get('tokenize', 0)} tokenize; cache hits: "
          + ", ".join(f"{v} {k}" for k, v in summary.cache_hits.items()))
    if summary.status == "failed":
        from tension.core.pipelines.score import NO_POSITIONS, NO_STORIES
        from tension.core.pipelines.score.watch import OWN_WAY_OUT

        # the early stop, every ending empty, no position: the same command would stop again; the error
        # says the way out
        if summary.error is not None and summary.error.startswith(NO_STORIES) and summary.input_errors:
            # the corpus's own errors, printed above, said why; once is enough (the file's error: empty, an array)
            if summary.bad_records:
                print(f"{summary.bad_records} stories failed (see above); no story could be scored", file=sys.stderr)
        elif summary.error is not None and summary.error.startswith((*OWN_WAY_OUT, NO_POSITIONS, NO_STORIES)):
            print(f"error: {summary.error}", file=sys.stderr)
        else:
            print_stopped(summary.error, "work is")
        return EXIT_FAILED
    print(f"outputs in {summary.out}: positions.jsonl, stories.csv, groups.csv, run.json")
    n_bad = summary.bad_records + len(summary.failures)  # the file's own error (empty, an array) is no story
    scored = summary.stories - len(summary.failures)
    if n_bad:
        rest = "the others were scored" if scored else "no story could be scored"
        print(f"{n_bad} stories failed (see above); {rest}", file=sys.stderr)
    elif not scored and len(summary.input_errors) == summary.bad_records:  # else the file's error said it
        print(f"error: no story to score ({summary.skipped} skipped by the word filter, see above)",
              file=sys.stderr)
    return summary.exit_status


def cmd_estimate(args) -> int:
    """Requests, tokens, cache coverage, GPU-hours and money of scoring a corpus, before any LLM call.

    Formulas: docs/cost.md."""
    from tension.core.api.verbs import estimate

    r = estimate(args.corpus, config=args.config, gen_tok_s=args.gen_tok_s, judge_req_s=args.judge_req_s,
                 bench=args.bench, ending_tokens=args.ending_tokens, json=args.json, block_size=args.block_size,
                 kv_blocks=args.kv_blocks, gpu_profile=args.gpu_profile, prefill_tok_s=args.prefill_tok_s,
                 pilot=args.pilot, **given(args, ScoreConfig))
    print_errors(r.estimate.input_errors + r.estimate.stories_failed)
    print(r.text)
    if args.json:
        print(f"written: {args.json}")
    return r.exit_status


def cmd_bench(args) -> int:
    """Throughput, latency and prefix-cache hit rate of the configured servers on a fixed, seeded workload.

    Sends every request (the cache is not used). Formulas: docs/cost.md."""
    from tension.core.api.bench import bench

    r = bench(args.corpus, config=args.config, positions=args.positions, bench_seed=args.bench_seed,
              variants=not args.no_variants, stream=not args.no_stream, save=args.save or None,
              **given(args, ScoreConfig))
    print(r.text)
    if r.saved:
        print(f"written: {r.saved} (use it with `tension-run estimate CORPUS --bench {r.saved}`)")
    return r.exit_status


def _score_flags(p) -> None:
    p.add_argument("corpus", metavar="CORPUS", help=CORPUS_HELP)
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the outputs")
    p.add_argument("--config", metavar="FILE.toml", help="settings file; its keys are the flags' names")
    add_settings_flags(p, ScoreConfig)


# estimate and bench read the server and request settings of score, not its outputs
_ESTIMATE_FIELDS = fields_in(ScoreConfig, SERVERS, ENDINGS, JUDGING, CORPUS, CONCURRENCY,
                            skip={"warm_judge", "judge_batch"})  # how score sends, not what

_ADAPTIVE = ("target_half_width", "round_endings", "max_endings")  # docs/metrics.md 1.7


def _server_flags(p, fields: list[str], cache_help: str | None = None) -> None:
    p.add_argument("--config", metavar="FILE.toml", help="settings file, as for score")
    add_settings_flags(p, ScoreConfig, ["cache", "progress", *fields], help={"cache": cache_help} if cache_help
                       else None)


def _estimate_flags(p) -> None:
    p.add_argument("corpus", metavar="CORPUS", help=CORPUS_HELP)
    _server_flags(p, _ESTIMATE_FIELDS)
    g = group_for(p, "cost")
    g.add_argument("--gen-tok-s", type=number(float, gt=0), help="generation output tokens per second of your servers")
    g.add_argument("--judge-req-s", type=number(float, gt=0), help="judge requests per second of your servers")
    g.add_argument("--bench", metavar="FILE", help="figures saved by `tension-run bench --save FILE` "
                                                    "(flags given as well override them)")
    add_settings_flags(p, ScoreConfig, ["gpu_hour_usd", "input_usd_per_mtok", "output_usd_per_mtok"], group="cost",
                       help={"gpu_hour_usd": "price of a GPU-hour",
                             "input_usd_per_mtok": "price of a million prompt tokens (a hosted API)",
                             "output_usd_per_mtok": "price of a million generated tokens (a hosted API)"})
    g.add_argument("--ending-tokens", type=number(float, gt=0), metavar="E",
                   help="tokens per ending (default: --max-tokens, an upper bound; a --bench file measures it)")
    m = group_for(p, "prefix cache model (docs/cost.md)")
    m.add_argument("--block-size", type=number(int, ge=1, le=4096), metavar="B",
                   help="the servers' KV block, in tokens (vLLM: 16 on a GPU, 128 on the CPU build): model their "
                        "prefix caches block by block, in the order and concurrency score sends")
    m.add_argument("--kv-blocks", type=number(int, ge=2), metavar="C",
                   help="each server's KV cache, in blocks (vLLM's log: 'KV cache size: T tokens' = C x B)")
    m.add_argument("--gpu-profile", choices=["h200"],
                   help="the paper's two engines on one H200: 16-token blocks, the KV blocks their memory leaves")
    m.add_argument("--prefill-tok-s", type=number(float, gt=0), metavar="R",
                   help="prompt tokens per second the servers compute: adds the modelled prefill to the GPU-hours")
    p.add_argument("--pilot", metavar="RUN_DIR",
                   help="an earlier score run: the endings a position mean and late NR need, from its cached "
                        "verdicts, and the cost at that number beside --endings (docs/metrics.md 1.8); with "
                        "--target-half-width also the expected cost from its no-rates (docs/cost.md)")
    p.add_argument("--json", metavar="FILE", help="also write the estimate as JSON")


def _bench_flags(p) -> None:
    p.add_argument("--corpus", metavar="CORPUS", help="stories for the workload (default: the shipped demo story)")
    # of the corpus settings only the counter of pct: a server without vLLM's /tokenize needs --tokenizer words
    # nor adaptive endings: bench times fixed requests of --endings
    _server_flags(p, [f for f in _ESTIMATE_FIELDS if f not in fields_in(ScoreConfig, CORPUS) and f not in _ADAPTIVE]
                  + ["tokenizer"],
                  cache_help="LMDB cache for token counts only (default: a temporary one); answers are never "
                             "taken from a cache")
    g = group_for(p, "workload")
    g.add_argument("--positions", type=count(1, 10_000), default=4,
                   help="positions of the first story (default: %(default)s)")
    g.add_argument("--bench-seed", type=count(0), default=0, help="seed of the position choice and shuffles "
                                                             "(default: %(default)s)")
    g.add_argument("--no-variants", action="store_true",
                   help="only the baseline run (positions in story order, judge warm-up on)")
    g.add_argument("--no-stream", action="store_true",
                   help="plain requests, as score sends them (no time to first token)")
    add_settings_flags(p, ScoreConfig, ["gpu_hour_usd"], group="workload",
                       help={"gpu_hour_usd": "price of a GPU-hour, for the cost per story"})
    p.add_argument("--save", metavar="FILE", help="write the figures (JSON) for `estimate --bench FILE`")


VERBS = [
    Verb("score", cmd_score, _score_flags, (ScoreConfig,), frozenset({"corpus", "out", "config"}), SERVER_ENV),
    Verb("estimate", cmd_estimate, _estimate_flags, (ScoreConfig,),
         frozenset({"corpus", "config", "gen_tok_s", "judge_req_s", "bench", "ending_tokens", "json",
                    "block_size", "kv_blocks", "gpu_profile", "prefill_tok_s", "pilot"}), SERVER_ENV),
    Verb("bench", cmd_bench, _bench_flags, (ScoreConfig,),
         frozenset({"corpus", "config", "positions", "bench_seed", "no_variants", "no_stream", "save"}), SERVER_ENV),
]
