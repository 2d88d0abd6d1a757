"""The progress bar of long runs: units done (score's positions, generate's stories
or paragraphs, fairplay's reader values) of those known so far, items started
(stories, ideas) of all, requests/s and tokens/s actually sent, cache hits, ETA
(tqdm; silent when disabled)."""

from __future__ import annotations

import time
from collections.abc import Callable

from tqdm.auto import tqdm  # a widget in a notebook, text in a terminal

from tension.cache.records import Usage

__all__ = ["Progress"]


class Progress:
    def __init__(self, *, enabled: bool, stories: int, unit: str = "pos"):
        self.enabled = enabled
        self._bar = tqdm(total=0, unit=unit, desc=f"0/{stories} stories", disable=not enabled,
                         dynamic_ncols=True, smoothing=0.05) if enabled else None
        self.stories = stories
        self.stories_started = 0
        self.hits = 0
        self.fresh_requests = 0
        self.fresh_tokens = 0
        self._t0 = time.monotonic()
        self._last = 0.0
        self.extra: Callable[[], str] | None = None  # more postfix, e.g. per-replica requests

    def item_started(self, n: int) -> None:
        """An item (a story, an idea) starts, with `n` units of work."""
        self.stories_started += 1
        if self._bar is not None:
            self._bar.total += n
            self._bar.set_description(f"{self.stories_started}/{self.stories} stories", refresh=False)

    def hit(self, n: int = 1) -> None:
        self.hits += n

    def fresh(self, usage: Usage) -> None:
        self.fresh_requests += usage.requests
        self.fresh_tokens += usage.completion_tokens

    def unit_done(self) -> None:
        if self._bar is None:
            return
        self._bar.update(1)
        now = time.monotonic()
        if now - self._last > 0.5:
            self._last = now
            dt = max(1e-9, now - self._t0)
            self._bar.set_postfix_str(
                f"{self.fresh_requests / dt:.1f} req/s, {self.fresh_tokens / dt:.0f} tok/s, "
                f"{self.hits} cache hits" + (f", {self.extra()}" if self.extra else ""), refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
