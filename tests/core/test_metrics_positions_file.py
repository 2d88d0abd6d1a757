"""`metrics RUN/positions.jsonl` (issue 36, I7): the file of a score run's positions
given for its folder is read as the folder is, not as curves (one error per line)."""

from __future__ import annotations

import shutil

from tension.core.cli import main
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

OUTPUTS = ("stories.csv", "groups.csv")


def test_metrics_of_a_runs_positions_file_is_metrics_of_its_folder(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    run = tmp_path / "run"
    with LoopbackServer(model=["test-gen"]) as srv:
        assert main(["score", str(corpus), "--out", str(run), "--base-url", srv.base_url, "--model", "test-gen",
                     "--endings", "3", "--seed", "1", "--cache", str(tmp_path / "cache"), "--no-progress",
                     "--no-report"]) == 0
    shutil.copy(run / "positions.jsonl", tmp_path / "renamed.jsonl")
    capsys.readouterr()
    assert main(["metrics", str(run), "--out", str(tmp_path / "folder")]) == 0
    for given in (run / "positions.jsonl", tmp_path / "renamed.jsonl"):
        out = tmp_path / given.stem
        assert main(["metrics", str(given), "--out", str(out)]) == 0
        said = capsys.readouterr()
        assert "error" not in said.err and "2 stories" in said.out, said
        for name in OUTPUTS:
            assert (out / name).read_bytes() == (tmp_path / "folder" / name).read_bytes(), (given, name)
