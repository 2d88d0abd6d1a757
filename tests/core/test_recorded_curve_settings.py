"""`report RUN_DIR` and `metrics RUN_DIR` recompute a run's statistics with the curve
settings the run was scored with (run.json), a flag given overriding its own (review of the
reports, 2026-12-07). They used the paper's defaults: a run scored with `--window 3
--thresholds 45 --late-threshold 0.7` had report.md, table6.csv and table18.csv rebuilt by
the advice its own report.md prints ("Rebuild with `tension-run report RUN`") at window 5,
IR30/60/120 and late ≥ 0.8, beside stories.csv and groups.csv at the run's settings: its
late NR went from 0.749 to 0.759 with no word. The view and subsample already read the run's."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

import tension
from tension.core.cli import main
from tension.testing.corpus import make_corpus

pytestmark = pytest.mark.in_process

CURVE = ["--window", "3", "--thresholds", "45", "--late-threshold", "0.7", "--retention-window", "4",
         "--interval-resamples", "200", "--interval-seed", "3"]


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.fixture
def run(server, tmp_path) -> Path:
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=5)
    out = tmp_path / "run"
    assert main(["score", str(corpus), "--out", str(out), "--base-url", server.base_url, "--model", "test-gen",
                 "--judge-model", "test-judge", "--no-progress", "--cache", str(tmp_path / "cache"), "--endings", "6",
                 "--seed", "1", *CURVE]) == 0
    return out


def test_report_rebuilt_as_its_advice_says_is_the_report_score_wrote(run, tmp_path, capsys, monkeypatch):
    scored = {name: (run / name).read_bytes() for name in ("table6.csv", "table18.csv", "stories.csv", "groups.csv")}
    md = (run / "report.md").read_text()
    advice = md.rsplit("Rebuild with `", 1)[1].split("`", 1)[0]
    assert advice == f"tension-run report {run}"
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(advice.split()[1:]) == 0
    for name, before in scored.items():
        assert (run / name).read_bytes() == before, name
    assert "curve settings: window 3, thresholds 45°, late ≥ 0.7, retention window 4" in (run / "report.md").read_text()
    # a flag given overrides the run's own setting, the others stay the run's
    assert main(["report", str(run), "--window", "1"]) == 0
    assert "curve settings: window 1, thresholds 45°, late ≥ 0.7, retention window 4" in (run / "report.md").read_text()
    assert (run / "table6.csv").read_text().splitlines()[0].endswith(",IR45")


def test_metrics_of_a_run_folder_reads_the_runs_curve_settings(run, tmp_path, capsys):
    assert main(["metrics", str(run), "--out", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m" / "stories.csv").read_bytes() == (run / "stories.csv").read_bytes()
    assert (tmp_path / "m" / "groups.csv").read_bytes() == (run / "groups.csv").read_bytes()
    r = tension.metrics(run, out=tmp_path / "api")
    assert (tmp_path / "api" / "stories.csv").read_bytes() == (run / "stories.csv").read_bytes()
    assert r.computed.settings.window == 3
    # a flag overrides; a curves file (no run) has the paper's defaults
    assert main(["metrics", str(run), "--out", str(tmp_path / "m2"), "--thresholds", "30,60"]) == 0
    assert list(_rows(tmp_path / "m2" / "stories.csv")[0])[7:9] == ["ir30", "ir60"]
    positions = tmp_path / "positions.jsonl"
    shutil.copy(run / "positions.jsonl", positions)
    assert tension.metrics(positions, out=tmp_path / "m3").computed.settings.window == 5
