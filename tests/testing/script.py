"""A file of Python run in this process as `python FILE` or a notebook cell runs it,
for tests whose subject is what the code prints and writes (the docs' examples), not
the interpreter: a fresh namespace of its own, so an example that forgets an import
fails as it would for the user, without starting an interpreter and loading the
package and numba's kernels again (≈ 2 s of CPU an example)."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import subprocess
import sys
import traceback
import warnings
from pathlib import Path

import pytest

__all__ = ["run_python_here", "run_file_here"]


def run_file_here(path: str | Path, *args: object, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """`python PATH ARGS` run in this process: `path`'s folder first on sys.path, as the
    interpreter puts it (a bench script imports its neighbours), `args` its sys.argv."""
    path = Path(path).resolve()
    with pytest.MonkeyPatch.context() as m:
        m.syspath_prepend(str(path.parent))
        return run_python_here(path.read_text(encoding="utf-8"), cwd or Path.cwd(), str(path), [str(a) for a in args])


def run_python_here(code: str, cwd: str | Path, filename: str = "example.py",
                    args: list[str] | None = None) -> subprocess.CompletedProcess:
    """`code` run in `cwd` as the module ``__main__`` (`args`: its command line after
    the file's name), a top-level `await` allowed (as a notebook cell allows it); returns
    the CompletedProcess a subprocess would: status 0, or 1 with the traceback on stderr
    (SystemExit: its code), and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    status = 0
    with pytest.MonkeyPatch.context() as m, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings():
        _interpreter_warnings()
        m.chdir(cwd)
        m.setattr(sys, "argv", [filename, *(args or [])])
        try:
            compiled = compile(code, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(compiled, {"__name__": "__main__", "__file__": filename})
            if asyncio.iscoroutine(result):
                asyncio.run(result)
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception:  # what the interpreter would print before exiting 1 (Ctrl-C stops the tests)
            traceback.print_exc(file=err)
            status = 1
    return subprocess.CompletedProcess([sys.executable, filename, *(args or [])], status, out.getvalue(),
                                       err.getvalue())


def _interpreter_warnings() -> None:
    """The warning filters of a fresh `python` (printed to stderr, not the tests' errors)."""
    warnings.resetwarnings()
    for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
    warnings.showwarning = _to_stderr  # not into the list pytest records the test's own warnings in


def _to_stderr(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))
