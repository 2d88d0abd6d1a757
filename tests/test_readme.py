"""The README's setup section holds exactly two commands, and CI runs the second."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_main_job_of_the_first_command_runs(tmp_path):
    """The part of the first command after the install — the demo on the real
    embedded server — run with this interpreter; then again, from the cache. The
    first leaves its server running (--keep-server), so the second needs no start
    and reuses it, and `serve --stop` stops it; a third, every answer cached, starts
    no server at all."""
    job = setup_commands()[0].split("&&")[-1].strip()
    argv = shlex.split(job)
    assert argv[0].endswith("tension-run") and argv[1] == "demo"
    argv = [str(Path(sys.executable).parent / "tension-run"), *argv[1:], "--out", str(tmp_path / "demo"),
            "--cache", str(tmp_path / "cache")]
    import os

    from tension.testing.real_env import real_home_env

    if "TENSION_TEST_EMBEDDED_PORT" in os.environ:  # a run by hand beside CI's (conftest.EMBEDDED_TEST_PORT)
        argv += ["--port", os.environ["TENSION_TEST_EMBEDDED_PORT"]]

    env = real_home_env()  # the one embedded installation the slow tests share
    r = subprocess.run([*argv, "--keep-server"], cwd=ROOT, capture_output=True, text=True, timeout=3600, env=env)
    started = "using the server already running" not in r.stderr  # another slow test's server, left to it
    try:
        _check_the_demo_and_its_rerun(r, argv, tmp_path, env, started)
    finally:
        if started:  # stopped even when a check failed: the next slow test must not find it
            stop = subprocess.run([argv[0], "serve", "--stop"], capture_output=True, text=True, timeout=120, env=env)
    if started:
        assert stop.returncode == 0 and "stopped the embedded server" in stop.stdout, stop.stderr
        # a third demo, the server stopped and every answer cached: scored without starting it
        third = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
        assert third.returncode == 0, third.stderr[-3000:]
        assert "every answer of the demo is in the cache" in third.stderr
        assert "requests sent 0 generation, 0 judge" in third.stdout and "kell-island" in third.stdout
        assert "stopped the embedded server" not in third.stderr and "log: " not in third.stderr


def _check_the_demo_and_its_rerun(r, argv: list[str], tmp_path: Path, env: dict, started: bool) -> None:
    assert r.returncode == 0, r.stderr[-3000:]
    if started:
        assert "left the embedded server running at" in r.stderr and "`tension-run serve --stop`" in r.stderr
        log = Path(re.search(r"log: (\S+server-\S+\.log)", r.stderr).group(1)).read_text(errors="replace")
        assert "Explicitly set (1.0/" in log  # the demo's KV space (DEMO_KV_CACHE_GIB), not serve's 4 GiB
    assert "kell-island" in r.stdout and (tmp_path / "demo" / "curve.png").stat().st_size > 5000
    assert (tmp_path / "demo" / "report.md").is_file()
    # the demo names the view of its run, and the view finds the endings behind its points
    assert f"tension-run view {tmp_path / 'demo'}" in r.stdout
    site = tmp_path / "site"
    v = subprocess.run([argv[0], "view", str(tmp_path / "demo"), "--export", str(site), "--endings"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600, env=env)
    assert v.returncode == 0, v.stderr[-3000:]
    assert '"cached":true' in next((site / "r0" / "endings").iterdir()).read_text()
    again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=3600, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "requests sent 0 generation, 0 judge" in again.stdout
    assert "using the server already running" in again.stderr  # no second start
    assert "stopped the embedded server" not in again.stderr  # it did not start it, so it leaves it


def test_the_tests_write_bytecode_as_the_readme_says():
    """The README's test command has uv compile the packages' bytecode at the install (the
    workers then load it instead of each compiling the same modules at once) and says the
    tests write the bytecode of the project's own modules (tests/conftest.py), even where
    PYTHONDONTWRITEBYTECODE is set: here, and in every child a test starts."""
    cmd = setup_commands()[1]
    assert "uv pip install" in cmd and "--compile-bytecode" in cmd
    assert sys.dont_write_bytecode is False
    child = subprocess.run([sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"],
                           capture_output=True, text=True, timeout=60)
    assert child.stdout.strip() == "False", child
