"""The files a run record names outside its folder (the corpus, a fair-play stories
file), read by the view only when they are regular files of a bounded size.

A run folder may come from someone else, and a path it names may now be a device,
a FIFO or a file of many GB: `/dev/zero` as the corpus grew the view to 10 GB with
no answer (review 2026-12-02, S6), and opening a FIFO blocks for ever. So the path
is looked at first (stat, which never blocks), and the view reads it only when it
is a regular file (or a folder of regular .txt files) of at most MAX_BYTES; it keeps
only the stories of the run."""

from __future__ import annotations

import stat
from pathlib import Path

__all__ = ["MAX_BYTES", "unreadable"]

MAX_BYTES = 1 << 30  # 1 GiB: ≈ 200,000 stories of 5,000 words; the paper's corpora are a few MB


def unreadable(path: str | Path, what: str, limit: int = MAX_BYTES) -> str | None:
    """Why the view does not read `path` (`what` names it in the note), or None."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        return f"{what} ({p}) cannot be read: {e.strerror or e}"
    if stat.S_ISDIR(st.st_mode):  # a folder of .txt stories: its regular .txt files only are read
        try:
            size = sum(f.stat().st_size for f in p.iterdir() if f.suffix == ".txt" and f.is_file())
        except OSError as e:
            return f"{what} ({p}) cannot be read: {e.strerror or e}"
    elif not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                or stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "no regular file")
        return f"{what} ({p}) is {kind}, not a regular file: the view does not read it"
    else:
        size = st.st_size
    if size > limit:
        return (f"{what} ({p}) holds {size:,} bytes, more than the {limit:,} the view reads: it is not read "
                "(is it the file the run was given?)")
    return None
