"""Errors of tension-run.

    TensionError
    ├── InputError          a record of an input file is bad (file, line, field)
    ├── ConfigError         a flag or config key is bad
    │   └── RefusedError    the server refuses every request like this one (also a ServerError)
    ├── CacheError          the LMDB store cannot be opened, read or written
    │   └── CacheDamagedError   its file is truncated, foreign or has bad pages
    │                           (also a ConfigError: exit 2, a rerun cannot cure it)
    └── ServerError         an LLM server could not give a usable answer
        ├── StatusError     the server refused this one request
        │   ├── ContextLengthError  HTTP 400: the prompt does not fit the server's context
        │   └── NLimitError         HTTP 400 naming `n`: the server takes fewer choices a request
        ├── RefusedError    401/403 (the key), 404 (no such model, no such endpoint), 405
        └── RetryBudgetError  retries ran out (count or total time)

A RefusedError is a ConfigError as well: the settings must change (the key, the
model, the URL, --tokenizer) before any request like it can pass, so the run stops
with exit status 2 however far it got, and a rerun of the same command is not
advised. A StatusError belongs to its one request: that story (idea, reader value)
fails and the others go on.

Library code raises these; the CLI turns them into one clear line and an exit
status, the error's kind deciding it (`status_of`, the one place that does: a bad
input, whatever the verb, is 1; a bad setting or a damaged cache 2). Lower-level
exceptions (aiohttp, lmdb, msgspec) are chained with ``from``.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "TensionError",
    "RunStatus",
    "StopNote",
    "STOPPED",
    "InputError",
    "ConfigError",
    "CacheError",
    "CacheDamagedError",
    "ServerError",
    "StatusError",
    "ContextLengthError",
    "NLimitError",
    "RefusedError",
    "RetryBudgetError",
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "EXIT_INTERRUPTED",
    "exit_status",
    "status_of",
    "NO_ROOM",
    "disk_free",
    "cannot_write",
]

# The exit statuses of every verb (docs/reliability.md, "Reports, inputs and exit status").
EXIT_OK = 0  # the run produced everything asked for
EXIT_FAILED = 1  # something asked for is missing (a bad record, a failed item, a stopped run, nothing to produce)
EXIT_USAGE = 2  # a bad flag or config key, found before any work
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM


class TensionError(Exception):
    """Base of every error tension-run raises on purpose."""


class InputError(TensionError):
    """A bad record: names the file, the line (1-based; 0 = the file as a whole)
    and the field, then says what was expected and what was found."""

    def __init__(self, path: str, line: int, field: str | None, message: str):
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        where = f"{self.path}:{line}" if line else self.path
        if field:
            where += f" field `{field}`"
        super().__init__(f"{where}: {message}")


class ConfigError(TensionError):
    """A bad flag or config value; the message names it."""


class CacheError(TensionError):
    """The cache could not be used; the message names its path."""


class CacheDamagedError(CacheError, ConfigError):
    """The cache's file is damaged (truncated, not LMDB, bad pages): the --cache a
    run was given cannot be used as it is, and rerunning cannot cure that, so it
    is reported like a bad setting (exit 2). The message names the cache and the
    way out (`cache verify`, `cache recover`)."""


class ServerError(TensionError):
    """An LLM server did not give a usable answer."""


class StatusError(ServerError):
    """The server refused this one request (an HTTP 4xx other than RefusedError's)."""

    def __init__(self, status: int, url: str, body: str):
        self.status = status
        self.url = url
        self.body = body
        super().__init__(f"HTTP {status} from {url}: {body[:300]}")


class ContextLengthError(StatusError):
    """HTTP 400: the prompt (with its max_tokens) does not fit the server's context
    (llama.cpp's exceed_context_size_error, vLLM's "maximum context length"); the
    classifier is core/llm/failures.py `status_error`. A score position is skipped
    as one known too long before sending; a generated story fails with the
    --max-tokens that would fit."""


class NLimitError(StatusError):
    """HTTP 400 whose message names `n`: the server takes fewer choices a request
    than were asked (core/llm/choices.py `NAsk` reads the bound, core/llm/traits.py
    `n_limit`, and asks in chunks). Raised to a caller only when even chunks fail."""


class RefusedError(ServerError, ConfigError):
    """The server refuses every request like this one; ``missing`` says why:
    "key" (401/403), "model" (404 whose body names the model asked for, as vLLM's
    "The model `X` does not exist."), "endpoint" (404/405 on a path the server does
    not have), "stream" (a 200 streamed though no stream was asked: a proxy,
    core/llm/answer_checks.py). ``advice`` is what to change, appended to the message."""

    def __init__(self, status: int, url: str, body: str, missing: str, advice: str = ""):
        self.status = status
        self.url = url
        self.body = body
        self.missing = missing
        super().__init__(f"HTTP {status} from {url}: {body[:300]}" + (f" — {advice}" if advice else ""))


class RetryBudgetError(ServerError):
    """Retries ran out; ``last`` is the final failure."""

    def __init__(self, message: str, last: BaseException | None = None):
        self.last = last
        super().__init__(message)


RunStatus = Literal["complete", "failed", "interrupted"]  # how a run ended (core/run/lifecycle.py decides)


def exit_status(status: RunStatus, produced: int, problems: int) -> int:
    """The exit status of a run, one rule for every verb: did the run produce what
    was asked? ``status`` is how the run ended ("complete", "failed",
    "interrupted"), ``produced`` how many results it wrote (stories, ideas, …),
    ``problems`` how many bad input records and failed items it had. 0: it ended,
    wrote at least one result and nothing asked for is missing; 1: something asked
    for is missing — a bad record, a failed item, a run stopped by an error, or
    nothing to produce at all (an empty input, every story left out by the word
    filter); 130: interrupted. Items that a rule the user set leaves out (the word
    filter) are not missing while others are produced."""
    if status == "interrupted":
        return EXIT_INTERRUPTED
    if status != "complete" or problems or not produced:
        return EXIT_FAILED
    return EXIT_OK


@dataclass
class StopNote:
    """What a stopped run kept, for the CLI's stop message. The CLI sets one in
    `STOPPED` before a verb runs; a run that is stopped fills it once its last
    records are committed, counted from what its commits made durable
    (core/run/lifecycle.py). Shared by reference, it reaches the CLI from the run's
    event loop (a copy of the context) and from a worker thread alike. Before, the
    message said "completed work is in the cache" whatever was kept: 0 of 312
    endings on a server that takes n in chunks (H1 of
    ../shared/reviews/external-servers-2026-12-02.md)."""

    kept: str | None = None  # what it kept, said ("3 positions complete, …"); None: no run was stopped
    anything: bool = False  # whether it kept any answer


STOPPED: ContextVar[StopNote | None] = ContextVar("tension_stopped", default=None)


def status_of(error: BaseException) -> int:
    """The exit status of a verb stopped by ``error``, by its kind alone, the same in
    every verb (the table in docs/reliability.md, "Exit statuses"):

    - 2, a bad setting: a ConfigError — a flag or config key with a bad value
      (a file a flag names included: ``--config``, ``--bench``, ``--titles``), a
      server refusing the settings (RefusedError), a damaged cache
      (CacheDamagedError: ``cache recover`` is the way out, never a rerun);
    - 1, anything else: the input a verb works on (the file or folder its
      arguments name, a cache verb's cache) missing, unreadable or malformed
      (InputError, OSError), or work that failed (ServerError, CacheError);
    - 130, interrupted (KeyboardInterrupt, asyncio's CancelledError).
    """
    if isinstance(error, ConfigError):
        return EXIT_USAGE
    asyncio = sys.modules.get("asyncio")  # not imported by a verb that never ran a loop: then not its error
    if isinstance(error, KeyboardInterrupt) or (asyncio is not None and isinstance(error, asyncio.CancelledError)):
        return EXIT_INTERRUPTED
    return EXIT_FAILED


NO_ROOM = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # a full disk, a file-size limit, a quota


def disk_free(path: str | os.PathLike) -> str:
    """The free space of the disk holding `path` (or its nearest existing parent), said."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        free = shutil.disk_usage(p).free
    except OSError:
        return "an unknown amount of space"
    return f"{free:,} bytes ({free / 1e6:.1f} MB)"


def cannot_write(e: OSError, kept: str = "") -> TensionError:
    """The error of an output file that could not be written for want of room (a
    full disk, a file-size limit, a quota): the file, the free space on its disk,
    what was written before it (`kept`), and the way on. Every answer of the run is
    in the cache by then, so the same command rewrites the outputs without asking
    again."""
    where = e.filename or "an output file"
    free = f" ({disk_free(where)} free on its disk)" if e.filename else ""
    return TensionError(f"cannot write {where}: {e.strerror or e}{free}. "
                        + (f"Written before it: {kept}. " if kept else "")
                        + "Every answer completed is in the cache: make room (or give another --out) and rerun the "
                          "same command to continue (nothing already answered is asked again)")
