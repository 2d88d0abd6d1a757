"""Errors of tension-run.

    TensionError
    ├── InputError          a record of an input file is bad (file, line, field)
    ├── ConfigError         a flag or config key is bad
    ├── CacheError          the LMDB store cannot be opened, read or written
    │   └── CacheDamagedError   its file is truncated, foreign or has bad pages
    │                           (also a ConfigError: exit 2, a rerun cannot cure it)
    └── ServerError         an LLM server could not give a usable answer
        ├── StatusError     an HTTP error status that retries did not cure
        └── RetryBudgetError  retries ran out (count or total time)

Library code raises these; the CLI turns them into one clear line and an exit
status. Lower-level exceptions (aiohttp, lmdb, msgspec) are chained with ``from``.
"""

from __future__ import annotations

__all__ = [
    "TensionError",
    "InputError",
    "ConfigError",
    "CacheError",
    "CacheDamagedError",
    "ServerError",
    "StatusError",
    "RetryBudgetError",
]


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
    def __init__(self, status: int, url: str, body: str):
        self.status = status
        self.url = url
        self.body = body
        super().__init__(f"HTTP {status} from {url}: {body[:300]}")


class RetryBudgetError(ServerError):
    """Retries ran out; ``last`` is the final failure."""

    def __init__(self, message: str, last: BaseException | None = None):
        self.last = last
        super().__init__(message)
