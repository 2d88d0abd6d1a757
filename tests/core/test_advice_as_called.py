"""score's advice for a long run ("with --endings 20 it would take …: COMMAND") repeats
the command as the tool was called (core/signals.py `command_line`). It was built from
sys.argv, whose first word under ``python -m tension.core.cli`` is the module's file,
which does not run. Each entry point here runs a real process against the test server
taught a one-slot llama-server (every request waits for the one before), and the advised
command is then run as printed, by the shell."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tension.testing.corpus import make_corpus
from tension.testing.interrupt import COMMAND_STARTED, stopped_at
from tension.testing.openai_server import LoopbackServer

ADVICE = re.compile(r"note: this run needs .*; with --endings 20 it would take ≈ [^:]+: (.*)")
SCRIPT = Path(sys.executable).parent / "tension-run"
ENTRIES = {"tension-run": [str(SCRIPT)], "python -m": [sys.executable, "-m", "tension.core.cli"]}


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_the_fewer_endings_advice_runs_as_printed(entry, tmp_path):
    if entry == "tension-run" and not SCRIPT.exists():
        pytest.skip("tension-run is not installed beside this Python")
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "home" / ".cache"))
    with LoopbackServer(model=["test-gen"], dialect="llamacpp", slots=1, delay=0.008) as srv:
        argv = [*ENTRIES[entry], "score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", srv.base_url,
                "--model", "test-gen", "--cache", str(tmp_path / "cache"), "--seed", "7", "--no-report",
                "--endings", "24", "--pct-min", "0.5", "--long-run-seconds", "1"]
        first = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert first.returncode == 0, first.stderr[-3000:]
        recorded = json.loads((tmp_path / "out" / "run.json").read_text())["argv"]
        assert recorded[:len(ENTRIES[entry])] == ENTRIES[entry], recorded  # run.json's command, as it ran
        said = [m for line in first.stderr.replace("\r", "\n").splitlines() if (m := ADVICE.match(line))]
        assert len(said) == 1, first.stderr[-3000:]
        command = said[0].group(1)
        assert command.startswith(" ".join(ENTRIES[entry]) + " score "), command  # as it was called
        again = subprocess.run(command, shell=True, capture_output=True, text=True, env=env, cwd=tmp_path,
                               timeout=300)
    assert again.returncode == 0, f"{command}\n{again.stderr[-3000:]}"
    positions = [json.loads(line) for line in (tmp_path / "out" / "positions.jsonl").read_text().splitlines()]
    assert positions and all(p["n_endings"] == 20 for p in positions)


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_the_resume_line_of_a_stop_while_starting_runs_as_printed(entry, tmp_path):
    """The same command line, where a stop comes while the command still imports
    (core/signals.py `_starting`): it named ``python -m tension.core.cli``, whichever
    Python ran it."""
    if entry == "tension-run" and not SCRIPT.exists():
        pytest.skip("tension-run is not installed beside this Python")
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    hooked = stopped_at(tmp_path / "hook", "SIGINT", imports="tension.core.config", env=env)
    stopped = subprocess.run([*ENTRIES[entry], "--version"], capture_output=True, text=True, env=hooked,
                             cwd=tmp_path, timeout=120)
    assert stopped.returncode == 130 and "nothing was done" in stopped.stderr, stopped.stderr
    command = stopped.stderr.splitlines()[-1].strip()
    assert command.startswith(" ".join(ENTRIES[entry])), command
    again = subprocess.run(command, shell=True, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert again.returncode == 0 and again.stdout.startswith("tension-run "), f"{command}\n{again.stderr}"


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_the_resume_line_of_a_stopped_verb_runs_as_printed(entry, tmp_path):
    """The CLI's own "Resume with the same command" (core/cli/__init__.py), for a stop once
    the verb has started: under ``python -m`` it named the module's file, which does not run."""
    if entry == "tension-run" and not SCRIPT.exists():
        pytest.skip("tension-run is not installed beside this Python")
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "home" / ".cache"))
    hooked = stopped_at(tmp_path / "hook", "SIGINT", imports=COMMAND_STARTED, env=env)
    argv = [*ENTRIES[entry], "estimate", str(corpus), "--tokenizer", "words", "--cache", str(tmp_path / "cache")]
    stopped = subprocess.run(argv, capture_output=True, text=True, env=hooked, cwd=tmp_path, timeout=120)
    assert stopped.returncode == 130 and "Resume with the same command" in stopped.stderr, stopped.stderr
    command = stopped.stderr.strip().splitlines()[-1].strip()
    assert command.startswith(" ".join(ENTRIES[entry]) + " estimate "), command
    again = subprocess.run(command, shell=True, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert again.returncode == 0 and "positions" in again.stdout, f"{command}\n{again.stderr[-3000:]}"
