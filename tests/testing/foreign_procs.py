"""The processes of the real foreign servers the slow tests run (llama.cpp's llama-server,
llama-cpp-python's server, transformers serve, LiteLLM's proxy): each started in a session
of its own with its output in a log, waited for until a URL of its answers 200, and
stopped with its whole process group; and what its access log says arrived."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["answers", "wait_up", "stop", "running", "access_log"]

# uvicorn's access line (llama-cpp-python, transformers serve, LiteLLM): one a request answered
_ACCESS = re.compile(r'"(GET|POST) (\S+) HTTP/[\d.]+" (\d{3})')


def answers(url: str, timeout: float = 5) -> bool:
    """`url` answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def wait_up(name: str, url: str, proc: subprocess.Popen, log: Path, seconds: float) -> None:
    """Until `url` answers 200; raises, with the log's end, where `proc` exits first or
    `seconds` pass."""
    deadline = time.monotonic() + seconds
    while not answers(url):
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited ({proc.returncode}) before {url} answered; log {log}:\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not answer {url} within {seconds:g} s; log {log}:\n{_tail(log)}")
        time.sleep(0.5)


def stop(proc: subprocess.Popen, grace: float = 20) -> None:
    """SIGTERM to the process's own group (started by `running`, in a session of its own:
    its helpers, such as multiprocessing's resource tracker, go with it), SIGKILL after
    `grace` seconds (a SIGTERM'd llama-server may hold open requests for minutes)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def running(name: str, cmd: Sequence[str], log: Path, ready_url: str, *, seconds: float = 300,
            cwd: Path | None = None, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """`cmd` in a session of its own, its stdout and stderr in `log`, until `ready_url`
    answers 200 (`wait_up`); stopped with its group (`stop`) when the block ends."""
    with log.open("wb") as f:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_up(name, ready_url, proc, log, seconds)
        yield proc
    finally:
        stop(proc)


def access_log(log: Path) -> list[tuple[str, str, int]]:
    """(method, path, status) of every request a uvicorn server's log shows it answered, in order."""
    return [(m, p, int(s)) for m, p, s in _ACCESS.findall(log.read_text(errors="replace"))]
