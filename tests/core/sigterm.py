"""Stopping a `tension-run` command with SIGTERM, as a scheduler or a user's kill does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable


def run_until_sigterm(argv: list[str], started: Callable[[], bool], timeout: float = 30) -> tuple[int, str]:
    """Run ``python -m tension.core.cli ARGV`` in a child process, send it SIGTERM
    once `started()` holds, and return its exit status and stderr. The child must
    still be running when the signal goes."""
    proc = subprocess.Popen([sys.executable, "-m", "tension.core.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    deadline = time.monotonic() + timeout
    while not started() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err
