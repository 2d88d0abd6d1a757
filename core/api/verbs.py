"""The verbs a researcher scripts, as functions: the same work, files and
exceptions as the CLI's verbs (which call these), keyword arguments named as the
settings' fields (a config file's keys), results typed (core/api/results.py).

Each blocking function works from a script and from code that runs inside an
event loop (a notebook cell): there the work runs on a worker thread with its own
loop (`run.blocking.run_blocking`). Each has an ``*_async`` twin to await.
Errors are the TensionError subclasses of core/errors.py (a bad keyword is a
ConfigError naming it), never SystemExit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from tension.core.api.calls import CORPUS_COPY, Columns, PathLike, Records, blocking, given_input, recorded, run_cache
from tension.core.api.results import (
    CompareResult,
    EstimateResult,
    GenerateResult,
    MetricsResult,
    ScoreResult,
    record_of,
)
from tension.core.api.settings import (
    check_keywords,
    check_out_folder,
    count_arg,
    embedded_fallback,
    kernel_settings,
    load,
    named_server,
    server_fallback,
)
from tension.core.api.tables import Table
from tension.core.errors import EXIT_FAILED, EXIT_OK, ConfigError

if TYPE_CHECKING:  # only to type: `tension-run --help` and `import tension` load none of these

    from tension.core.config import GenerateConfig, ScoreConfig
    from tension.core.pipelines.prefix.predict import CacheModelOptions
    from tension.core.pipelines.throughput import Throughput
    from tension.kernels.settings import CurveSettings

__all__ = ["score", "score_async", "estimate", "estimate_async", "metrics", "metrics_async", "compare",
           "compare_async", "generate", "generate_async"]

_SHOWN_PAIRS = 50  # per-story differences compare shows; all are in compare_stories.csv


# ------------------------------------------------------------------------------ score


def score_settings(verb: str, config: PathLike | None, settings: dict[str, Any]) -> ScoreConfig:
    """ScoreConfig from keywords as score, estimate and bench read it: defaults <
    ``config`` < keywords, with the running embedded server (and its profile) as
    the default when no server is named."""
    from tension.core.config import ScoreConfig

    check_keywords(verb, (ScoreConfig,), settings)  # before the fallback looks for a server
    fallback = {} if named_server(config, settings) else embedded_fallback()
    return load(verb, ScoreConfig, config, settings, fallback)


async def _score(cfg: ScoreConfig, corpus: PathLike | Records, out: PathLike, columns: Columns,
                 call: dict[str, Any]) -> ScoreResult:
    from tension.core.pipelines.score import run_score as run

    check_out_folder(out, run_cache(cfg.cache))
    path = given_input("score", "corpus", corpus, columns, Path(out) / CORPUS_COPY)
    with recorded("score", path, {"out": out, **call}):
        s = await run(cfg, path, out)
    folder, c = Path(s.out), s.computed  # the statistics and the record the files hold, as computed
    record, header = record_of(s.record)
    return ScoreResult(status=s.status, exit_status=s.exit_status, out=s.out,
                       stories=Table.of(folder / "stories.csv", c.stories()) if c is not None else None,
                       groups=Table.of(folder / "groups.csv", c.group_rows()) if c is not None else None,
                       run=record, header=header, summary=s,
                       errors=[*s.input_errors, *(f"story {f.id!r} failed at {f.stage}: {f.error}"
                                                  for f in s.failures)])


def score(corpus: PathLike | Records, *, out: PathLike, config: PathLike | None = None, columns: Columns = None,
          **settings: Any) -> ScoreResult:
    """Score a corpus with the 100-Endings metric (as ``tension-run score CORPUS --out OUT``).

    `corpus`: JSON Lines (id, text, group?, …), a CSV or Parquet file with those
    columns, a folder of .txt files, or rows in memory (a pandas DataFrame, a
    datasets.Dataset, a list of dicts; `columns` renames theirs: ``{"id":
    "story_id"}``, written to OUT/corpus.jsonl for the run); `out`: the
    folder for positions.jsonl, stories.csv, groups.csv and run.json; `config`: a
    TOML settings file (``--config``); `settings`: ScoreConfig's fields by name
    (``base_url``, ``model``, ``endings``, ``seed``, …; docs/python.md), the CLI's
    defaults otherwise. Returns a ScoreResult (per-story statistics, groups, the run
    record); a run that fails part way returns with ``status`` "failed"."""
    cfg = score_settings("score", config, settings)
    return blocking(lambda: _score(cfg, corpus, out, columns, {"config": config, **settings}))


async def score_async(corpus: PathLike | Records, *, out: PathLike, config: PathLike | None = None,
                      columns: Columns = None, **settings: Any) -> ScoreResult:
    """`score`, awaited on the caller's loop."""
    cfg = score_settings("score", config, settings)
    return await _score(cfg, corpus, out, columns, {"config": config, **settings})


# --------------------------------------------------------------------------- estimate


def _throughput(gen_tok_s: float | None, judge_req_s: float | None, bench: PathLike | None,
                ending_tokens: float | None, gpu_hour_usd: float | None) -> Throughput:
    from tension.core.pipelines.throughput import Throughput, check_throughput, throughput_from_bench

    if bench is not None:
        thr = throughput_from_bench(bench, gpu_hour_usd)
        for name, v in (("gen_tok_s", gen_tok_s), ("judge_req_s", judge_req_s), ("ending_tokens", ending_tokens)):
            if v is not None:  # a keyword overrides the bench file
                setattr(thr, name, v)
    else:
        thr = Throughput(gen_tok_s=gen_tok_s, judge_req_s=judge_req_s, gpu_hour_usd=gpu_hour_usd,
                         ending_tokens=ending_tokens)
    check_throughput(thr)
    return thr


async def _estimate(cfg: ScoreConfig, corpus: PathLike | Records, thr: Throughput, json: PathLike | None,
                    model: CacheModelOptions | None = None, pilot: PathLike | None = None,
                    columns: Columns = None) -> EstimateResult:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tension-estimate-") as tmp:  # rows in memory: read from there
        return await _estimate_of(cfg, given_input("estimate", "corpus", corpus, columns, Path(tmp) / CORPUS_COPY),
                                  thr, json, model, pilot)


async def _estimate_of(cfg: ScoreConfig, corpus: PathLike, thr: Throughput, json: PathLike | None,
                       model: CacheModelOptions | None, pilot: PathLike | None) -> EstimateResult:
    from tension.core.pipelines.estimate import format_estimate
    from tension.core.pipelines.estimate import run_estimate as run
    from tension.core.pipelines.estimate_adaptive import adaptive_cost, read_pilot
    from tension.core.pipelines.estimate_precision import pilot_subsample, precision_cost

    adaptive = cfg.target_half_width is not None
    # a bad pilot is told before the corpus is counted
    ps = read_pilot(pilot) if pilot is not None and adaptive else None
    sub = pilot_subsample(pilot, required=not adaptive) if pilot is not None else None
    est = await run(cfg, corpus, thr, model)
    est.adaptive = adaptive_cost(cfg, est, ps, None if pilot is None else str(pilot))
    if pilot is not None and not isinstance(sub, str) and sub is not None:
        est.precision = precision_cost(cfg, est, pilot, sub)
    elif isinstance(sub, str):
        est.precision_note = sub
    if json is not None:
        from tension.core.inputs.jsonl import atomic_write

        atomic_write(json, msgspec.json.format(msgspec.json.encode(est), indent=2) + b"\n")
    bad = bool(est.input_errors or est.stories_failed)
    return EstimateResult(status="failed" if bad else "complete", exit_status=EXIT_FAILED if bad else EXIT_OK,
                          out=str(json) if json is not None else "", estimate=est, text=format_estimate(est))


def _estimate_args(config: PathLike | None, settings: dict[str, Any], gen_tok_s: float | None,
                   judge_req_s: float | None, bench: PathLike | None,
                   ending_tokens: float | None) -> tuple[ScoreConfig, Throughput]:
    for name, v in (("gen_tok_s", gen_tok_s), ("judge_req_s", judge_req_s), ("ending_tokens", ending_tokens)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not v > 0):
            raise ConfigError(f"estimate(): keyword `{name}`: expected a number > 0, got {v!r}")
    cfg = score_settings("estimate", config, settings)
    return cfg, _throughput(gen_tok_s, judge_req_s, bench, ending_tokens, settings.get("gpu_hour_usd"))


def _cache_model(block_size: int | None, kv_blocks: int | None, gpu_profile: str | None,
                 prefill_tok_s: float | None) -> CacheModelOptions:
    """The prefix-cache model's options (docs/cost.md, "Block-level prefix cache"), checked."""
    from tension.core.pipelines.prefix.gpu import PROFILES
    from tension.core.pipelines.prefix.predict import CacheModelOptions

    for name, v, lo in (("block_size", block_size, 1), ("kv_blocks", kv_blocks, 2)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < lo):
            raise ConfigError(f"estimate(): keyword `{name}`: expected an integer >= {lo}, got {v!r}")
    if prefill_tok_s is not None and (isinstance(prefill_tok_s, bool) or not isinstance(prefill_tok_s, int | float)
                                      or not prefill_tok_s > 0):
        raise ConfigError(f"estimate(): keyword `prefill_tok_s`: expected a number > 0, got {prefill_tok_s!r}")
    if gpu_profile is not None and gpu_profile not in PROFILES:
        raise ConfigError(f"estimate(): keyword `gpu_profile`: expected one of {', '.join(PROFILES)}, "
                          f"got {gpu_profile!r}")
    opts = CacheModelOptions(block_size=block_size, kv_blocks=kv_blocks, gpu_profile=gpu_profile,
                             prefill_tok_s=prefill_tok_s)
    if gpu_profile is None and (block_size is None) != (kv_blocks is None):
        raise ConfigError("estimate(): `block_size` and `kv_blocks` go together (--block-size B --kv-blocks C), "
                          "or give `gpu_profile` (--gpu-profile h200)")
    if prefill_tok_s is not None and not opts.wanted:
        raise ConfigError("estimate(): `prefill_tok_s` needs the prefix-cache model (--block-size and --kv-blocks, "
                          "or --gpu-profile)")
    return opts


def estimate(corpus: PathLike | Records, *, config: PathLike | None = None, columns: Columns = None,
             gen_tok_s: float | None = None,
             judge_req_s: float | None = None, bench: PathLike | None = None, ending_tokens: float | None = None,
             json: PathLike | None = None, block_size: int | None = None, kv_blocks: int | None = None,
             gpu_profile: str | None = None, prefill_tok_s: float | None = None, pilot: PathLike | None = None,
             **settings: Any) -> EstimateResult:
    """Requests, tokens, cache coverage, GPU-hours and money of scoring `corpus`,
    before any LLM call (as ``tension-run estimate``; formulas: docs/cost.md).
    `gen_tok_s`, `judge_req_s`, `bench` (a ``bench --save`` file), `ending_tokens`:
    the throughput; `block_size` and `kv_blocks`, or `gpu_profile` ("h200"): the
    servers' prefix caches, modelled block by block (`prefill_tok_s`: their prefill
    rate, for the GPU-hours); `json`: also write the estimate there; `pilot`: an
    earlier score run's folder, for the expected cost of `target_half_width`
    (adaptive endings); `settings`: ScoreConfig's fields, as for `score`."""
    cfg, thr = _estimate_args(config, settings, gen_tok_s, judge_req_s, bench, ending_tokens)
    model = _cache_model(block_size, kv_blocks, gpu_profile, prefill_tok_s)
    return blocking(lambda: _estimate(cfg, corpus, thr, json, model, pilot, columns))


async def estimate_async(corpus: PathLike | Records, *, config: PathLike | None = None, columns: Columns = None,
                         gen_tok_s: float | None = None,
                         judge_req_s: float | None = None, bench: PathLike | None = None,
                         ending_tokens: float | None = None, json: PathLike | None = None,
                         block_size: int | None = None, kv_blocks: int | None = None, gpu_profile: str | None = None,
                         prefill_tok_s: float | None = None, pilot: PathLike | None = None,
                         **settings: Any) -> EstimateResult:
    """`estimate`, awaited on the caller's loop."""
    cfg, thr = _estimate_args(config, settings, gen_tok_s, judge_req_s, bench, ending_tokens)
    model = _cache_model(block_size, kv_blocks, gpu_profile, prefill_tok_s)
    return await _estimate(cfg, corpus, thr, json, model, pilot, columns)


# ---------------------------------------------------------------------------- metrics


def curve_settings(verb: str, settings: dict[str, Any]) -> CurveSettings:
    """CurveSettings from keywords (window, thresholds, late_threshold, retention_window)."""
    from tension.kernels.settings import CurveSettings

    check_keywords(verb, (CurveSettings,), settings)
    values = {k: v for k, v in settings.items() if v is not None}
    if "thresholds" in values:
        values["thresholds"] = tuple(values["thresholds"])
    return kernel_settings(verb, CurveSettings, values)


def metrics(curves: PathLike, *, out: PathLike, **settings: Any) -> MetricsResult:
    """Story and group statistics from saved no-rate curves, no LLM (as ``tension-run
    metrics``): `curves` is CURVES.jsonl or a score run's folder; writes
    OUT/stories.csv and OUT/groups.csv; `settings`: CurveSettings' fields (window,
    thresholds, late_threshold, retention_window, …; of a run's folder, those not given
    are the run's own)."""
    from tension.core.errors import exit_status
    from tension.core.reports.metrics import metrics as run
    from tension.core.reports.run_folder import recorded_settings

    # a run's folder: its own curve settings (run.json), a keyword given over its own
    curve = curve_settings("metrics", recorded_settings(curves, {k: v for k, v in settings.items() if v is not None}))
    check_out_folder(out)
    r = run(curves, out, curve)
    code = exit_status("complete", len(r.curves), len(r.errors))
    return MetricsResult(status="complete" if code == EXIT_OK else "failed", exit_status=code, out=str(out),
                         stories=Table.of(Path(out) / "stories.csv", r.stories()),
                         groups=Table.of(Path(out) / "groups.csv", r.group_rows()),
                         errors=[str(e) for e in r.errors], computed=r)


async def metrics_async(curves: PathLike, *, out: PathLike, **settings: Any) -> MetricsResult:
    """`metrics` on a worker thread, awaited (numbers only: no loop of its own)."""
    return await asyncio.to_thread(lambda: metrics(curves, out=out, **settings))


# ---------------------------------------------------------------------------- compare


def compare(run_a: PathLike, run_b: PathLike, *, pair_by: str = "id", out: PathLike | None = None,
            resamples: int = 10_000, seed: int = 0, interval_resamples: int | None = None,
            interval_seed: int | None = None) -> CompareResult:
    """Paired comparison of two score runs, B − A (as ``tension-run compare``): per
    statistic the means, their difference with a bootstrap 95% interval
    (`resamples`, `seed`) and a paired t-test; per pair of stories the difference
    with its 95% interval over both runs' own verdicts (`interval_resamples`,
    `interval_seed`; default: run A's recorded settings); `pair_by` a corpus metadata
    field (or the story id); `out`: also write compare.md, compare.csv and
    compare_stories.csv there."""
    from tension.core.reports.comparison import compare as run
    from tension.core.reports.comparison import comparison_table, story_table

    if out is not None:
        check_out_folder(out)
    c = run(run_a, run_b, pair_by, n_resamples=count_arg("compare", "resamples", resamples, 10_000_000),
            seed=count_arg("compare", "seed", seed),
            interval_resamples=None if interval_resamples is None else count_arg(
                "compare", "interval_resamples", interval_resamples, 100_000),
            interval_seed=None if interval_seed is None else count_arg("compare", "interval_seed", interval_seed))
    md, table = comparison_table(c), comparison_table(c, "csv")
    if c.stories:
        md += (f"\nPer pair of stories, B − A with its 95% interval over both runs' own verdicts "
               f"({c.interval_resamples:,} resamples each, seed {c.interval_seed}; ✓ = excludes 0; "
               "docs/metrics.md 1.6):\n\n" + story_table(c, max_pairs=_SHOWN_PAIRS))
        if c.n_pairs > _SHOWN_PAIRS:
            md += f"\nFirst {_SHOWN_PAIRS} of {c.n_pairs} pairs; all are in compare_stories.csv (--out).\n"
    if out is not None:
        from tension.core.inputs.jsonl import write_together

        o = Path(out)  # the three together: stopped while they are written, the folder keeps its earlier set
        write_together({o / "compare.md": md, o / "compare.csv": table,
                        o / "compare_stories.csv": story_table(c, "csv")})
    code = EXIT_FAILED if c.n_pairs == 0 else EXIT_OK
    return CompareResult(status="complete" if code == EXIT_OK else "failed", exit_status=code,
                         out=str(out) if out is not None else "", comparison=c, markdown=md, csv=table)


async def compare_async(run_a: PathLike, run_b: PathLike, *, pair_by: str = "id", out: PathLike | None = None,
                        resamples: int = 10_000, seed: int = 0, interval_resamples: int | None = None,
                        interval_seed: int | None = None) -> CompareResult:
    """`compare` on a worker thread, awaited."""
    return await asyncio.to_thread(lambda: compare(run_a, run_b, pair_by=pair_by, out=out, resamples=resamples,
                                                   seed=seed, interval_resamples=interval_resamples,
                                                   interval_seed=interval_seed))


# compare.md and the terminal show the per-story differences of this many pairs


def generate_settings(config: PathLike | None, settings: dict[str, Any]) -> GenerateConfig:
    from tension.core.config import GenerateConfig

    check_keywords("generate", (GenerateConfig,), settings)
    fallback = {} if named_server(config, settings) else server_fallback()
    return load("generate", GenerateConfig, config, settings, fallback)


async def _generate(cfg: GenerateConfig, ideas: PathLike | Records, out: PathLike, columns: Columns,
                    call: dict[str, Any]) -> GenerateResult:
    from tension.core.pipelines.generate import run_generate as run

    o = Path(out)
    path = given_input("generate", "ideas", ideas, columns, o.with_name(o.stem + ".ideas.jsonl"))
    with recorded("generate", path, {"out": out, **call}):
        s = await run(cfg, path, out)
    path = Path(s.out)
    stories = ([msgspec.json.decode(line) for line in path.read_bytes().splitlines() if line.strip()]
               if s.status == "complete" and s.stories and path.is_file() else [])
    record, header = record_of(s.record)
    return GenerateResult(status=s.status, exit_status=s.exit_status, out=s.out, stories=stories,
                          run=record, header=header, summary=s)


def generate(ideas: PathLike | Records, *, out: PathLike, config: PathLike | None = None, columns: Columns = None,
             **settings: Any) -> GenerateResult:
    """Stories from ideas (as ``tension-run generate``): the paper's pipeline, its
    ablations (``mode``) or whodunits; `ideas` a path or rows in memory (as
    `score`'s corpus; written beside `out` as OUT_STEM.ideas.jsonl); `out` the STORIES.jsonl to write;
    `settings`: GenerateConfig's fields."""
    cfg = generate_settings(config, settings)
    return blocking(lambda: _generate(cfg, ideas, out, columns, {"config": config, **settings}))


async def generate_async(ideas: PathLike | Records, *, out: PathLike, config: PathLike | None = None,
                         columns: Columns = None, **settings: Any) -> GenerateResult:
    """`generate`, awaited on the caller's loop."""
    cfg = generate_settings(config, settings)
    return await _generate(cfg, ideas, out, columns, {"config": config, **settings})
