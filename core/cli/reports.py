"""`metrics`, `report` and `compare`: numbers from saved runs, no LLM."""

from __future__ import annotations

import sys

from tension.core.cli.flags import Number, Verb, add_bootstrap_flags, add_settings_flags, count, declared_bounds, given
from tension.core.cli.messages import EXIT_FAILED, EXIT_OK, print_errors
from tension.core.config import ScoreConfig
from tension.kernels.settings import CurveSettings

__all__ = ["VERBS", "cmd_metrics", "cmd_report", "cmd_compare"]


def cmd_metrics(args) -> int:
    """Story and group statistics from saved no-rate curves (no LLM needed)."""
    from tension.core.api.verbs import metrics
    from tension.core.reports.metrics import format_group_table

    r = metrics(args.curves, out=args.out, **given(args, CurveSettings))
    result = r.computed
    print_errors(result.errors)
    if not result.curves:
        print(f"nothing written to {args.out}: no curve could be read")
    else:
        print(format_group_table(result.groups))
        print(f"\n{len(result.curves)} stories -> {args.out}/stories.csv, {args.out}/groups.csv")
    from tension.core.reports.story_intervals import has_counts

    without = sum(not has_counts(c) for c in result.curves)
    if without and result.intervals is not None:  # review I6: empty *_lo/*_hi cells, said once
        print(f"intervals: none for {without} of {len(result.curves)} stories: their positions have no verdict "
              "counts (n_endings, n_match), which the intervals resample (docs/metrics.md 1.6)")
    if without:  # the empty *_comparable cells, said once too
        print(f"comparable second-order statistics: none for {without} of {len(result.curves)} stories: they "
              "need each position's verdict counts (n_endings, n_match) for its noise (docs/metrics.md 1.9)")
    if result.errors:
        print(f"{len(result.errors)} line(s) failed; see the errors above", file=sys.stderr)
    elif not result.curves:
        print(f"error: {args.curves}: no curve to compute", file=sys.stderr)
    return r.exit_status


def cmd_report(args) -> int:
    """Tables, figures and report.md of a score run, recomputed from its positions.jsonl."""
    from tension.core.reports.report import report

    path = report(args.run, max_curves=args.max_curves, gpu_hour_usd=args.gpu_hour_usd,
                  settings=_curve_settings(args), n_resamples=args.resamples, seed=args.seed,
                  usd_per_mtok=(args.input_usd_per_mtok, args.output_usd_per_mtok))
    print(f"report: {path}")
    return EXIT_OK


def cmd_compare(args) -> int:
    """Paired comparison of two runs (B − A): mean difference, bootstrap 95% interval, paired t-test."""
    from tension.core.api.verbs import compare

    r = compare(args.run_a, args.run_b, pair_by=args.pair_by, out=args.out, resamples=args.resamples, seed=args.seed,
                interval_resamples=args.interval_resamples, interval_seed=args.interval_seed)
    c = r.comparison
    print(f"{c.n_pairs} pairs by `{c.pair_by}` ({c.unpaired_a} stories only in A, {c.unpaired_b} only in B); "
          f"B − A = {c.run_b} − {c.run_a}; ✓ = a finding (legend under the table)\n")
    for w in c.warnings:
        print(f"warning: {w}", file=sys.stderr)
    for n in c.notes:
        print(f"note: {n}", file=sys.stderr)
    print(r.markdown)
    if args.out:
        print(f"written: {args.out}/compare.md, {args.out}/compare.csv, {args.out}/compare_stories.csv")
    if c.n_pairs == 0:
        print(f"error: no story of {c.run_a} pairs with one of {c.run_b} by `{c.pair_by}`", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _curve_settings(args):
    """The run's own curve settings (run.json), each flag given over its own: the advice
    "Rebuild with `tension-run report RUN`" rebuilds the report `score` wrote."""
    from tension.core.config import build_settings
    from tension.core.reports.run_folder import recorded_settings

    values = recorded_settings(args.run, given(args, CurveSettings))
    if "thresholds" in values:
        values["thresholds"] = tuple(values["thresholds"])
    return build_settings(CurveSettings, "--", **values)


# Absent, a curve flag is the run's own setting (run.json), else the paper's default.
_RUNS_OWN = ("curve statistics (docs/metrics.md 1.4; of a score run's folder, a flag not given is the run's own "
             "setting, as run.json records it; the defaults shown are the paper's)")


def _metrics_flags(p) -> None:
    p.add_argument("curves", metavar="CURVES.jsonl|RUN_DIR",
                   help='one story per line: {"id", "group" (optional), "x": [pct…], "y": [no-rate…]}; '
                        "or the folder of a score run (its positions.jsonl)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for stories.csv and groups.csv")
    add_settings_flags(p, CurveSettings, group=_RUNS_OWN)


def _report_flags(p) -> None:
    p.add_argument("run", metavar="RUN_DIR", help="the --out folder of a score run")
    p.add_argument("--max-curves", type=count(0), default=50,
                   help="curve figures for at most this many stories (default: %(default)s)")
    p.add_argument("--gpu-hour-usd", type=Number(float, declared_bounds(ScoreConfig, "gpu_hour_usd")), default=None,
                   help="price of a GPU-hour, for the cost line")
    for name, what in (("input", "prompt"), ("output", "generated")):
        p.add_argument(f"--{name}-usd-per-mtok", type=Number(float, declared_bounds(ScoreConfig,
                       f"{name}_usd_per_mtok")), default=None, help=f"price of a million {what} tokens (a hosted "
                       "API), for the cost line by the run's tokens")
    add_bootstrap_flags(p, floor=True)
    add_settings_flags(p, CurveSettings, group=_RUNS_OWN)


def _compare_flags(p) -> None:
    p.add_argument("run_a", metavar="RUN_A", help="baseline run folder (e.g. vanilla)")
    p.add_argument("run_b", metavar="RUN_B", help="run folder compared with it (e.g. pipeline)")
    p.add_argument("--pair-by", default="id", metavar="FIELD",
                   help="pair stories by this metadata field of the corpus (default: the story id)")
    p.add_argument("--out", metavar="DIR", help="also write compare.md, compare.csv and compare_stories.csv here")
    add_bootstrap_flags(p, floor=True, none=False)
    p.add_argument("--interval-resamples", type=Number(int, declared_bounds(CurveSettings, "interval_resamples")),
                   default=None, metavar="N", help="resamples of each run's verdicts for the per-story differences' "
                   "95%% intervals (default: run A's setting; 0 = none)")
    p.add_argument("--interval-seed", type=Number(int, declared_bounds(CurveSettings, "interval_seed")),
                   default=None, metavar="S", help="seed of those resamples (default: run A's setting)")


_BOOTSTRAP = frozenset({"resamples", "seed"})
VERBS = [
    Verb("metrics", cmd_metrics, _metrics_flags, (CurveSettings,), frozenset({"curves", "out"})),
    Verb("report", cmd_report, _report_flags, (CurveSettings,),
         frozenset({"run", "max_curves", "gpu_hour_usd", "input_usd_per_mtok", "output_usd_per_mtok"}) | _BOOTSTRAP),
    Verb("compare", cmd_compare, _compare_flags, (),
         frozenset({"run_a", "run_b", "pair_by", "out", "interval_resamples", "interval_seed"}) | _BOOTSTRAP),
]
