"""A check that must pass before the first request of a kind is sent.

`Client` holds one: the first chat, /tokenize or batched judge request runs the
check (core/llm/preflight.py: every server and model the run needs); the others
wait for it, and its error becomes every later request's error. Requests the
check sends itself pass through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

__all__ = ["Gate"]


class Gate:
    def __init__(self) -> None:
        self._check: Callable[[], Awaitable[None]] | None = None
        self._lock = asyncio.Lock()
        self._owner: asyncio.Task | None = None
        self._error: Exception | None = None

    def set(self, check: Callable[[], Awaitable[None]]) -> None:
        self._check = check
        self._error = None

    async def wait(self) -> None:
        """Run the check now if it has not run; raise its error if it failed."""
        if self._check is None or self._owner is asyncio.current_task():
            return
        async with self._lock:  # the first caller runs the check, the others wait for it
            if self._error is not None:
                raise self._error
            if self._check is None:
                return
            self._owner = asyncio.current_task()
            try:
                await self._check()
            except Exception as e:
                self._error = e
                raise
            finally:
                self._owner = None
            self._check = None
