"""The README's setup section holds exactly two commands, and CI runs the second."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Setup", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", section, flags=re.S)]


def test_exactly_two_setup_commands():
    cmds = setup_commands()
    assert len(cmds) == 2, cmds
    assert all("\n" not in c for c in cmds)


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert setup_commands()[1] in ci.splitlines()


def test_main_job_of_the_first_command_runs(tmp_path):
    """The part of the first command after the install, run with this interpreter."""
    job = setup_commands()[0].split("&&")[-1].strip()
    argv = shlex.split(job)
    assert argv[0].endswith("tension-run")
    argv = [str(Path(sys.executable).parent / "tension-run")] + [
        str(tmp_path / "out") if a.startswith("runs/") else a for a in argv[1:]]
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
