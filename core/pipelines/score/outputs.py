"""What a complete score run writes into its folder: positions.jsonl (in corpus
order, the same bytes however often the run was resumed), stories.csv and
groups.csv (core/reports/metrics.py), meta.jsonl and, with --save-texts,
texts.jsonl. A story that failed keeps its row in stories.csv, with empty
statistics and the reason; it is left out of every other file and of the groups."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import msgspec

from tension.core.config import ScoreConfig
from tension.core.formats import PositionLine
from tension.core.inputs.corpus import Story
from tension.core.inputs.jsonl import atomic_write
from tension.core.pipelines.score.positions import Position
from tension.core.prompts import score as prompts
from tension.core.reports.comparable import comparable_matrix
from tension.core.reports.metrics import Curve, MetricsResult, compute
from tension.core.reports.story_intervals import compute_intervals
from tension.core.run.record import Failure

__all__ = ["PositionResult", "TextsSpool", "position_result", "position_line", "write_outputs"]

_line_encoder = msgspec.json.Encoder()


# A line of positions.jsonl, as `score` writes it and `metrics`/`report` read it back:
# one definition for both (core/formats.py).
PositionResult = PositionLine


def position_result(story: Story, pos: Position, endings: list[str], answers: list[str | None]) -> PositionResult:
    """The tally of a position's verdicts (None: an empty ending, not judged)."""
    n_match = n_empty = n_malformed = 0
    for a in answers:
        if a is None:
            n_empty += 1
            continue
        match, malformed = prompts.parse_verdict(a)
        n_match += match
        n_malformed += malformed
    n = len(endings)
    return PositionResult(id=story.id, group=story.group, k=pos.k, pct=pos.pct, n_endings=n, n_match=n_match,
                          n_empty=n_empty, n_malformed=n_malformed, no_rate=1.0 - n_match / n)


def position_line(res: PositionResult) -> bytes:
    return _line_encoder.encode(res) + b"\n"


class TextsSpool:
    """texts.jsonl's lines as positions complete, in an anonymous file beside the
    outputs, with only their place kept in memory: a run's endings and verdicts
    (100 endings a position) never have to fit in memory, and the final file is
    still written in corpus order."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.file: IO[bytes] | None = None
        self.where: dict[tuple[int, int], tuple[int, int]] = {}  # (story index, k) -> (offset, length)

    def add(self, key: tuple[int, int], record: dict[str, Any]) -> None:
        if self.file is None:
            self.file = tempfile.TemporaryFile(dir=self.folder)  # gone when closed, or when the process ends
        line = _line_encoder.encode(record) + b"\n"
        # only appends move the position (`lines` reads with pread), so tell() is the end
        self.where[key] = (self.file.tell(), len(line))
        self.file.write(line)

    def lines(self, failed: dict[int, Failure]) -> Iterator[bytes]:
        """The lines in (story, k) order, without the failed stories'."""
        if self.file is None:
            return
        self.file.flush()
        fd = self.file.fileno()
        for key in sorted(self.where):
            if key[0] not in failed:
                offset, length = self.where[key]
                yield os.pread(fd, length, offset)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def write_outputs(out: Path, cfg: ScoreConfig, stories: list[Story], results: dict[tuple[int, int], PositionResult],
                  texts: TextsSpool, failed: dict[int, Failure]) -> MetricsResult:
    """Every output file; `results` and `texts` are keyed by (story index, k). The
    line files are written as streams: no output is whole in memory. Returns the
    statistics computed (what the API's result holds)."""
    atomic_write(out / "positions.jsonl", (
        position_line(results[key]) for key in sorted(results) if key[0] not in failed))
    settings = cfg.curve_settings()
    curves = _curves(stories, results, failed)
    why = {stories[si].id: f"{f.stage}: {f.error}" for si, f in failed.items()}
    comparable = comparable_matrix(curves, settings, why)  # once: the groups and stories.csv both read it
    stats, groups = compute(curves, settings, failed=why, comparable=comparable)
    intervals = compute_intervals(curves, stats, settings, failed=why)
    computed = MetricsResult(curves=curves, stats=stats, settings=settings, groups=groups, errors=[],
                             intervals=intervals, failed=why, comparable=comparable)
    computed.write(out)  # stories.csv and groups.csv
    atomic_write(out / "meta.jsonl", b"".join(
        _line_encoder.encode({"id": st.id, "group": st.group, "words": st.words, "meta": st.meta}) + b"\n"
        for si, st in enumerate(stories) if si not in failed))
    if cfg.save_texts:
        atomic_write(out / "texts.jsonl", texts.lines(failed))
    return computed


def _curves(stories: list[Story], results: dict[tuple[int, int], PositionResult],
            failed: dict[int, Failure]) -> list[Curve]:
    by_story: dict[int, list[PositionResult]] = {}
    for (si, _k), r in sorted(results.items()):
        by_story.setdefault(si, []).append(r)
    out = []
    for si, story in enumerate(stories):
        rs = [] if si in failed else by_story.get(si, [])
        out.append(Curve(id=story.id, group=story.group, x=[r.pct for r in rs], y=[r.no_rate for r in rs],
                         n_endings=[r.n_endings for r in rs], n_match=[r.n_match for r in rs]))
    return out
