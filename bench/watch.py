"""What the answer watch (core/pipelines/score/watch.py) costs per verdict, side by
side with the per-position tally every score run already makes
(`outputs.position_result`) and with the whole pipeline's cost per judged ending
(bench/RESULTS.md: about 1,100 judged endings/s on one core, ≈ 900 µs each).

    python bench/watch.py [--positions 20000] [--endings 100] [--repeats 5]

Healthy answers (Y/N) and all-malformed ones (the watch's slow path: it counts
the kind of each and keeps up to 3 samples), with --keep-going so the all-malformed
run is not stopped. Prints the config, then one table: µs per verdict, and the
ratio to the existing tally.
"""

from __future__ import annotations

import argparse
import statistics
import time

from tension.cache.records import Endings, Usage
from tension.core.config import ScoreConfig
from tension.core.inputs.corpus import Story
from tension.core.pipelines.score.outputs import position_result
from tension.core.pipelines.score.positions import Position
from tension.core.pipelines.score.watch import AnswerWatch

PIPELINE_US_PER_ENDING = 1e6 / 1100  # bench/RESULTS.md, the whole score pipeline on one core


def _positions(n_pos: int, n: int, malformed: bool):
    story = Story(id="s", group="g", text="")
    rec = Endings(texts=[f"The end comes {i}." for i in range(n)], finish_reasons=["stop"] * n, model="m",
                  usage=Usage(), created=0.0)
    answers = [("Maybe so, I think" if malformed else "YN"[i % 2]) for i in range(n)]
    return story, [Position(story=0, k=k, pct=0.5) for k in range(n_pos)], rec, answers


def _time(fn, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--positions", type=int, default=20_000)
    ap.add_argument("--endings", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    cfg = ScoreConfig(base_url="http://127.0.0.1:9", keep_going=True)
    verdicts = args.positions * args.endings
    print(f"positions {args.positions:,} x endings {args.endings} = {verdicts:,} verdicts; median of "
          f"{args.repeats} runs")
    print(f"{'answers':<12} {'tally µs/verdict':>17} {'watch µs/verdict':>17} {'watch vs tally':>15} "
          f"{'watch vs pipeline':>18}")
    for malformed in (False, True):
        story, positions, rec, answers = _positions(args.positions, args.endings, malformed)
        tally = _time(lambda: [position_result(story, p, rec.texts, answers) for p in positions], args.repeats)

        def watched():
            watch = AnswerWatch(cfg)
            for _p in positions:
                watch.position(story.id, rec, answers, "m")

        watch = _time(watched, args.repeats)
        t_us, w_us = tally / verdicts * 1e6, watch / verdicts * 1e6
        print(f"{'malformed' if malformed else 'Y/N':<12} {t_us:>17.3f} {w_us:>17.3f} {w_us / t_us:>14.2f}x "
              f"{w_us / PIPELINE_US_PER_ENDING:>17.2%}")


if __name__ == "__main__":
    main()
