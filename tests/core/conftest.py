"""Fixtures that several of tests/core/'s modules take (tests/conftest.py has the
servers, homes and the rest)."""

from __future__ import annotations

import pytest

from tension.testing.corpus import make_corpus


@pytest.fixture
def corpus(tmp_path):
    """Two synthetic stories (seed 3), for a run that needs a corpus but not a given one."""
    return make_corpus(tmp_path / "c.jsonl", 2, seed=3)


@pytest.fixture
def trio(loopback_servers):
    """Three test servers (in-process ones in a test marked `in_process`)."""
    return loopback_servers(3)
