"""A numba cache folder for a process that cannot write the kernels' own (another
user's, tests/core/test_hostile_run.py): seeded with the kernels this checkout has
compiled (kernels/__pycache__), so that it loads them where it would compile every
one (≈ 7 s of CPU a process). A kernel not compiled yet, or whose source changed
since, is compiled there as before (numba checks each index against its source)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["seeded_numba_cache"]


def seeded_numba_cache(dest: Path) -> Path:
    """`dest`, for NUMBA_CACHE_DIR, holding copies of the kernels' compiled cache
    files where numba looks for them under it; every folder and file writable by any
    user (the process that reads it is another user's)."""
    from numba.core.caching import _CacheLocator  # the layout of NUMBA_CACHE_DIR

    import tension.kernels

    src = Path(tension.kernels.__file__).parent
    sub = dest / _CacheLocator.get_suitable_cache_subpath(str(src / "curves.py"))
    sub.mkdir(parents=True, exist_ok=True)
    compiled = src / "__pycache__"
    for f in compiled.iterdir() if compiled.is_dir() else ():
        if f.suffix in (".nbi", ".nbc"):
            shutil.copy2(f, sub / f.name)
            os.chmod(sub / f.name, 0o666)
    for d in (dest, sub):
        os.chmod(d, 0o777)
    return dest
