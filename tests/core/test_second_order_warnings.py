"""Second-order statistics compared across different numbers of endings (issue 37,
docs/metrics.md 1.8, docs/reliability.md beside D11): `compare` marks the rows of IR,
Retain and convergence and says why under its table when runs A and B used different
endings (the general warning of D11 stays); `report` warns under its table when the
groups of one run hold different numbers of endings a position. What the verbs write
is the subject, not the wire: `server` is the test server's in-process door."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.testing.corpus import make_corpus

pytestmark = pytest.mark.in_process


def _score(server, corpus: Path, out: Path, cache: Path, endings: int) -> None:
    assert main(["score", str(corpus), "--out", str(out), "--base-url", server.base_url, "--model", "test-gen",
                 "--judge-model", "test-judge", "--no-progress", "--cache", str(cache), "--endings", str(endings),
                 "--seed", "1"]) == 0


def _table_rows(md: str) -> dict[str, str]:
    return {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}


def test_compare_marks_second_order_rows_when_the_endings_differ(server, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 4, seed=3)
    for name, n in (("a", 4), ("b", 8), ("a2", 4)):
        _score(server, corpus, tmp_path / name, tmp_path / "cache", n)
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    md = (tmp_path / "cmp" / "compare.md").read_text()
    for text in (md, out):
        rows = _table_rows(text)
        for stat in ("retain †", "convergence †", "ir30 †", "ir60 †", "ir120 †", "mean_nr", "late_nr"):
            assert stat in rows, (stat, text)
        assert "† a second-order statistic compared across different numbers of endings (A: 4, B: 8)" in text
        assert "`tension-run subsample`" in text
        # the per-pair table too: a story's ✓ on IR or Retain across 4 and 8 endings is partly the endings'
        pairs = text.split("Per pair of stories", 1)[1]
        header = next(line for line in pairs.splitlines() if line.startswith("| id |"))
        cells = [c.strip() for c in header.strip("|").split("|")]
        assert cells == ["id", "mean_nr", "late_nr", "retain †", "convergence †", "ir30 †", "ir60 †", "ir120 †"], cells
        assert "† a second-order statistic" in pairs
    # the same endings: no mark, no note
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a2")]) == 0
    assert "†" not in capsys.readouterr().out
    # the advice, followed: subsample gives each run its corrected values
    for run in ("a", "b"):
        assert main(["subsample", str(tmp_path / run), "--cache", str(tmp_path / "cache")]) == 0
        assert "corrected" in capsys.readouterr().out


def test_report_warns_when_its_groups_hold_different_endings(server, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 4, seed=3)  # groups a and b, two stories each
    _score(server, corpus, tmp_path / "r4", tmp_path / "cache", 4)
    _score(server, corpus, tmp_path / "r8", tmp_path / "cache", 8)
    assert "different numbers of endings" not in (tmp_path / "r4" / "report.md").read_text()
    # a folder whose group a was scored at 4 endings and group b at 8 (two runs' lines put together)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    lines = []
    for run, keep in (("r4", "a"), ("r8", "b")):
        for line in (tmp_path / run / "positions.jsonl").read_text().splitlines():
            if json.loads(line)["group"] == keep:
                lines.append(line)
    (mixed / "positions.jsonl").write_text("\n".join(lines) + "\n")
    (mixed / "run.json").write_text((tmp_path / "r8" / "run.json").read_text())
    capsys.readouterr()
    assert main(["report", str(mixed)]) == 0
    text = (mixed / "report.md").read_text()
    assert "**Warning:** the groups hold different numbers of endings a position (a 4.0, b 8.0)" in text, text
    # the advice, followed on the run whose groups differ
    capsys.readouterr()
    assert main(["subsample", str(mixed), "--cache", str(tmp_path / "cache")]) == 0
    assert "corrected" in capsys.readouterr().out
