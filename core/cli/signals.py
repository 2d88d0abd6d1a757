"""SIGTERM said as Ctrl-C is: a verb that stops part-way (`cache merge`, `view
--export`) is told of both the same way (KeyboardInterrupt), says what it left, and
exits 130, where SIGTERM's default would end the process at once, silently, 143."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["sigterm_interrupts"]


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt (as Ctrl-C does)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach only the main thread's handlers
        return
    before = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
