"""`tension-run metrics`: story and group statistics from saved no-rate curves.

Input is JSON Lines, one story per line::

    {"id": "s1", "group": "human", "x": [0.12, 0.2, ...], "y": [0.8, 0.74, ...],
     "n_endings": [100, 100, ...], "n_match": [20, 26, ...]}

(``x`` = fraction of the story revealed, strictly increasing; ``y`` = no-rate in
[0, 1]; the optional verdict counts of each position, judged endings and matches,
give the story its intervals, docs/metrics.md 1.6). No LLM is involved: this is the
last stage of `score`, usable alone.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import cast

import msgspec
import numpy as np

from tension.core.errors import InputError
from tension.core.formats import DEFAULT_GROUP, PositionLine
from tension.core.inputs.jsonl import check_label, decode_line, iter_lines, read_records, write_together
from tension.core.reports.comparable import (
    SUFFIX,
    comparable_columns,
    comparable_floor,
    comparable_intervals,
    comparable_matrix,
    is_comparable,
    widened,
)
from tension.core.reports.rows import Cell, Rows, rows_csv
from tension.core.reports.story_intervals import compute_intervals, interval_columns, stat_matrix
from tension.core.reports.unfinished import no_positions
from tension.kernels.bootstrap import N_RESAMPLES
from tension.kernels.curves import BatchStats, CurveSettings, Reason, batch_stats
from tension.kernels.groups import GroupStat, group_stats
from tension.kernels.intervals import StoryIntervals

__all__ = ["DEFAULT_GROUP", "Curve", "MetricsResult", "read_curves", "read_run_positions", "read_positions_file",
           "compute", "metrics", "stat_columns", "stories_csv", "groups_csv", "Rows", "rows_csv", "stories_rows",
           "groups_rows", "format_group_table"]


class Curve(msgspec.Struct, kw_only=True):
    id: str
    x: list[float]
    y: list[float]
    group: str | None = DEFAULT_GROUP  # null is read as absent (DEFAULT_GROUP); never None once checked
    # each position's judged endings and matches (y = 1 − n_match / n_endings): what a
    # story's intervals resample; None when the curve was saved without them
    n_endings: list[int] | None = None
    n_match: list[int] | None = None


class MetricsResult(msgspec.Struct, kw_only=True):
    curves: list[Curve]
    stats: BatchStats
    settings: CurveSettings
    groups: dict[str, dict[str, GroupStat]]  # statistic -> group -> summary
    errors: list[InputError]
    intervals: StoryIntervals | None = None  # None: interval_resamples = 0
    failed: dict[str, str] = {}  # story id -> why it failed (a score run's): its row kept, undefined
    story_table: Rows | None = None  # stories.csv's rows, once built (`stories`)
    group_table: Rows | None = None  # groups.csv's rows, once built (`group_rows`)
    comparable: np.ndarray | None = None  # `comparable_matrix` with `failed`: the caller's, or once by `stories`

    def stories(self) -> Rows:
        """stories.csv's rows, as computed (built once: the file and the API's table share them)."""
        if self.story_table is None:
            if self.comparable is None:
                self.comparable = comparable_matrix(self.curves, self.settings, self.failed)
            self.story_table = stories_rows(self.curves, self.stats, self.settings, self.failed, self.intervals,
                                            comparable=self.comparable)
        return self.story_table

    def group_rows(self) -> Rows:
        """groups.csv's rows, as computed (built once)."""
        if self.group_table is None:
            self.group_table = groups_rows(self.groups)
        return self.group_table

    def write(self, out: Path) -> None:
        """stories.csv and groups.csv into the folder `out`, together (`write_together`:
        stopped while they are written, the folder keeps the pair it had, or none)."""
        write_together({out / "stories.csv": rows_csv(self.stories()), out / "groups.csv": rows_csv(self.group_rows())})


_curve_decoder = msgspec.json.Decoder(Curve)


def check_curve(path: str, lineno: int, c: Curve) -> None:
    """The rules a curve must meet beyond its types (docs/metrics.md 1.4)."""
    if not c.id:
        raise InputError(path, lineno, "id", "expected a non-empty string")
    check_label(path, lineno, "id", c.id)
    check_label(path, lineno, "group", c.group)
    if len(c.x) != len(c.y):
        raise InputError(path, lineno, "y", f"expected {len(c.x)} values (as many as `x`), got {len(c.y)}")
    for name, arr in (("x", c.x), ("y", c.y)):
        for i, v in enumerate(arr):
            if not math.isfinite(v):
                raise InputError(path, lineno, f"{name}[{i}]", f"expected a finite number, got {v}")
    for i in range(1, len(c.x)):
        if not c.x[i] > c.x[i - 1]:
            raise InputError(path, lineno, f"x[{i}]",
                             f"expected x to increase strictly, got {c.x[i]} after {c.x[i - 1]}")
    for i, v in enumerate(c.y):
        if not 0.0 <= v <= 1.0:
            raise InputError(path, lineno, f"y[{i}]", f"expected a no-rate in [0, 1], got {v}")
    _check_counts(path, lineno, c)


def _check_counts(path: str, lineno: int, c: Curve) -> None:
    """The verdict counts, when a curve has them: both lists, one entry per position,
    0 <= n_match <= n_endings, and y = 1 − n_match / n_endings (n_endings 0: counts not
    known for that position, so the story gets no interval)."""
    if c.n_endings is None and c.n_match is None:
        return
    if c.n_endings is None or c.n_match is None:
        given, missing = ("n_endings", "n_match") if c.n_match is None else ("n_match", "n_endings")
        raise InputError(path, lineno, missing, f"expected `{missing}` beside `{given}` (the verdict counts)")
    for name, arr in (("n_endings", c.n_endings), ("n_match", c.n_match)):
        if len(arr) != len(c.x):
            raise InputError(path, lineno, name, f"expected {len(c.x)} counts (as many as `x`), got {len(arr)}")
    for i, (n, k) in enumerate(zip(c.n_endings, c.n_match)):
        if n < 0:
            raise InputError(path, lineno, f"n_endings[{i}]", f"expected a count >= 0, got {n}")
        if not 0 <= k <= n:
            raise InputError(path, lineno, f"n_match[{i}]", f"expected a count in [0, n_endings = {n}], got {k}")
        if n and abs(c.y[i] - (1.0 - k / n)) > 1e-9:
            raise InputError(path, lineno, f"y[{i}]", f"expected 1 − n_match/n_endings = {1.0 - k / n:.10g} "
                                                      f"(from the counts {k}/{n}), got {c.y[i]}")


def read_run_positions(run_dir: str | os.PathLike) -> tuple[list[Curve], list[InputError]]:
    """Curves from a score run's positions.jsonl (lines grouped by story, ascending k).

    One rule for every bad line, whether it is not JSON, holds a wrong type or a
    value out of range (a no-rate of 1.5, a pct that does not increase): its error
    names the line and the field, the line is left out, and its story is computed
    from its other lines."""
    return read_positions_file(Path(run_dir) / "positions.jsonl")


def read_positions_file(positions: str | os.PathLike) -> tuple[list[Curve], list[InputError]]:
    """Curves from a positions.jsonl file, as `read_run_positions` reads its folder's."""
    path = str(positions)
    by_id: dict[str, Curve] = {}
    errors: list[InputError] = []
    dec = msgspec.json.Decoder(PositionLine)
    for lineno, raw in iter_lines(path):
        try:
            p = decode_line(path, lineno, raw, PositionLine, dec)
            _check_position(path, lineno, p, by_id.get(p.id))
        except InputError as e:
            errors.append(InputError(e.path, e.line, e.field, f"{e.message} (line left out)"))
            continue
        c = by_id.setdefault(p.id, Curve(id=p.id, group=p.group, x=[], y=[], n_endings=[], n_match=[]))
        c.x.append(p.pct)
        c.y.append(p.no_rate)
        c.n_endings.append(p.n_endings)  # type: ignore[union-attr]  # lists, made just above
        c.n_match.append(p.n_match)  # type: ignore[union-attr]
    curves = []
    for c in by_id.values():
        check_curve(path, 0, c)  # each line met the rules above, so its curve does
        curves.append(c)
    return curves, errors


def _check_position(path: str, lineno: int, p: PositionLine, before: Curve | None) -> None:
    """A positions.jsonl line's values, as check_curve checks a curve's, named by line."""
    if not p.id:
        raise InputError(path, lineno, "id", "expected a non-empty string")
    check_label(path, lineno, "id", p.id)
    check_label(path, lineno, "group", p.group)
    for name, v in (("pct", p.pct), ("no_rate", p.no_rate)):
        if not math.isfinite(v):
            raise InputError(path, lineno, name, f"expected a finite number, got {v}")
    if not 0.0 <= p.no_rate <= 1.0:
        raise InputError(path, lineno, "no_rate", f"expected a no-rate in [0, 1], got {p.no_rate}")
    if p.n_endings < 0 or not 0 <= p.n_match <= p.n_endings:
        raise InputError(path, lineno, "n_match", f"expected 0 <= n_match <= n_endings, got {p.n_match} of "
                                                  f"{p.n_endings}")
    if p.n_endings and abs(p.no_rate - (1.0 - p.n_match / p.n_endings)) > 1e-9:
        raise InputError(path, lineno, "no_rate", f"expected 1 − n_match/n_endings = "
                                                  f"{1.0 - p.n_match / p.n_endings:.10g}, got {p.no_rate}")
    if before is not None and before.x and not p.pct > before.x[-1]:
        raise InputError(path, lineno, "pct", f"expected the story's pct to increase, got {p.pct} after "
                                              f"{before.x[-1]} (story {p.id!r})")


def read_curves(path: str | os.PathLike) -> tuple[list[Curve], list[InputError]]:
    """Every valid curve of the file, and an error for each bad line. A folder is
    read as a score run (its positions.jsonl)."""
    if Path(path).is_dir():
        if not (Path(path) / "positions.jsonl").is_file():
            raise no_positions(Path(path))
        return read_run_positions(path)
    if _holds_positions(path):  # RUN/positions.jsonl given for RUN: read as its folder is (issue 36, I7)
        return read_positions_file(path)
    decode = functools.partial(decode_line, type=Curve, decoder=_curve_decoder)
    return read_records(path, _checked_curve, decode=decode, empty="curves")


def _holds_positions(path: str | os.PathLike) -> bool:
    """Whether the file's first line is a score run's position (k, pct, no_rate), not a curve."""
    if not Path(path).is_file():  # standard input, a FIFO: read once, by read_records
        return False
    try:
        lines = iter_lines(path)
        try:
            first = next((raw for _, raw in lines if raw.strip()), None)
        finally:
            lines.close()  # type: ignore[attr-defined]  # a generator: its file is closed now, not by the GC
        line = msgspec.json.decode(first) if first is not None else None
    except (OSError, msgspec.DecodeError, InputError):
        return False  # read_records says what is wrong with it
    return isinstance(line, dict) and {"k", "pct", "no_rate"} <= line.keys() and "x" not in line


def _checked_curve(path: str, lineno: int, c: Curve) -> Curve:
    check_curve(path, lineno, c)
    if c.group is None:
        c.group = DEFAULT_GROUP
    return c


def stat_columns(settings: CurveSettings) -> list[str]:
    """Names of the story statistics, in output order."""
    return ["mean_nr", "late_nr", "retain", "convergence"] + [f"ir{_fmt_angle(a)}" for a in settings.thresholds]


def _fmt_angle(a: float) -> str:
    return str(int(a)) if float(a).is_integer() else str(a).replace(".", "_")


def compute(curves: Sequence[Curve], settings: CurveSettings = CurveSettings(), *,
            n_resamples: int = N_RESAMPLES, seed: int = 0, failed: Collection[str] = (),
            comparable: np.ndarray | None = None) -> tuple[BatchStats, dict[str, dict[str, GroupStat]]]:
    """Kernels over all curves at once, then group summaries per statistic
    (with a seeded percentile bootstrap of `n_resamples`; 0 skips it). The
    stories whose ids are in `failed` get their (empty) row of statistics but
    are left out of the groups: a failed story is no story with NaN statistics.
    `comparable`: the curves' `comparable_matrix` (with `failed`), when the caller has it."""
    lengths = np.fromiter((len(c.x) for c in curves), dtype=np.int64, count=len(curves))
    offsets = np.zeros(len(curves) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    x = np.fromiter((v for c in curves for v in c.x), dtype=np.float64, count=int(offsets[-1]))
    y = np.fromiter((v for c in curves for v in c.y), dtype=np.float64, count=int(offsets[-1]))
    stats = batch_stats(x, y, offsets, settings)
    keep = np.array([c.id not in failed for c in curves], dtype=bool)
    labels = cast(list[str], [c.group for c in curves if c.id not in failed])  # checked curves have a group
    matrix = stat_matrix(stats)[keep]
    groups = {name: group_stats(matrix[:, k], labels, n_resamples, seed)
              for k, name in enumerate(stat_columns(settings))}
    # the comparable second-order statistics (docs/metrics.md 1.9) after the paper's, their
    # intervals widened by the group's shift to its noise floor, as the study measured them
    comparable = (comparable_matrix(curves, settings, failed) if comparable is None else comparable)[keep]
    floor = comparable_floor(curves, settings, failed)[keep]
    index: dict[str, list[int]] = {}
    for i, g in enumerate(labels):
        index.setdefault(g, []).append(i)
    for k, name in enumerate(comparable_columns(stat_columns(settings))):
        by_group = group_stats(comparable[:, k], labels, n_resamples, seed)
        groups[name] = {g: widened(st, comparable[index[g], k], floor[index[g], k], name)
                       for g, st in by_group.items()}
    return stats, groups


def _cell(v: float) -> str:
    return "" if math.isnan(v) else f"{v:.10g}"


def _stat(v: float) -> float | None:
    return None if math.isnan(v) else float(v)


def stories_rows(curves: Sequence[Curve], stats: BatchStats, settings: CurveSettings,
                 failed: Mapping[str, str] | None = None, intervals: StoryIntervals | None = None, *,
                 comparable: np.ndarray | None = None) -> Rows:
    """One row per story; a story in `failed` (id -> why) keeps its row, with
    undefined statistics and the reason in `nan_reasons`. After `nan_reasons` come the
    95% interval of each statistic (`<stat>_lo`, `<stat>_hi`; undefined without
    `intervals`, for a story without verdict counts, and where the statistic is NaN),
    then the comparable second-order statistics (docs/metrics.md 1.9) and their
    intervals (undefined without `intervals` or counts; `comparable`: their matrix, if the caller has it)."""
    names = stat_columns(settings)
    extra = comparable_columns(names)
    comparable = comparable_matrix(curves, settings, failed or ()) if comparable is None else comparable
    if intervals is not None:
        c_lo, c_hi = comparable_intervals(curves, comparable, settings, failed or ())
    else:
        c_lo = c_hi = np.full(comparable.shape, np.nan)
    comparable_cells = [[None if v != v else v for v in row] + [None if v != v else v for pair in zip(a, b)
                                                                for v in pair]
                        for row, a, b in zip(comparable.tolist(), c_lo.tolist(), c_hi.tolist())]
    # as Python floats at once (a numpy scalar per cell cost a third of writing the file); NaN: v != v
    matrix = stat_matrix(stats).tolist()
    n_positions = stats.n_positions.tolist()
    if intervals is not None:
        lo, hi = intervals.lo.tolist(), intervals.hi.tolist()
    unbounded: list[float | None] = [None] * (2 * len(names))
    rows: list[tuple[Cell, ...]] = []
    for i, c in enumerate(curves):
        if failed and c.id in failed:
            rows.append((c.id, c.group, 0, *(None for _ in names), f"failed: {failed[c.id]}", *unbounded,
                         *(None for _ in range(3 * len(extra)))))
            continue
        reasons = "; ".join(Reason(int(stats.reasons[i])).describe())
        bounds = unbounded if intervals is None else [
            None if v != v else v for pair in zip(lo[i], hi[i]) for v in pair]
        rows.append((c.id, c.group, n_positions[i], *(None if v != v else v for v in matrix[i]), reasons, *bounds,
                     *comparable_cells[i]))
    return Rows(columns=("id", "group", "n_positions", *names, "nan_reasons", *interval_columns(names), *extra,
                         *interval_columns(extra)), rows=rows)


def stories_csv(curves: Sequence[Curve], stats: BatchStats, settings: CurveSettings,
                failed: Mapping[str, str] | None = None, intervals: StoryIntervals | None = None) -> str:
    """stories.csv: `stories_rows` as CSV."""
    return rows_csv(stories_rows(curves, stats, settings, failed, intervals))


def groups_rows(groups: dict[str, dict[str, GroupStat]]) -> Rows:
    """One row per group and statistic: its mean, sd, 95% half-width, bootstrap
    interval, stories with a value and stories without."""
    names = list(groups)
    labels = list(groups[names[0]]) if names else []
    rows: list[tuple[Cell, ...]] = []
    for g in labels:
        for name in names:
            s = groups[name][g]
            rows.append((g, name, _stat(s.mean), _stat(s.sd), _stat(s.ci95), _stat(s.boot_lo), _stat(s.boot_hi),
                         int(s.n), int(s.n_nan)))
    return Rows(columns=("group", "statistic", "mean", "sd", "ci95", "boot_lo", "boot_hi", "n", "n_nan"), rows=rows)


def groups_csv(groups: dict[str, dict[str, GroupStat]]) -> str:
    """groups.csv: `groups_rows` as CSV."""
    return rows_csv(groups_rows(groups))


def format_group_table(groups: dict[str, dict[str, GroupStat]]) -> str:
    """Terminal tables: one row per group, mean ± 95% half-width per statistic; the
    paper's statistics, then the comparable second-order ones (docs/metrics.md 1.9)."""
    paper = {k: v for k, v in groups.items() if not is_comparable(k)}
    comparable = {k.removesuffix(SUFFIX): v for k, v in groups.items() if is_comparable(k)}
    out = _group_table(paper)
    if comparable and out:
        out += ("\n\ncomparable second-order statistics (turns beyond the endings' noise; docs/metrics.md 1.9):\n"
                + _group_table(comparable))
    return out


def _group_table(groups: dict[str, dict[str, GroupStat]]) -> str:
    names = list(groups)
    if not names:
        return ""
    labels = list(groups[names[0]])

    def cell(s: GroupStat, n: int) -> str:
        if math.isnan(s.mean):
            return "—"
        # a value of fewer stories than the row's n says how many (METRICS 1.5: NaNs counted and reported)
        return (f"{s.mean:.3f}" if math.isnan(s.ci95) else f"{s.mean:.3f}±{s.ci95:.3f}") + (
            f" (n = {s.n})" if s.n < n else "")

    n_col = [max((groups[n][g].n + groups[n][g].n_nan) for n in names) for g in labels]
    rows = [["group", "n", *names]]
    rows += [[g, str(n_col[i]), *(cell(groups[n][g], n_col[i]) for n in names)] for i, g in enumerate(labels)]
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(widths[k]) if k == 0 else c.rjust(widths[k]) for k, c in enumerate(r)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def metrics(curves_path: str | os.PathLike, out_dir: str | os.PathLike,
            settings: CurveSettings = CurveSettings()) -> MetricsResult:
    """Read curves, compute story and group statistics, write stories.csv and groups.csv (when a
    curve was read)."""
    curves, errors = read_curves(curves_path)
    comparable = comparable_matrix(curves, settings)
    stats, groups = compute(curves, settings, comparable=comparable)
    intervals = compute_intervals(curves, stats, settings)
    result = MetricsResult(curves=curves, stats=stats, settings=settings, groups=groups, errors=errors,
                           intervals=intervals, comparable=comparable)
    if curves:  # no curve read (an empty or wholly bad file): an earlier run's outputs stay, not empty ones
        result.write(Path(out_dir))
    return result
