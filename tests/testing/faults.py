"""Injected faults (`FAULT_KINDS`), planned by a door's `FaultPlan` (mixed into
`AnswerModel`): queued for the next requests to a path (`fail_next`) or drawn at
random from a seeded generator (`set_fault_rates`). The door takes one per request
(`_take_fault`) and plays it: an error status (`FAULT_STATUS`), a broken answer or
connection, a wait. What a client sees of each: the docstring of
tension.testing.openai_server."""

from __future__ import annotations

import collections
import random
import threading

from .settings import CHAT_PATH, FAULT_KINDS
from .validation import is_int, is_num

# the faults that are an error answer: (status, vLLM's error type)
FAULT_STATUS = {
    "500": (500, "InternalServerError"),
    "503": (503, "ServiceUnavailableError"),
    "429": (429, "RateLimitError"),
}


class FaultPlan:
    """The faults planned for a door (the lock is `AnswerModel`'s)."""

    _lock: threading.Lock

    def _init_faults(self) -> None:
        self._queued: dict[str, collections.deque[str]] = {}
        self._rates: list[tuple[str, float]] = []
        self._rate_path: str | None = CHAT_PATH
        self._rng = random.Random(0)

    def fail_next(self, kind: str, times: int = 1, path: str = CHAT_PATH) -> None:
        """Queue `times` faults of `kind` for the next requests to `path`
        (taken before any random fault)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"fault kind: expected one of {FAULT_KINDS}, got {kind!r}")
        if not is_int(times) or times < 1:
            raise ValueError(f"times: expected an int >= 1, got {times!r}")
        with self._lock:
            self._queued.setdefault(path, collections.deque()).extend([kind] * times)

    def set_fault_rates(
        self, rates: dict[str, float], seed: int = 0, path: str | None = CHAT_PATH
    ) -> None:
        """Inject faults at random: each request to `path` (every path if None) draws
        one uniform number from a Random(seed) and gets kind k with probability
        rates[k]. The rates must sum to at most 1; {} turns random faults off."""
        for k, r in rates.items():
            if k not in FAULT_KINDS:
                raise ValueError(f"fault kind: expected one of {FAULT_KINDS}, got {k!r}")
            if not is_num(r) or r < 0:
                raise ValueError(f"rate of {k!r}: expected a number >= 0, got {r!r}")
        if sum(rates.values()) > 1 + 1e-9:
            raise ValueError(f"fault rates sum to {sum(rates.values())}, more than 1")
        with self._lock:
            self._rates = [(k, float(r)) for k, r in rates.items() if r > 0]
            self._rate_path = path
            self._rng = random.Random(seed)

    def clear_faults(self) -> None:
        """Drop queued faults and turn random faults off."""
        with self._lock:
            self._queued.clear()
            self._rates = []

    def pending_faults(self, path: str = CHAT_PATH) -> int:
        """Queued faults not yet used for `path`."""
        with self._lock:
            q = self._queued.get(path)
            return len(q) if q else 0

    def _take_fault(self, path: str) -> str | None:
        if not self._queued and not self._rates:  # fast path, no lock
            return None
        with self._lock:
            q = self._queued.get(path)
            if q:
                return q.popleft()
            if self._rates and (self._rate_path is None or self._rate_path == path):
                u = self._rng.random()
                acc = 0.0
                for k, r in self._rates:
                    acc += r
                    if u < acc:
                        return k
        return None
