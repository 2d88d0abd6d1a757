"""`bench`, as a function (as ``tension-run bench``): the configured servers'
throughput, latency and prefix-cache hit rate on a fixed, seeded workload, the
figures `estimate` prices a run with (``bench(save=…)`` then
``estimate(corpus, bench=…)``). The CLI's verb calls this; it is the one door."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from tension.core.api.calls import PathLike, blocking
from tension.core.errors import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:  # only to type: `import tension` loads no pipeline
    from tension.core.config import ScoreConfig
    from tension.core.pipelines.bench import BenchFigures, BenchOptions

__all__ = ["bench", "bench_async", "BenchResult"]


class BenchResult(msgspec.Struct, kw_only=True):
    """What `bench` measured: `figures` (what ``save`` writes, and `estimate` reads),
    `text` (as the CLI prints it), `exit_status` (1: a run of the workload failed),
    `saved` (the file written, if any)."""

    figures: BenchFigures
    text: str
    exit_status: int
    saved: str | None = None


def _settings(config: PathLike | None, positions: int, seed: int, variants: bool, stream: bool,
              settings: dict[str, Any]) -> tuple[ScoreConfig, BenchOptions]:
    from tension.core.api.verbs import score_settings
    from tension.core.pipelines.bench import BenchOptions

    cfg = score_settings("bench", config, settings)
    return cfg, BenchOptions(positions=positions, seed=seed, gpu_hour_usd=cfg.gpu_hour_usd, variants=variants,
                             stream=stream)


async def _bench(cfg: ScoreConfig, corpus: PathLike | None, opts: BenchOptions, save: PathLike | None
                 ) -> BenchResult:
    from importlib.resources import files

    from tension.core.pipelines.bench import format_bench, run_bench, save_figures

    story = str(corpus) if corpus is not None else str(files("tension.core").joinpath("data/demo_story.jsonl"))
    fig = await run_bench(cfg, story, opts)
    if save is not None:
        save_figures(str(save), fig)
    return BenchResult(figures=fig, text=format_bench(fig), exit_status=EXIT_FAILED if fig.failed else EXIT_OK,
                       saved=None if save is None else str(save))


def bench(corpus: PathLike | None = None, *, config: PathLike | None = None, positions: int = 4,
          bench_seed: int = 0, variants: bool = True, stream: bool = True, save: PathLike | None = None,
          **settings: Any) -> BenchResult:
    """Measure the servers of `settings` (ScoreConfig's fields, as for `score`; the
    running embedded server when none is named) on `positions` positions of the
    first story of `corpus` (default: the story the project ships), seeded by
    `bench_seed`; `variants`: also the warm-up off and shuffled positions;
    `stream`: time to first token (False: plain requests, as score sends them);
    `save`: write the figures for ``estimate(…, bench=save)``; ``gpu_hour_usd``
    (a setting) prices them. Sends every request (the cache is not used).
    Formulas: docs/cost.md."""
    cfg, opts = _settings(config, positions, bench_seed, variants, stream, settings)
    return blocking(lambda: _bench(cfg, corpus, opts, save))


async def bench_async(corpus: PathLike | None = None, *, config: PathLike | None = None, positions: int = 4,
                      bench_seed: int = 0, variants: bool = True, stream: bool = True, save: PathLike | None = None,
                      **settings: Any) -> BenchResult:
    """`bench`, awaited on the caller's loop."""
    cfg, opts = _settings(config, positions, bench_seed, variants, stream, settings)
    return await _bench(cfg, corpus, opts, save)
