"""`fairplay` and `fairplay_metrics` as functions (docs/python.md): the readers'
run and the fair-play scores of saved reader results, as the CLI's verbs (which
call these), with their *_async twins; the other verbs are in verbs.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tension.core.api.calls import Columns, PathLike, Records, blocking, given_input, run_cache
from tension.core.api.results import FairPlayMetricsResult, FairPlayResult, record_of
from tension.core.api.settings import (
    check_keywords,
    check_out_folder,
    count_arg,
    embedded_fallback,
    kernel_settings,
    load,
    named_server,
)
from tension.core.api.tables import Table
from tension.core.errors import EXIT_FAILED, EXIT_OK, ConfigError

if TYPE_CHECKING:  # only to type: `import tension` loads none of these
    from tension.core.config import FairPlayConfig
    from tension.core.reports.fairplay_metrics import FairPlaySummary

__all__ = ["fairplay", "fairplay_async", "fairplay_metrics", "fairplay_metrics_async"]



# ------------------------------------------------------------------------ fair play


def metric_options(verb: str, settings: dict[str, Any], max_plots: int, resamples: int, seed: int) -> dict[str, Any]:
    """The fair-play metrics' settings (FairPlaySettings' fields) and options."""
    from tension.kernels.settings import FairPlaySettings

    if not isinstance(max_plots, int) or not isinstance(resamples, int) or max_plots < 0 or resamples < 0:
        raise ConfigError("--max-plots and --resamples: expected >= 0")
    values = {k: v for k, v in settings.items() if v is not None}
    return {"settings": kernel_settings(verb, FairPlaySettings, values), "max_plots": max_plots,
            "n_resamples": resamples, "seed": count_arg(verb, "seed", seed)}


def _early_steps(settings: dict[str, Any]) -> dict[str, Any]:
    """`early_steps` as paragraph numbers (the flag reads them as numbers: 1.0 is 1)."""
    steps = settings.get("early_steps")
    if steps is None or isinstance(steps, str) or not hasattr(steps, "__iter__"):
        return settings  # absent, or for check_keywords to name
    if any(isinstance(i, bool) or not isinstance(i, int | float) or not float(i).is_integer() for i in steps):
        raise ConfigError(f"--early-steps: expected paragraph numbers, got {steps}")
    return {**settings, "early_steps": tuple(int(i) for i in steps)}


def _split(verb: str, settings: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """fairplay's keywords: FairPlayConfig's, FairPlaySettings' (a name both have goes to both)."""
    from tension.core.config import FairPlayConfig
    from tension.kernels.settings import FairPlaySettings

    settings = _early_steps(settings)
    check_keywords(verb, (FairPlayConfig, FairPlaySettings), settings)
    run_keys = set(FairPlayConfig.__struct_fields__)
    metric_keys = set(FairPlaySettings.__struct_fields__)
    return ({k: v for k, v in settings.items() if k in run_keys},
            {k: v for k, v in settings.items() if k in metric_keys})


def _metrics_result(s: FairPlaySummary) -> FairPlayMetricsResult:
    code = EXIT_FAILED if s.errors else EXIT_OK
    out = Path(s.out)  # the tables as computed, the rows its files hold
    stories = Table.of(out / "stories.csv", s.story_rows) if s.story_rows is not None else None
    groups = Table.of(out / "groups.csv", s.group_rows) if s.group_rows is not None else None
    return FairPlayMetricsResult(status="complete" if code == EXIT_OK else "failed", exit_status=code,
                                 out=str(s.out), stories=stories, groups=groups, summary=s)


def fairplay_metrics(readers: PathLike, *, out: PathLike, actual: PathLike | None = None, source: str = "readers",
                     progress: bool = True, max_plots: int = 20, resamples: int = 10_000, seed: int = 0,
                     **settings: Any) -> FairPlayMetricsResult:
    """Fair-play scores (S, C_UB, FP_UB, …) from saved reader distributions, no LLM
    (as ``tension-run fairplay-metrics``): `readers` is READERS.jsonl, a fairplay
    run's folder, or (``source="authors"``) the fair-play authors' result files;
    `actual` a CSV of actual-reader distributions; `seed` and `resamples` the
    bootstrap's; `settings`: FairPlaySettings' fields (docs/fairplay.md)."""
    from tension.core.reports.fairplay_metrics import fairplay_metrics as run
    from tension.kernels.settings import FairPlaySettings

    if source not in ("readers", "authors"):
        raise ConfigError(f"fairplay_metrics(): keyword `source`: expected 'readers' or 'authors', got {source!r}")
    settings = _early_steps(settings)
    check_keywords("fairplay_metrics", (FairPlaySettings,), settings)
    options = metric_options("fairplay_metrics", settings, max_plots, resamples, seed)
    check_out_folder(out)
    s = run(readers, out, actual_csv=actual, settings=options["settings"], max_plots=options["max_plots"],
            n_resamples=options["n_resamples"], seed=options["seed"], progress=progress, source=source)
    return _metrics_result(s)


async def fairplay_metrics_async(readers: PathLike, *, out: PathLike, actual: PathLike | None = None,
                                 source: str = "readers", progress: bool = True, max_plots: int = 20,
                                 resamples: int = 10_000, seed: int = 0, **settings: Any) -> FairPlayMetricsResult:
    """`fairplay_metrics` on a worker thread, awaited."""
    return await asyncio.to_thread(lambda: fairplay_metrics(
        readers, out=out, actual=actual, source=source, progress=progress, max_plots=max_plots,
        resamples=resamples, seed=seed, **settings))


def fairplay_settings(config: PathLike | None, settings: dict[str, Any], max_plots: int, resamples: int,
                      bootstrap_seed: int) -> tuple[FairPlayConfig, dict[str, Any]]:
    """FairPlayConfig (defaults < ``config`` and its [fairplay] table < keywords, the
    running embedded server when none is named) and the metrics' options."""
    from tension.core.config import FairPlayConfig

    run_values, metric_values = _split("fairplay", settings)
    fallback = {}
    if not named_server(config, run_values):
        emb = embedded_fallback()
        fallback = {"base_url": emb["base_url"], "reader_model": emb.get("model")} if emb else {}
    cfg = load("fairplay", FairPlayConfig, config, run_values, fallback, table="fairplay")
    return cfg, metric_options("fairplay", metric_values, max_plots, resamples, bootstrap_seed)


async def _fairplay(cfg: FairPlayConfig, stories: PathLike | Records, out: PathLike, options: dict[str, Any],
                    columns: Columns = None) -> FairPlayResult:
    from tension.core.pipelines.fairplay import run_fairplay as run

    check_out_folder(out, run_cache(cfg.cache))
    s = await run(cfg, given_input("fairplay", "stories", stories, columns, Path(out) / "stories_given.jsonl"), out,
                  options)
    m = _metrics_result(s.metrics) if s.metrics is not None else None
    code = EXIT_FAILED if (s.status != "complete" or m is None or m.exit_status != EXIT_OK or s.input_errors
                           or s.reader_failures) else EXIT_OK
    record, header = record_of(s.record)  # as the run computed it, not re-read
    return FairPlayResult(status=s.status, exit_status=code, out=s.out, metrics=m, run=record, header=header,
                          summary=s)


def fairplay(stories: PathLike | Records, *, out: PathLike, config: PathLike | None = None, columns: Columns = None,
             max_plots: int = 20,
             resamples: int = 10_000, bootstrap_seed: int = 0, **settings: Any) -> FairPlayResult:
    """The gullible, experienced and know-it-all readers over whodunits, then the
    fair-play metrics (as ``tension-run fairplay``; docs/fairplay.md). `settings`:
    FairPlayConfig's fields (``base_url``, ``reader_model``, ``seed`` — the readers'
    sampling seed, ``--reader-seed`` — …) and FairPlaySettings' (the metrics);
    `bootstrap_seed` and `resamples` the bootstrap's (the CLI's ``--seed``,
    ``--resamples``)."""
    cfg, options = fairplay_settings(config, settings, max_plots, resamples, bootstrap_seed)
    return blocking(lambda: _fairplay(cfg, stories, out, options, columns))


async def fairplay_async(stories: PathLike | Records, *, out: PathLike, config: PathLike | None = None,
                         columns: Columns = None, max_plots: int = 20,
                         resamples: int = 10_000, bootstrap_seed: int = 0, **settings: Any) -> FairPlayResult:
    """`fairplay`, awaited on the caller's loop."""
    cfg, options = fairplay_settings(config, settings, max_plots, resamples, bootstrap_seed)
    return await _fairplay(cfg, stories, out, options, columns)


# --------------------------------------------------------------------------- generate
