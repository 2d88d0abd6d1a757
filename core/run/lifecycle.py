"""The life of one pipeline run: the store, the client, the engine of its LLM
work (core/run/engine.py), the progress bar, the status and the run record,
opened and closed in one place for every pipeline (score, generate, fairplay,
estimate, bench), inside the output lock its pipeline holds
(core/run/out_folder.py).

    with out_lock(out, out / LOCK_NAME, "score", "folder"):
        async with open_run(cfg, "score", progress=..., partial=out / "positions.partial.jsonl",
                            record_path=out / "run.json", roles=ROLES) as run:
            run.pipeline = scoring                # its models, outcome and record body
            if await run.work(scoring.score()):   # False: the work failed (recorded)
                with run.outputs():               # all in place, or the folder's earlier ones put back
                    scoring.write_outputs()
    # however the block ended: the last records committed, the client and the
    # progress bar closed, the cache's run counts saved, the record written with
    # the status decided from what happened ("complete", "failed" or
    # "interrupted"), the store closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Collection
from contextvars import ContextVar
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

from tension.cache.store import Store, default_path, open_for_run
from tension.core.errors import (
    EXIT_USAGE,
    NO_ROOM,
    STOPPED,
    ConfigError,
    RunStatus,
    TensionError,
    exit_status,
)
from tension.core.llm.client import Client, Timeouts
from tension.core.llm.failures import RetryPolicy
from tension.core.llm.router import Router
from tension.core.llm.transport import Transport
from tension.core.redact import redact, redact_argv
from tension.core.run.commit import describe, first_error
from tension.core.run.engine import Engine
from tension.core.run.out_folder import RunOutputs
from tension.core.run.progress import Progress
from tension.core.run.record import CacheFigures, Http, RunHeader, RunRecord, versions, write_record
from tension.core.run.scheduler import Scheduler
from tension.core.run.taught import Lesson, keep, remember
from tension.core.signals import command_line

__all__ = ["INVOCATION", "Run", "RunSettings", "Pipeline", "open_run", "open_store", "warn"]

# What a run's output lines are, by verb (one, several): a stop says how many it kept.
UNITS = {"score": ("position", "positions"), "generate": ("story", "stories"),
         "fairplay": ("reader value", "reader values")}
T = TypeVar("T")
# The command line that made a run, for its record's argv, when it is not this
# process's (sys.argv): an API call sets the call that reproduces it (core/api/verbs.py).
INVOCATION: ContextVar[list[str] | None] = ContextVar("tension_invocation", default=None)


class RunSettings(Protocol):
    """What a run takes from any verb's settings."""

    timeout: float
    retries: int
    retry_seconds: float
    cache: str | None
    cache_max_gb: float | None

    def resolved_api_key(self) -> str | None: ...

    def public(self) -> dict[str, Any]: ...


class Pipeline(Protocol):
    """What a pipeline tells its run for the run record."""

    def models(self) -> dict[str, str | None]: ...

    def outcome(self) -> tuple[int, int]:
        """Results produced, and problems (bad input records, failed items)."""
        ...

    def body(self) -> dict[str, Any]:
        """The record's keys after the header."""
        ...


class Run:
    """The parts a pipeline run owns, opened and closed together (module docstring).

    `llm` is the engine of the run's LLM work; its counts start from `roles` (so
    a run record lists every role, with 0 where none was needed). The status is
    decided in one place (`status`) from what happened: a cancellation, the
    first error. `last_run=False` keeps the store's counts out of the cache's
    "last run" (`cache stats`): for commands that only look (estimate, bench)."""

    def __init__(self, *, command: str, settings: RunSettings, store: Store, client: Client, progress: Progress,
                 partial: Path | None, record_path: Path | None = None, roles: tuple[str, ...] = (),
                 last_run: bool = True, refresh: Collection[str] = ()):
        self.command = command
        self.settings = settings
        self.store = store
        self.client = client
        self.progress = progress
        self.partial = partial
        self.record_path = record_path
        self.last_run = last_run
        self.started = time.time()
        self.llm = Engine(store, progress, roles, partial, refresh=refresh, since=self.started)
        self.lessons: list[Lesson] = []  # what its servers taught, kept when it closes (core/run/taught.py)
        self.pipeline: Pipeline | None = None
        # its outputs in the --out folder it owns, and the files among them that say it is complete
        self.out = RunOutputs(partial, record_path)
        self.error: str | None = None  # the first error, as the record states it
        # The first error was a ConfigError: the CLI exits 2 for it (a rerun of the same
        # command cannot pass), and the record must state the code the process returns.
        self.usage_error = False
        self.cancelled = False
        self.wall_seconds: float | None = None  # fixed by `freeze_wall`
        # The record last written (the final one once the run is closed): what its
        # pipeline returns, typed, rather than a reader of the file it wrote.
        self.written: RunRecord | None = None

    @property
    def status(self) -> RunStatus:
        """How the run ended (or stands): the one place the status is decided. In a
        folder of its own, "complete" says that every output of the run is there,
        "interrupted" and "failed" that none is (`outputs`, `settle_outputs`)."""
        if self.cancelled:
            return "interrupted"
        if self.error is not None:
            return "failed"
        return "complete"

    @property
    def exit_status(self) -> int:
        if self.status == "failed" and self.usage_error:
            return EXIT_USAGE
        produced, problems = self.pipeline.outcome() if self.pipeline is not None else (1, 0)
        return exit_status(self.status, produced, problems)

    async def __aenter__(self) -> Run:
        try:
            await self.client.__aenter__()
            if self.partial is not None:
                self.partial.write_bytes(b"")  # this run's lines; earlier runs' work is in the cache
        except BaseException:
            self.store.close()
            raise
        return self

    def serving(self, *routers: Router, lanes: dict[str, int] | None = None,
                route: bool = True) -> contextlib.AbstractAsyncContextManager[Scheduler]:
        """The block in which the run sends (Engine.serving), what its servers taught
        earlier runs on their records first (core/run/taught.py)."""
        self.lessons += remember(self.store, routers, self.llm.refresh)
        return self.llm.serving(*routers, lanes=lanes, route=route)

    @property
    def sched(self) -> Scheduler:
        return self.llm.sched

    @property
    def claims(self) -> list[Path]:
        """Files that say the run is complete (report.md), removed where they would
        contradict its record (core/run/out_folder.py `RunOutputs`)."""
        return self.out.claims

    def _failed(self, e: BaseException) -> None:
        if self.error is None:
            self.error = describe(e)
            self.usage_error = isinstance(e, ConfigError)

    async def work(self, work: Awaitable[None], *, stop: bool = False) -> bool:
        """Await the pipeline's work; True when it completed. A failure during the
        run is recorded and ends the work (everything completed is committed),
        and with `stop` it is raised too (commands that give all or nothing).
        A ConfigError (a usage error, a damaged cache, a server refusing the key,
        the model or an endpoint: no rerun of the same command can pass) is
        recorded and raised, also from inside the scheduler's task group, as is
        a cancellation."""
        try:
            await work
        except BaseExceptionGroup as eg:
            first = first_error(eg)
            if not isinstance(first, Exception):
                raise
            self._failed(first)
            if stop or isinstance(first, ConfigError):
                raise first from None
        except (ConfigError, TensionError) as e:
            self._failed(e)
            if stop or isinstance(e, ConfigError):
                raise
        return self.error is None

    async def __aexit__(self, et: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if et is not None and issubclass(et, (asyncio.CancelledError, KeyboardInterrupt)):
            # Also a stop after the last item (during the final commit, or while the
            # outputs are written): the outputs are not complete.
            self.cancelled = True
        elif exc is not None:
            self._failed(exc)
        try:
            await self._close()
        finally:
            self.out.unclaim(self.status == "complete")
            if self.cancelled:
                self._say_kept()

    def _say_kept(self) -> None:
        """A stopped run tells the CLI what it kept (core/errors.py `StopNote`):
        counted from its commits, every one of which is done by now."""
        note = STOPPED.get()
        if note is None:
            return
        k = self.llm.kept
        one, several = UNITS.get(self.command, ("result", "results"))
        said = [f"{k.lines} {one if k.lines == 1 else several} complete"] if self.partial is not None else []
        chunks, texts = k.open_chunks
        if chunks:
            said.append(f"{texts} endings in {chunks} chunk{'s' if chunks != 1 else ''} of requests not yet whole")
        said.append(f"{k.answers} new answer{'s' if k.answers != 1 else ''} in the cache")
        if self.out.not_written:
            said.append("its outputs not written (the folder left as it was)")
        note.kept, note.anything = ", ".join(said), k.answers > 0 or k.lines > 0

    async def _close(self) -> None:
        # Each step runs even when one before it failed; ExitStack runs them in
        # reverse order of registration: progress, client, run counts, the outputs settled,
        # record, what the servers taught (core/run/taught.py), store.
        with contextlib.ExitStack() as later:
            later.callback(self.store.close)
            later.callback(keep, self.store, self.lessons)
            later.callback(self.write_record)
            later.callback(self.settle_outputs)  # before the record, which says how they were settled
            if self.last_run:
                later.callback(self.store.save_run_counts)
            later.callback(self.progress.close)
            try:
                await self.client.__aexit__(None, None, None)
            except asyncio.CancelledError:
                # A stop that lands while the client closes (a signal sent during the
                # final commit): the caller sees an interruption, and so does the record.
                self.cancelled = True
                raise

    def outputs(self) -> contextlib.AbstractContextManager[None]:
        """The block in which a run writes its outputs, synchronously, together or not
        at all, a stop signal obeyed at once (core/run/out_folder.py `RunOutputs.block`)."""
        return self.out.block(warn)

    def settle_outputs(self) -> None:
        """As the run closes, before its record is written: its outputs stay if it is
        complete, else the folder's earlier ones are put back (`RunOutputs.settle`)."""
        self.out.settle(self.status == "complete")

    # -- the run record ---------------------------------------------------------------

    def freeze_wall(self) -> None:
        """Fix the wall time the record states (report.md, written from the record, states the same)."""
        self.wall_seconds = round(time.time() - self.started, 3)

    def wall(self) -> float:
        """Seconds since the run started (as frozen, once it is)."""
        return self.wall_seconds if self.wall_seconds is not None else round(time.time() - self.started, 3)

    def header(self) -> RunHeader:
        c, counts, sc = self.client, self.llm.counts, self.store.counts
        return RunHeader(
            command=self.command, status=self.status, error=self.error, exit_status=self.exit_status,
            # a URL's password, an --api-key's value redacted
            argv=redact_argv(INVOCATION.get() or command_line()), started=self.started,  # as it can be typed again
            wall_seconds=self.wall(),
            config=self.settings.public(), models=self.pipeline.models() if self.pipeline is not None else {},
            versions=versions(), requests=dict(counts.requests),
            http=Http(attempts=c.sent, retries=c.retries, followups=counts.followups, eta=self.progress.eta),
            usage_this_run=counts.usage_sent, usage_all_answers=counts.usage_all,
            cache=CacheFigures(path=str(self.store.path), hits=dict(sc.hits), misses=dict(sc.misses),
                               writes=dict(sc.writes), damaged=dict(sc.damaged)),
            lanes=self.llm.lane_stats, servers=c.servers.record())

    def record(self) -> RunRecord:
        """The run record: the header, then the pipeline's body. A run that did not
        complete in a folder of its own says which outputs there are an earlier run's,
        left as they were (`earlier_outputs`): none of its own is there."""
        body = self.pipeline.body() if self.pipeline is not None else {}
        if self.status != "complete" and (earlier := self.out.earlier()) is not None:
            body = {**body, "earlier_outputs": earlier}
        return RunRecord(header=self.header(), body=body)

    def write_record(self) -> None:
        """Write the run record as it stands. On a full disk the partial file makes
        room for it: its lines only repeat what the cache holds (a rerun reads the
        cache), while without a record nobody can tell how the run ended."""
        if self.record_path is None:
            return
        record = self.record()
        try:
            write_record(self.record_path, record.doc())
        except OSError as e:
            if e.errno not in NO_ROOM or self.partial is None or not self.partial.is_file():
                raise
            self.partial.write_bytes(b"")
            write_record(self.record_path, record.doc())
        self.written = record


def open_run(settings: RunSettings, command: str, *, progress: Progress, partial: Path | None = None,
             record_path: Path | None = None, roles: tuple[str, ...] = (), last_run: bool = True,
             store: Store | None = None, transport: Transport | None = None, refresh: Collection[str] = ()) -> Run:
    """A run of `command` with the settings' cache (or `store`) and a client with
    their timeout and retry budget (over `transport`, default aiohttp). The
    `refresh` roles' cached answers are asked again (`--refresh`)."""
    return Run(command=command, settings=settings,
               store=store if store is not None else open_store(settings.cache, settings.cache_max_gb),
               client=client_for(settings, transport), progress=progress, partial=partial,
               record_path=record_path, roles=roles, last_run=last_run, refresh=refresh)


def open_store(cache: str | None, max_gb: float | None) -> Store:
    """The LMDB cache at `cache` (default: the user's cache folder), never grown past
    `max_gb`; read-only where it cannot be written (said: the run stops only if it
    has a new answer to keep)."""
    store = open_for_run(cache or default_path(), max_bytes=int(max_gb * 1e9) if max_gb else None)
    if store.readonly:
        warn(f"the cache at {store.path} cannot be written (a read-only mount, or files this user may only read): "
             "answers are read from it; the run stops if it has a new answer to keep", "note")
    return store


def client_for(settings: RunSettings, transport: Transport | None = None) -> Client:
    """The HTTP client of a run, with the settings' key, timeout and retry budget;
    what it has to say at once (a server that does not answer, and until when it
    is retried) goes to stderr, above the progress bar, with or without one."""
    return Client(api_key=settings.resolved_api_key() or None, timeouts=Timeouts(request=settings.timeout),
                  retry=RetryPolicy(attempts=settings.retries, total_seconds=settings.retry_seconds), notice=warn,
                  transport=transport)


def warn(message: str, kind: str = "warning") -> None:
    """A warning on stderr now, redacted; tqdm.write keeps a progress bar intact.
    `kind` "note": something the user may want to know that is not a problem."""
    from tqdm import tqdm

    tqdm.write(f"{kind}: {redact(message)}", file=sys.stderr)
