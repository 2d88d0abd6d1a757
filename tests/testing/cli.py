"""The CLI run in this process, for tests whose subject is what a command prints,
writes and exits with, not its process (tests/conftest.py `tension_run`, and the
view's session fixtures): no interpreter to start, no imports, no kernels loaded from
numba's cache, which cost a `tension-run` subprocess ≈ 2 s of CPU a command."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

__all__ = ["run_here"]


def run_here(*args: object, env: dict[str, str | None] | None = None, input: str | None = None,
             cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """`tension-run ARGS` run by the CLI's `main()` in this process, returning what
    `subprocess.run` of the console script would: a CompletedProcess with the exit status
    (argparse's usage errors and --help included), stdout and stderr. `env` holds the
    command's own variables over this process's (None unsets one), `input` its standard
    input, `cwd` the folder it runs in; all are put back after it."""
    from tension.core.cli import main

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    said = ""
    with pytest.MonkeyPatch.context() as m, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        m.setattr(sys, "argv", ["tension-run", *argv])  # the run record and the resume hints quote it
        for name, value in (env or {}).items():
            if value is None:
                m.delenv(name, raising=False)
            else:
                m.setenv(name, value)
        if input is not None:
            m.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(input.encode())))
        if cwd is not None:
            m.chdir(cwd)
        try:
            status = main(argv)
        except SystemExit as e:  # argparse's usage errors and --help
            status, said = (e.code, "") if isinstance(e.code, int) or e.code is None else (1, f"{e.code}\n")
    return subprocess.CompletedProcess(["tension-run", *argv], status or 0, out.getvalue(), err.getvalue() + said)
