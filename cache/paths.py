"""Where tension-run keeps its files: one folder under the user's cache folder."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/tension-run``, or ``~/.cache/tension-run`` when it is unset
    or empty: the LMDB store and the embedded server live below it."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tension-run"
