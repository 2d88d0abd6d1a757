"""The ownership of a run's output (`--out`): the folder made ready
(`prepare_out_dir`), the lock that lets one run at a time write it (`out_lock`: an
flock on a file beside the outputs, and this process's own registry of the lock
files its runs hold, for two calls of one process), and the outputs a run puts
into a folder it owns together or not at all (`outputs_together`), as one run
holds them from its outputs block until it settles (`RunOutputs`).

    out = prepare_out_dir(out_dir)
    with out_lock(out, out / LOCK_NAME, "score", "folder"):
        ...  # the run (core/run/lifecycle.py `open_run`) and its outputs (`Run.outputs`: `RunOutputs.block`)
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import re
import secrets
import shutil
import signal
import threading
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

from tension.core.errors import NO_ROOM, ConfigError, TensionError, cannot_write
from tension.core.signals import held

__all__ = ["LOCK_NAME", "Placement", "RunOutputs", "out_lock", "outputs_in", "outputs_together", "owns_folder",
           "prepare_out_dir"]

LOCK_NAME = ".tension-run.lock"


@contextlib.contextmanager
def out_lock(out: Path, lock_file: Path, verb: str, what: str) -> Iterator[None]:
    """Hold `lock_file` for the output `out` of a `verb` run, or fail at once if
    another run holds it: a second run writing the same partial file and outputs
    would interleave them. The lock dies with its process (even SIGKILL). A run of
    this same process holding it (another thread, another task) is named as such:
    the lock file's pid would be this process's own."""
    key = os.path.realpath(lock_file)
    with _held_lock:
        if key in _held:
            raise TensionError(f"--out {out} is in use by another call in this process (a {_held[key]} run still "
                               f"going: another thread or task); wait for it to finish or choose another {what} "
                               "(several runs may share one --cache)")
        _held[key] = verb
        if what == "folder":
            _folders.add(os.path.realpath(out))
    try:
        with _flock(out, lock_file, verb, what):
            yield
    finally:
        with _held_lock:
            del _held[key]
            if what == "folder":
                _folders.discard(os.path.realpath(out))


_held: dict[str, str] = {}  # the lock files this process's runs hold, and their verbs
_folders: set[str] = set()  # the --out folders this process's runs hold (score, fairplay; not generate's file)
_held_lock = threading.Lock()


def owns_folder(folder: Path) -> bool:
    """A run of this process holds `folder` as its --out folder (`out_lock` with what="folder"):
    every output in it is its own to write (and to put back)."""
    with _held_lock:
        return os.path.realpath(folder) in _folders


@contextlib.contextmanager
def _flock(out: Path, lock_file: Path, verb: str, what: str) -> Iterator[None]:
    f = lock_file.open("a+")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            raise TensionError(f"--out {out} is in use by another tension-run {verb} (pid {holder}); wait for it "
                               f"to finish or choose another {what} (several runs may share one --cache)") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        yield
    finally:
        f.close()


def prepare_out_dir(out_dir: str | os.PathLike) -> Path:
    """The --out folder, made if missing; a file in its place is a usage error."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    return out


# -- a run's outputs together -----------------------------------------------------------

# what `outputs_together` keeps aside (".NAME.<hex>.earlier") or swaps out (".NAME.<hex>.new") under hidden
# names: what a run killed (SIGKILL) in its outputs block left, removed by the next one
_ASIDE = re.compile(r"^\..+\.[0-9a-f]{12}\.(earlier|new)$")
# no hard link on this file system, or not for this file: the earlier output is copied instead
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


class Placement:
    """The outputs of a run's folder while the run writes its own (`outputs_together`):
    the earlier ones kept aside until the run is settled, then either dropped, the
    run's outputs staying (`keep_new`: the run is complete), or put back in place of
    the run's (`put_back`: it is not). `written`: the block ended, every output of
    the run in place; `not_put_back`: once put back, what could not be (named)."""

    def __init__(self, folder: Path, own: Collection[str], say: Callable[[str], None]):
        self.folder, self.own, self.say = folder, own, say
        self.kept = _keep(folder, own)  # output name -> its earlier self, under a hidden name
        self.written = False
        self.not_put_back: list[str] | None = None  # None: not put back

    def keep_new(self) -> None:
        """The run is complete: its outputs stay, the earlier ones go."""
        kept, self.kept = self.kept, {}
        for aside in kept.values():
            _remove(aside)

    def put_back(self) -> None:
        """The run is not complete: the folder's outputs as they were before it (its own
        removed), while stop signals wait."""
        kept, self.kept = self.kept, {}
        self.not_put_back = _put_back(self.folder, self.own, kept)
        if self.not_put_back:
            self.say(f"{self.folder}: {', '.join(self.not_put_back)} could not be put back as they were before "
                     "this run: they may be this run's, unfinished")


def outputs_in(folder: Path, own: Collection[str]) -> list[str]:
    """The outputs in `folder` now: its entries but hidden ones (the lock, temporary
    files) and `own` (the run's partial file and record, which are not outputs)."""
    try:
        return sorted(p.name for p in folder.iterdir() if _is_output(p.name, own))
    except OSError:
        return []


@contextlib.contextmanager
def outputs_together(folder: Path, own: Collection[str], say: Callable[[str], None]) -> Iterator[Placement]:
    """The block in which a run writes its outputs into the folder it owns, one file
    after another. When it ends in an exception (a stop, a failure: a full disk, a
    report that cannot be drawn), the folder's outputs are put back as they were
    before it, an earlier run's whole or none, while stop signals wait (core/signals.py
    `held`); when it ends, the run's outputs are all in place, and the earlier ones
    stay kept until the run settles (`Placement`: a stop before its record is written
    puts them back too). So a folder never holds some outputs of this run beside some
    of an earlier one, or a report.md that says "complete" beside a record that says
    "interrupted" (issue 58, item 5).

    Before the block, each output in the folder (`outputs_in`) is kept under a hidden
    name beside it: a hard link (a copy where the file system has none), a folder as
    a tree of them. The outputs are written by rename (`atomic_write`,
    `write_together`), which leaves a link's bytes as they were. `own`, the run's
    partial file and record, are left alone: what resume needs, and the record of
    how the run ended. What a run killed in its block kept aside (SIGKILL) is removed
    first. `say` tells what could not be put back, if anything."""
    for p in _entries(folder):
        if _ASIDE.match(p.name):
            _remove(p)
    placement = Placement(folder, own, say)
    try:
        yield placement
        placement.written = True
    except BaseException:
        placement.put_back()
        raise


class RunOutputs:
    """One run's outputs in the --out folder it owns (its partial file's, under its lock;
    generate's one file has none): written in its outputs block (`block`), settled as the
    run closes (`settle`), and named in its record when it did not complete (`earlier`).

    `claims` are the files that say the run is complete (report.md): written in the
    block, so a run that ends before its outputs are all in place puts them back with
    the rest; where that fails, they are removed (`unclaim`), so that no file
    contradicts the record's "interrupted" or "failed"."""

    def __init__(self, partial: Path | None, record_path: Path | None):
        self.partial, self.record_path = partial, record_path
        self.claims: list[Path] = []
        # the outputs as the block left them (None: no block yet, or no folder of the run's own)
        self.placement: Placement | None = None

    def folder(self) -> Path | None:
        """The --out folder this run owns (its partial file's, under its lock), or None."""
        if self.partial is None or not owns_folder(self.partial.parent):
            return None
        return self.partial.parent

    def own(self, folder: Path) -> set[str]:
        """The run's own files in its folder, which are not outputs: its partial file (what
        resume needs) and its record."""
        return {p.name for p in (self.partial, self.record_path) if p is not None and p.parent == folder}

    @contextlib.contextmanager
    def block(self, say: Callable[[str], None]) -> Iterator[None]:
        """The block in which a run writes its outputs, synchronously, together or not
        at all. In the folder the run owns (score's and fairplay's --out), they are all
        in place when the block ends; a block that ends in a stop or a failure puts the
        folder's earlier outputs back as they were (an earlier run's whole, or none:
        `outputs_together`), and its record says which (`Run.status`, `earlier`). A
        SIGTERM or SIGINT stops it at once (KeyboardInterrupt), where the loop's handlers
        would act only at the next await, after every file was written and the report
        drawn (a scheduler's SIGTERM was lost, Ctrl-C left a report saying "complete").
        A stop that is already pending is obeyed before the first file. `say` tells what
        could not be put back."""
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError
        folder = self.folder()
        with contextlib.ExitStack() as stops:
            if threading.current_thread() is threading.main_thread():  # signals reach only its handlers
                def stop(signum: int, frame: object) -> None:
                    raise KeyboardInterrupt

                for sig in (signal.SIGTERM, signal.SIGINT):
                    stops.callback(signal.signal, sig, signal.signal(sig, stop))
            try:
                if folder is None:
                    yield
                    return
                with outputs_together(folder, self.own(folder), say) as self.placement:
                    yield
            except OSError as e:
                if e.errno not in NO_ROOM:  # other errors name their file as they are (atomic_write)
                    raise
                raise cannot_write(e) from e  # nothing of this run's outputs is left to say

    def settle(self, complete: bool) -> None:
        """As the run closes, before its record is written: the outputs its block put in
        place stay if the run is `complete`, else the folder's earlier ones are put back
        (a stop while the client closed, after the block: the record will say
        "interrupted", and no file of the run may say otherwise)."""
        p = self.placement
        if p is None or not p.written or p.not_put_back is not None:
            return
        if complete:
            p.keep_new()
        else:
            p.put_back()

    def unclaim(self, complete: bool) -> None:
        """The `claims` removed when the run is not `complete` and its folder's earlier
        outputs were not all put back in their place (or there was no block)."""
        if complete or (self.placement is not None and not self.placement.not_put_back):
            return
        for path in self.claims:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)

    @property
    def not_written(self) -> bool:
        """The block's outputs were put back: none of the run's is in the folder."""
        return self.placement is not None and self.placement.not_put_back is not None

    def earlier(self) -> list[str] | None:
        """The outputs in the run's folder now (for a run that did not complete: an
        earlier run's, left as they were); None without a folder of its own."""
        folder = self.folder()
        return None if folder is None else outputs_in(folder, self.own(folder))


def _is_output(name: str, own: Collection[str]) -> bool:
    return not name.startswith(".") and name not in own


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.iterdir())


def _keep(folder: Path, own: Collection[str]) -> dict[str, Path]:
    """Each output of `folder` linked under a hidden name beside it: its name -> that path."""
    kept: dict[str, Path] = {}
    try:
        for p in _entries(folder):
            if not _is_output(p.name, own):
                continue
            aside = folder / f".{p.name}.{secrets.token_hex(6)}.earlier"
            kept[p.name] = aside
            try:
                if p.is_symlink():
                    os.symlink(os.readlink(p), aside)
                elif p.is_dir():
                    shutil.copytree(p, aside, symlinks=True, copy_function=_link)
                else:
                    _link(p, aside)
            except OSError as e:  # named as the output it is (a full disk: cannot write OUT/figures)
                raise OSError(e.errno, e.strerror, str(p)) from e
    except BaseException:
        for aside in kept.values():
            _remove(aside)
        raise
    return kept


def _link(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError as e:
        if e.errno not in _NO_LINK:
            raise
        shutil.copy2(src, dst, follow_symlinks=False)


def _put_back(folder: Path, own: Collection[str], kept: dict[str, Path]) -> list[str]:
    """The folder's outputs as `kept` holds them: the run's new ones removed, the kept
    ones in their places; the names that could not be."""
    failed = []
    with held():
        for p in _entries(folder):
            if _is_output(p.name, own) and p.name not in kept:
                try:
                    _remove(p, strict=True)
                except OSError:
                    failed.append(p.name)
        for name, aside in kept.items():
            try:
                _replace(aside, folder / name)
            except OSError:
                failed.append(name)
    return sorted(failed)


def _replace(aside: Path, place: Path) -> None:
    """`aside` moved to `place`, whatever is there (a folder is swapped whole)."""
    if place.is_dir() and not place.is_symlink():
        gone = place.parent / f".{place.name}.{secrets.token_hex(6)}.new"
        os.replace(place, gone)
        os.replace(aside, place)
        _remove(gone)
        return
    if aside.is_dir() and not aside.is_symlink():
        place.unlink(missing_ok=True)
    elif place.exists() and os.path.samefile(aside, place):  # the output as it was: rename would do nothing
        aside.unlink()
        return
    os.replace(aside, place)


def _remove(p: Path, strict: bool = False) -> None:
    """A file or a folder tree, gone (nothing if it is not there); `strict`: an error if it stays."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=not strict)
    else:
        try:
            p.unlink(missing_ok=True)
        except OSError:
            if strict:
                raise
