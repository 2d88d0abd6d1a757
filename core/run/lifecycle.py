"""The life of one pipeline run: the output lock, the store, the client, the
committer, the scheduler, the progress bar, the status and the run record,
opened and closed in one place for every pipeline (score, generate, fairplay).

    with out_lock(out, out / LOCK_NAME, "score", "folder"):
        async with Run(store=open_store(cfg.cache, cfg.cache_max_gb), client=client_for(cfg, key),
                       progress=..., partial=out / "positions.partial.jsonl",
                       record_path=out / "run.json", record=scoring.record) as run:
            await run.work(scoring.run(run))        # sets run.status and run.error
            if run.status == "complete":
                scoring.write_outputs()
    # however the block ended: the last records committed, the client and the
    # progress bar closed, the cache's run counts saved, the record written with
    # the final status ("complete", "failed" or "interrupted"), the store closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from tension.cache.records import Usage
from tension.cache.store import Store, default_path
from tension.core.errors import ConfigError, TensionError
from tension.core.llm.cached import CachedChat
from tension.core.llm.client import Client, RetryPolicy, Timeouts
from tension.core.redact import redact
from tension.core.run.commit import Committer, describe, run_committed
from tension.core.run.progress import Progress
from tension.core.run.record import versions, write_record
from tension.core.run.scheduler import Scheduler

__all__ = ["LOCK_NAME", "Run", "out_lock", "prepare_out_dir", "open_store", "client_for", "warn", "run_blocking"]

LOCK_NAME = ".tension-run.lock"


class Run:
    """The parts a pipeline run owns, opened and closed together (module docstring).

    `requests` counts the requests sent per role, starting from `roles` (so a run
    record lists every role, with 0 where none was needed); `chat` is the one
    cached LLM call, bound to this run's store, committer and progress bar.
    `last_run=False` keeps the store's counts out of the cache's "last run" (`cache
    stats`): for commands that only look (estimate, bench)."""

    def __init__(self, *, store: Store, client: Client, progress: Progress, partial: Path | None,
                 record_path: Path | None = None, record: Callable[[Run], dict[str, Any]] | None = None,
                 roles: tuple[str, ...] = (), last_run: bool = True):
        self.store = store
        self.client = client
        self.progress = progress
        self.partial = partial
        self.record_path = record_path
        self.build_record = record
        self.last_run = last_run
        self.status = "complete"
        self.error: str | None = None
        self.requests: dict[str, int] = dict.fromkeys(roles, 0)
        self.usage_all = Usage()  # what every answer used, cached or not
        self.started = time.time()
        self.sched: Scheduler | None = None
        self.committer: Committer | None = None
        self.chat: CachedChat | None = None

    async def __aenter__(self) -> Run:
        try:
            await self.client.__aenter__()
            if self.partial is not None:
                self.partial.write_bytes(b"")  # this run's lines; earlier runs' work is in the cache
            self.committer = Committer(self.store, self.partial)
        except BaseException:
            self.store.close()
            raise
        self.chat = CachedChat(self.store, self.committer, self.progress, self.requests, self.usage_all)
        return self

    async def work(self, coro) -> None:
        """Await the pipeline's work, then commit what completed (run_committed).
        A usage error found at start is recorded as the failure and re-raised."""
        try:
            self.status, self.error = await run_committed(coro, self.committer)
        except ConfigError as e:
            self.status, self.error = "failed", describe(e)
            raise

    @contextlib.asynccontextmanager
    async def scheduler(self, lanes: dict[str, int]) -> AsyncIterator[Scheduler]:
        """The run's scheduler over `lanes`, with the commit loop as a service; kept
        after the block for its lane statistics."""
        self.sched = Scheduler(lanes)
        async with self.sched:
            self.sched.service(self.committer.run())
            yield self.sched

    async def __aexit__(self, et, exc, tb) -> None:
        if et is not None and issubclass(et, (asyncio.CancelledError, KeyboardInterrupt)):
            # Also a stop after the last item (during the final commit, or while the
            # outputs are written): the outputs are not complete.
            self.status = "interrupted"
        elif exc is not None and self.status == "complete":
            self.status, self.error = "failed", describe(exc)
        try:
            self.committer.close()
        except TensionError as e:  # the last commit failed (e.g. the cache is full)
            if self.status == "complete":
                self.status, self.error = "failed", describe(e)
            if exc is None:
                raise
        finally:
            await self._close()

    async def _close(self) -> None:
        # Each step runs even when one before it failed; ExitStack runs them in
        # reverse order of registration: progress, run counts, record, store.
        with contextlib.ExitStack() as later:
            later.callback(self.store.close)
            later.callback(self.write_record)
            if self.last_run:
                later.callback(self.store.save_run_counts)
            later.callback(self.progress.close)
            try:
                await self.client.__aexit__(None, None, None)
            except asyncio.CancelledError:
                # A stop that lands while the client closes (a signal sent during the
                # final commit): the caller sees an interruption, and so does the record.
                self.status = "interrupted"
                raise

    def write_record(self) -> None:
        """Write the run record as it stands (the pipeline's `record(run)`)."""
        if self.record_path is not None and self.build_record is not None:
            write_record(self.record_path, self.build_record(self))

    # -- the parts of a record every pipeline shares ---------------------------------

    def timing(self) -> dict[str, Any]:
        return {"argv": sys.argv, "started": self.started, "wall_seconds": round(time.time() - self.started, 3)}

    def versions(self) -> dict[str, str]:
        return versions()

    def http(self, followups: bool = False) -> dict[str, int]:
        c = self.client
        out = {"attempts": c.sent, "retries": c.retries}
        if followups:
            out["followups"] = c.followups
        return out

    def usage_this_run(self) -> dict[str, Any]:
        return msgspec.to_builtins(self.client.usage)

    def usage_all_answers(self) -> dict[str, Any]:
        return msgspec.to_builtins(self.usage_all)

    def lanes(self) -> dict[str, Any]:
        return {k: msgspec.to_builtins(v) for k, v in self.sched.lane_stats.items()} if self.sched else {}

    def cache(self) -> dict[str, Any]:
        c = self.store.counts
        return {"path": str(self.store.path), "hits": dict(c.hits), "misses": dict(c.misses),
                "writes": dict(c.writes), "damaged": dict(c.damaged)}


@contextlib.contextmanager
def out_lock(out: Path, lock_file: Path, verb: str, what: str) -> Iterator[None]:
    """Hold `lock_file` for the output `out` of a `verb` run, or fail at once if
    another run holds it: a second run writing the same partial file and outputs
    would interleave them. The lock dies with its process (even SIGKILL)."""
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


def open_store(cache: str | None, max_gb: float | None) -> Store:
    """The LMDB cache at `cache` (default: the user's cache folder), never grown past `max_gb`."""
    return Store(cache or default_path(), max_bytes=int(max_gb * 1e9) if max_gb else None)


def client_for(cfg: Any, api_key: str | None) -> Client:
    """The HTTP client of a run, with the settings' timeout and retry budget; what it
    has to say at once (a server that does not answer, and until when it is
    retried) goes to stderr, above the progress bar, with or without one."""
    return Client(api_key=api_key, timeouts=Timeouts(request=cfg.timeout),
                  retry=RetryPolicy(attempts=cfg.retries, total_seconds=cfg.retry_seconds), notice=warn)


def warn(message: str, kind: str = "warning") -> None:
    """A warning on stderr now, redacted; tqdm.write keeps a progress bar intact.
    `kind` "note": something the user may want to know that is not a problem."""
    from tqdm import tqdm

    tqdm.write(f"{kind}: {redact(message)}", file=sys.stderr)


def run_blocking(make_coro: Callable[[], Any]) -> Any:
    """Run the coroutine ``make_coro()`` to its end on uvloop (asyncio when uvloop is
    missing), SIGTERM cancelling it like Ctrl-C: completed work is committed
    first. The blocking form of every command that talks to servers."""
    try:
        import uvloop
        factory = uvloop.new_event_loop
    except ImportError:
        factory = None

    async def main():
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        try:
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
            return await make_coro()
        try:
            return await make_coro()
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())
