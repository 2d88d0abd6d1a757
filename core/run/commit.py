"""Group commit of completed LLM records, closed once when the run's sending block
ends (core/run/engine.py).

Records wait here at most `COMMIT_INTERVAL` seconds, then go to LMDB in one
transaction: on this machine LMDB did about 2,100 synced single-record commits/s
but about 122,000 records/s at 100 records a commit, and several GPUs' judge
traffic exceeds the first figure. Output lines that depend on those records (a
position's result, a reader's value) are appended to the run's partial file only
after their records are durable, so a stopped run resumes from the cache and its
partial file never claims work the cache lacks. What became durable is counted
(`Kept`): a stopped run says what it kept from these counts, not from what it
meant to keep.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import msgspec

from tension.cache import records
from tension.cache.store import Store
from tension.core.errors import TensionError, cannot_write
from tension.core.redact import redact

__all__ = ["COMMIT_INTERVAL", "COMMIT_BATCH", "Committer", "Kept", "first_error", "describe"]

COMMIT_INTERVAL = 0.05  # seconds a completed record may wait for its commit
COMMIT_BATCH = 512  # records: commit sooner when this many are waiting


class Kept(msgspec.Struct, kw_only=True):
    """What a run's commits made durable: output lines (finished positions, stories,
    reader values), answers (records of chat answers: endings, chunks, verdicts),
    and the chunks among them (pieces of answers that took several requests), less
    those whose whole answer was kept since (`settled`)."""

    lines: int = 0
    answers: int = 0
    chunks: int = 0
    chunk_texts: int = 0
    settled: int = 0  # chunks whose whole answer was kept after them
    settled_texts: int = 0

    def add(self, other: Kept) -> None:
        for f in self.__struct_fields__:
            setattr(self, f, getattr(self, f) + getattr(other, f))

    @property
    def open_chunks(self) -> tuple[int, int]:
        """(chunks, their texts) of answers not yet whole."""
        return self.chunks - self.settled, self.chunk_texts - self.settled_texts


ANSWER_DBS = ("endings", "verdicts")


class Committer:
    """Records and finished output lines wait here ≤ 50 ms, then go to LMDB in one
    transaction, after which the lines are appended to the partial file. The
    commit (which waits for the disk) runs on one writer thread, so the event loop
    keeps sending requests meanwhile; batches commit in order."""

    def __init__(self, store: Store, partial: Path | None, kept: Kept | None = None):
        self.store = store
        self.kept = kept if kept is not None else Kept()  # what became durable (the writer thread adds to it)
        self._tally = Kept()  # what is waiting, counted as it is
        self.records: list[tuple[str, bytes, records.Record]] = []
        self.replace: set[tuple[str, bytes]] = set()  # (database, key) of records asked again on purpose
        self.lines: list[bytes] = []
        # No partial file: records only (`estimate` keeps the token counts it asked for).
        self._partial = partial.open("ab") if partial is not None else None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tension-commit")
        self._pending: list[Future[None]] = []
        self._closed = False

    def add(self, db: str, key: bytes, rec: records.Record, replace: bool = False, *, chunk: bool = False,
            settles: tuple[int, int] = (0, 0)) -> None:
        """Keep `rec` under `key`; with `replace` it is written over a record already
        there (an answer asked again on purpose: `--refresh`). `chunk`: a piece of an
        answer (`Kept`); `settles`: the (chunks, texts) of this run that `rec`, their
        whole answer, now holds."""
        self.records.append((db, key, rec))
        t = self._tally
        t.answers += db in ANSWER_DBS
        if chunk and isinstance(rec, records.Endings):
            t.chunks += 1
            t.chunk_texts += len(rec.texts)
        t.settled += settles[0]
        t.settled_texts += settles[1]
        if replace:
            self.replace.add((db, key))
        if len(self.records) >= COMMIT_BATCH:
            self.flush()

    def flush(self) -> None:
        """Hand what is waiting to the writer thread (returns at once)."""
        if not self.records and not self.lines:
            return
        batch, self.records = self.records, []
        lines, self.lines = self.lines, []
        replace, self.replace = self.replace, set()
        tally, self._tally = self._tally, Kept()
        self._pending.append(self._writer.submit(self._commit, batch, lines, replace, tally))
        self.check()

    def _commit(self, batch: list[tuple[str, bytes, records.Record]], lines: list[bytes],
                replace: set[tuple[str, bytes]], tally: Kept) -> None:
        if batch:
            self.store.put_many(batch, replace)
        self.kept.add(tally)  # durable now (the lines, below, only repeat what these records hold)
        if lines and self._partial is not None:
            try:
                self._partial.write(b"".join(lines))
                self._partial.flush()
            except OSError as e:  # a full disk: the records are committed, the lines are only a summary of them
                raise cannot_write(OSError(e.errno, e.strerror, self._partial.name)) from e
            self.kept.lines += len(lines)

    def check(self) -> None:
        """Raise the error of a failed commit (e.g. a full cache) in the caller."""
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        for f in done:
            f.result()

    async def run(self) -> None:
        """The commit loop, run as a scheduler service for the whole run."""
        while True:
            await asyncio.sleep(COMMIT_INTERVAL)
            self.flush()
            self.check()

    def close(self) -> None:
        """Commit everything still waiting and wait for the writer: after this,
        every completed answer is on disk. A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self.flush()
        finally:
            self._writer.shutdown(wait=True)
            if self._partial is not None:
                self._partial.close()
        for f in self._pending:
            f.result()


def first_error(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = inner[0] if inner else exc.exceptions[0]
    return exc


# A run out of memory: the same command meets the same limit, so the end-of-run line's "rerun the
# same command" (core/cli/messages.py) is not said; what would change the outcome is.
OUT_OF_MEMORY = ("out of memory (MemoryError): the run needed more memory than the machine, or a limit on it "
                 "(ulimit -v, a container's), gave it; completed answers are in the cache. The same command meets "
                 "the same limit: to continue, free or raise the memory, or hold less at once (fewer requests in "
                 "flight: the verb's --…-concurrency flags; the longest stories left out: score's --max-words)")


def describe(e: BaseException) -> str:
    """An error as the run record and the CLI state it: our errors by their own
    text, anything else with its type; redacted (a key a server echoed, a URL's
    password)."""
    if isinstance(e, MemoryError):
        return OUT_OF_MEMORY
    return redact(str(e) if isinstance(e, TensionError) else f"{type(e).__name__}: {e}")
