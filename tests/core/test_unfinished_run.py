"""The verbs that read a finished score run (report, compare, metrics RUN_DIR, subsample,
audit sample) given the folder of a run stopped before it wrote positions.jsonl (review of
the reports, 2026-12-07). They said "not a score run: no positions.jsonl in this folder"
(metrics: "cannot open") about the folder the user had just scored, with no word of the
run that stopped nor of how to finish it. Now each says the run stopped, what it kept and
the command that resumes it; that command, run as printed, finishes the run, and the verb
then works. The run is stopped by a real process at a moment of its own (tests/testing
interrupt.stopped_at): while it writes positions.jsonl."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.testing.corpus import make_corpus
from tension.testing.interrupt import stopped_at
from tension.testing.openai_server import LoopbackServer

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bin" / "tension-run"


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ, HOME=str(tmp / "home"), XDG_CACHE_HOME=str(tmp / "home" / ".cache"),
               PYTHONPATH=os.pathsep.join(sys.path))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    return env


def test_a_run_stopped_before_its_outputs_is_said_so_with_the_command_that_finishes_it(tmp_path, capsys,
                                                                                        monkeypatch):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    with LoopbackServer(model=["test-gen"]) as srv:
        argv = [sys.executable, str(BIN), "score", corpus.name, "--out", "run", "--cache", "cache", "--base-url",
                srv.base_url, "--model", "test-gen", "--endings", "3", "--seed", "1", "--no-progress"]
        env = stopped_at(tmp_path / "hook", "SIGINT", opens=".positions.jsonl.*.tmp", env=_env(tmp_path))
        r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
        assert r.returncode == 130, r.stderr
        run = tmp_path / "run"
        assert not (run / "positions.jsonl").exists() and (run / "positions.partial.jsonl").is_file()
        done = main(["score", str(corpus), "--out", str(tmp_path / "done"), "--cache", str(tmp_path / "cache"),
                     "--base-url", srv.base_url, "--model", "test-gen", "--endings", "3", "--seed", "1",
                     "--no-progress"])
        assert done == 0
        monkeypatch.chdir(tmp_path)
        commands = []
        for verb in (["report", "run"], ["compare", "done", "run"], ["compare", "run", "done"],
                     ["metrics", "run", "--out", "m"], ["subsample", "run"], ["audit", "sample", "run"]):
            capsys.readouterr()
            assert main(verb) == 1, verb
            err = capsys.readouterr().err
            assert "Traceback" not in err
            assert "run: not a finished score run: it stopped before writing positions.jsonl (status interrupted; " \
                   in err, (verb, err)
            assert "position(s) in positions.partial.jsonl" in err and "not a score run" not in err, err
            assert "Resume it from the folder it was started in, with the command that started it" in err
            commands.append(err.rstrip("\n").rsplit("\n", 1)[1].strip())
        assert len(set(commands)) == 1, commands
        # the advice, run as printed, from the folder the run was started in
        again = subprocess.run(commands[0], shell=True, capture_output=True, text=True, env=_env(tmp_path),
                               cwd=tmp_path, timeout=180)
        assert again.returncode == 0, again.stderr
    capsys.readouterr()
    assert main(["report", "run"]) == 0
    assert main(["compare", "done", "run"]) == 0
    # a folder that is no run at all is still said to be none
    (tmp_path / "empty").mkdir()
    capsys.readouterr()
    assert main(["report", "empty"]) == 1
    assert "empty: not a score run: no positions.jsonl in this folder" in capsys.readouterr().err


@pytest.mark.parametrize("verb", [["report"], ["metrics", "--out", "m"]])
def test_a_folder_with_only_a_partial_file_is_said_to_be_unfinished(tmp_path, capsys, verb, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "positions.partial.jsonl").write_text('{"id": "a"}\n')
    assert main([verb[0], "run", *verb[1:]]) == 1
    err = capsys.readouterr().err
    assert "not a finished score run: it stopped before writing positions.jsonl (1 position(s) in " in err, err
    assert "Resume" not in err  # no run.json: no command to give
