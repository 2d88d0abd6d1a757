"""`subsample`: how many endings a finished run's conclusions need (docs/metrics.md 1.8)."""

from __future__ import annotations

import sys

from tension.core.cli.flags import Verb, count, group_for, number
from tension.core.cli.messages import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from tension.kernels.settings import SHIFT_TOLERANCE, SUBSAMPLE_DRAWS, SUBSAMPLE_KS, SUBSAMPLE_STATS, WIDTH_TOLERANCE

__all__ = ["VERBS", "cmd_subsample"]


def _ints(text: str) -> tuple[int, ...]:
    import argparse

    try:
        out = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None
    if not out or any(k < 1 for k in out):
        raise argparse.ArgumentTypeError(f"expected whole numbers >= 1 separated by commas, got {text!r}")
    return out


def _names(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def cmd_subsample(args) -> int:
    """How many endings a finished score run's conclusions need: every story and group statistic recomputed
    from k of each position's n endings (the run's own cached verdicts; no request is sent).

    For each k: the first k endings of every position (what --endings k with the same seed draws on a
    seed-per-choice server) and random subsets (their spread); per statistic and group, the shift of the
    group mean from the full-n value, the spread of a rerun at k, and the interval's width against the
    full-n width. Recommends the smallest k that keeps the named statistics within the tolerances, with
    what it saves (docs/metrics.md 1.8)."""
    from pathlib import Path

    import msgspec

    from tension.core.inputs.jsonl import write_together
    from tension.core.pipelines.subsample import run_subsample
    from tension.core.pipelines.throughput import Throughput, check_throughput, throughput_from_bench
    from tension.core.reports.subsampling import format_subsampling

    thr = None
    if args.bench:
        thr = throughput_from_bench(args.bench, None)
        thr.gen_tok_s = args.gen_tok_s or thr.gen_tok_s
        thr.judge_req_s = args.judge_req_s or thr.judge_req_s
    elif args.gen_tok_s or args.judge_req_s:
        thr = Throughput(gen_tok_s=args.gen_tok_s, judge_req_s=args.judge_req_s)
    if thr is not None:
        check_throughput(thr)
    try:
        r = run_subsample(args.run, cache=args.cache, ks=args.ks, stats=args.stats, draws=args.draws,
                          seed=args.seed, shift_tolerance=args.shift_tolerance,
                          width_tolerance=args.width_tolerance, throughput=thr)
    except ValueError as e:  # an unknown statistic
        print(f"error: --stats: {e}", file=sys.stderr)
        return EXIT_USAGE
    for why in r.left_out:
        print(f"left out: {why}", file=sys.stderr)
    text = format_subsampling(r.result)
    s = r.savings
    if s is not None:
        text += (f"\nsaves {s.endings_full - s.endings_at_k:,} of {s.endings_full:,} endings "
                 f"({1 - s.endings_at_k / s.endings_full:.0%}) and {s.tokens_full - s.tokens_at_k:,.0f} generated "
                 f"tokens (E = {s.ending_tokens:.1f})")
        if s.gpu_hours_full is not None and s.gpu_hours_at_k is not None:
            text += f"; GPU-hours {s.gpu_hours_at_k:.3f} at k = {s.k} against {s.gpu_hours_full:.3f} at n = {s.n}"
        else:
            text += "; GPU-hours: give --gen-tok-s and --judge-req-s (or --bench FILE)"
    print(text)
    if args.out:
        import io

        from tension.core.reports.subsampling_figure import subsampling_figure

        out = Path(args.out)
        png = io.BytesIO()
        subsampling_figure(png, r.result)
        # the three files together or not at all: a stop while the figure is drawn left the .json and
        # .txt without the .png, in a folder that looked done (issue 58, G6)
        write_together({out / "subsample.txt": text + "\n",
                        out / "subsample.json": msgspec.json.format(msgspec.json.encode(r), indent=1) + b"\n",
                        out / "subsample.png": png.getvalue()})
        print(f"written: {out}/subsample.txt, {out}/subsample.json, {out}/subsample.png")
    return EXIT_FAILED if r.left_out else EXIT_OK


def _subsample_flags(p) -> None:
    p.add_argument("run", metavar="RUN_DIR", help="the --out folder of a finished score run")
    p.add_argument("--cache", metavar="PATH", help="the LMDB cache holding its verdicts (default: the one run.json "
                                                   "names)")
    p.add_argument("--out", metavar="DIR", help="also write subsample.txt, subsample.json and subsample.png there")
    g = group_for(p, "subsampling (docs/metrics.md 1.8)")
    g.add_argument("--ks", type=_ints, default=SUBSAMPLE_KS, metavar="K,K,…",
                   help="endings a position to try (the run's own n is always added; default: "
                        + ",".join(map(str, SUBSAMPLE_KS)) + ")")
    g.add_argument("--stats", type=_names, default=SUBSAMPLE_STATS, metavar="STAT,…",
                   help="statistics the recommendation is for (stories.csv's names; default: "
                        + ",".join(SUBSAMPLE_STATS) + ")")
    g.add_argument("--draws", type=count(2, 10_000), default=SUBSAMPLE_DRAWS,
                   help="random subsets of k endings a position, for the spread (default: %(default)s)")
    g.add_argument("--seed", type=count(0), default=0, help="seed of the random subsets (default: %(default)s)")
    g.add_argument("--shift-tolerance", type=number(float, gt=0, le=10), default=SHIFT_TOLERANCE,
                   help="a group mean may move by this share of its full-n 95%% half-width (default: %(default)s)")
    g.add_argument("--width-tolerance", type=number(float, ge=0, le=10), default=WIDTH_TOLERANCE,
                   help="a group's 95%% interval may widen by this share (default: %(default)s)")
    c = group_for(p, "cost")
    c.add_argument("--gen-tok-s", type=number(float, gt=0), help="generation output tokens per second of your servers")
    c.add_argument("--judge-req-s", type=number(float, gt=0), help="judge requests per second of your servers")
    c.add_argument("--bench", metavar="FILE", help="figures saved by `tension-run bench --save FILE`")


VERBS = [Verb("subsample", cmd_subsample, _subsample_flags, (),
              frozenset({"run", "cache", "out", "ks", "stats", "draws", "seed", "shift_tolerance", "width_tolerance",
                         "gen_tok_s", "judge_req_s", "bench"}))]
