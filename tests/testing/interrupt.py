"""An interrupted run, in process: a pipeline's coroutine cancelled midway."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

__all__ = ["cancel_midway"]


def cancel_midway(run: Callable[[], Awaitable[object]], until: Callable[[], bool]) -> None:
    """Start `run` (a score_async call) and cancel it once `until()` holds: an
    interrupted run, its records committed so far kept. The run must end cancelled."""
    async def go() -> None:
        task = asyncio.ensure_future(run())
        while not until() and not task.done():
            await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return
        raise AssertionError("the run was not cancelled: it ended before `until` held")

    asyncio.run(go())
