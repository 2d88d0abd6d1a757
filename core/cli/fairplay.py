"""`fairplay` (the LLM readers of whodunits, then the metrics) and
`fairplay-metrics` (the metrics from saved reader distributions)."""

from __future__ import annotations

import sys

from tension.core.cli.flags import (
    SERVER_ENV,
    Once,
    OnceBool,
    Verb,
    add_bootstrap_flags,
    add_settings_flags,
    count,
    given,
    group_for,
)
from tension.core.cli.messages import (
    EXIT_FAILED,
    print_answer_warnings,
    print_errors,
    print_fairplay_summary,
    print_stopped,
)
from tension.core.config.fairplay import FairPlayConfig
from tension.core.errors import ConfigError
from tension.kernels.settings import FAIRPLAY_GROUP, FairPlaySettings

__all__ = ["VERBS", "cmd_fairplay", "cmd_fairplay_metrics"]


def cmd_fairplay_metrics(args) -> int:
    """Fair-play scores (S, C_UB, FP_UB, …) from saved per-paragraph reader distributions (no LLM needed)."""
    from tension.core.api.fairplay import fairplay_metrics

    r = fairplay_metrics(args.readers, out=args.out, actual=args.actual, source=args.source, progress=args.progress,
                         max_plots=args.max_plots, resamples=args.resamples, seed=args.seed,
                         **given(args, FairPlaySettings))
    return print_fairplay_summary(r.summary)


def cmd_fairplay(args) -> int:
    """Run the gullible, experienced and know-it-all readers over whodunits, paragraph by paragraph,
    write readers.jsonl, then the fair-play metrics (S, C_UB, FP_UB, ...).

    Settings: defaults (the paper's) < --config file < flags. See docs/fairplay.md."""
    from tension.core.api.fairplay import fairplay

    summary = fairplay(args.stories, out=args.out, config=args.config, max_plots=args.max_plots,
                       resamples=args.resamples, bootstrap_seed=args.seed,
                       **given(args, FairPlayConfig, parse={"previous_stories": _counts}),
                       **given(args, FairPlaySettings)).summary
    print_errors(summary.input_errors)
    if summary.reader_failures:
        failed = summary.failed_stories
        print(f"error: {summary.reader_failures} reader value(s) failed in {len(failed)} "
              f"stories ({', '.join(failed[:5])}{', ...' if len(failed) > 5 else ''}); "
              f"they are null in readers.jsonl, the reasons in its `failures` and in fairplay_run.json",
              file=sys.stderr)
    print_answer_warnings(summary.warnings)
    req = summary.requests
    print(f"{summary.stories} stories; requests sent: {req.get('reader', 0)} reader, {req.get('generation', 0)} "
          f"generation, {req.get('judge', 0)} judge; cache hits: "
          + ", ".join(f"{v} {k}" for k, v in summary.cache_hits.items()))
    if summary.status != "complete":
        from tension.core.pipelines.fairplay import NO_STORIES

        if summary.error is not None and summary.error.startswith(NO_STORIES):
            print(f"error: {summary.error}", file=sys.stderr)  # no rerun can cure it: the file's errors say why
        else:
            print_stopped(summary.error, "answers are")
        return EXIT_FAILED
    print(f"readers: {summary.out}/readers.jsonl (run record: fairplay_run.json)")
    code = print_fairplay_summary(summary.metrics) if summary.metrics is not None else EXIT_FAILED
    if summary.input_errors or summary.reader_failures:
        return EXIT_FAILED
    return code


def _counts(text: str) -> int | list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()] if "," in text else int(text)
    except ValueError:
        raise ConfigError(f"--previous-stories: expected a count or comma-separated counts, got {text!r}") from None


def _metric_flags(p) -> None:
    """The flags of the fair-play metrics (docs/fairplay.md), shared by both verbs."""
    add_settings_flags(p, FairPlaySettings, defaults=True)
    g = group_for(p, FAIRPLAY_GROUP)
    g.add_argument("--max-plots", type=count(0), default=20,
                   help="reading-curve plots for at most this many stories (default: %(default)s)")
    add_bootstrap_flags(g)


def _fairplay_metrics_flags(p) -> None:
    p.add_argument("readers", metavar="READERS.jsonl|RUN_DIR|AUTHORS_DIR",
                   help='one story per line: {"id", "group"?, "suspects", "culprit", "distractor"?, '
                        '"revelation"?, "L"?, "readers": {"gullible": [[p…] or null, …], …}}; '
                        "or the folder of a fairplay run (its readers.jsonl); with --from authors, the folder of "
                        "the fair-play authors' result files (results/for eval2 of their repository)")
    p.add_argument("--from", dest="source", action=Once, choices=("readers", "authors"), default="readers",
                   metavar="readers|authors",
                   help="readers: READERS.jsonl or a fairplay run folder; authors: the fair-play authors' "
                        "published result files (docs/fairplay.md, 'Reproducing the paper') (default: readers)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder for stories.csv, steps.jsonl, groups.csv/md, curves.csv, distributions.jsonl, plots/")
    add_settings_flags(p, FairPlayConfig, ["actual"])
    _metric_flags(p)
    p.add_argument("--progress", action=OnceBool, default=True, help="show a progress bar while plotting")


def _fairplay_flags(p) -> None:
    p.add_argument("stories", metavar="STORIES", help="JSON Lines: id, segments (or segments_25, or text), "
                   "suspects, culprit, distractor?, revelation?, group?, generator?")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for readers.jsonl and the metrics")
    p.add_argument("--config", metavar="FILE.toml", help="settings file: the keys fairplay knows, and a "
                   "[fairplay] table")
    add_settings_flags(p, FairPlayConfig)
    _metric_flags(p)


_METRIC_FLAGS = frozenset({"max_plots", "resamples", "seed"})
VERBS = [
    Verb("fairplay", cmd_fairplay, _fairplay_flags, (FairPlayConfig, FairPlaySettings),
         frozenset({"stories", "out", "config"}) | _METRIC_FLAGS, SERVER_ENV),
    Verb("fairplay-metrics", cmd_fairplay_metrics, _fairplay_metrics_flags, (FairPlaySettings,),
         frozenset({"readers", "out", "actual", "progress", "source"}) | _METRIC_FLAGS),
]
