"""The view tests' fixtures: the runs to view (made once per session, view_fixtures.py),
the view serving them from a thread of this process (`viewer`, view_fixtures.ViewHere)
and a Chromium driven by Selenium (the slow browser tests), one of each for each test
module that asks."""

from __future__ import annotations

import pytest
from hostile_runs import HostileRun, make_hostile_run
from view_fixtures import Runs, ViewHere, chromium, make_runs


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> Runs:
    return make_runs(tmp_path_factory)


@pytest.fixture(scope="session")
def hostile(tmp_path_factory) -> HostileRun:
    return make_hostile_run(tmp_path_factory)


@pytest.fixture(scope="module")
def viewer(runs):
    v = ViewHere(runs.a, runs.b, runs.fp)
    yield v
    v.stop()


@pytest.fixture(scope="module")
def browser():
    yield from chromium()
