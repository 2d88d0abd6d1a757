"""One folder under the user's cache folder holds the store and the embedded server."""

from __future__ import annotations

from pathlib import Path

from tension.cache.paths import cache_root
from tension.cache.store import default_path
from tension.core.serving.settings import paths


def test_cache_root_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "tension-run"
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # empty counts as unset
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "tension-run"


def test_the_store_and_the_embedded_server_live_below_it(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_path() == cache_root() / "llm.lmdb"
    assert paths().root == cache_root() / "embedded" == Path(tmp_path) / "tension-run" / "embedded"
