"""The real environment of the test run, as it was before the tests' private homes
(tests/conftest.py gives every test its own HOME): the slow tests that run the
embedded server share its one installation (≈ 3.4 GB) under the real cache folder.
Read when this module is first imported, which conftest does before any test."""

from __future__ import annotations

import os

__all__ = ["REAL_ENV", "EMBEDDED_TEST_PORT", "real_home_env"]

REAL_ENV = {k: os.environ[k] for k in ("HOME", "XDG_CACHE_HOME") if k in os.environ}
# The slow tests' embedded server port: 8766, or another for a run by hand beside CI's (with its
# own XDG_CACHE_HOME), so that neither finds the other's server on its port; under pytest-xdist,
# one port per worker (gw0 the base, gw1 the next, …). The slow step runs them one at a time all
# the same (.ci/run step 3): they share the one embedded installation and its state file.
EMBEDDED_TEST_PORT = int(os.environ.get("TENSION_TEST_EMBEDDED_PORT", "8766")) + int(
    os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


def real_home_env() -> dict[str, str]:
    """This process's environment with the real HOME and XDG_CACHE_HOME back."""
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME")}
    env.update(REAL_ENV)
    return env
