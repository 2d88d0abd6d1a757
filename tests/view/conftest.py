"""The view tests' fixtures: the runs to view (made once per session, view_fixtures.py),
a `tension-run view` process serving them and a Chromium driven by Selenium (the slow
browser tests), one of each for each test module that asks."""

from __future__ import annotations

import pytest
from view_fixtures import Viewer, chromium, made_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return made_runs(tmp_path_factory)


@pytest.fixture(scope="module")
def viewer(runs):
    v = Viewer(runs.a, runs.b, runs.fp, env=runs.env)
    yield v
    v.stop()


@pytest.fixture(scope="module")
def browser():
    yield from chromium()
