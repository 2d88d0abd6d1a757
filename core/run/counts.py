"""What a run's LLM work counted: requests per role, usage sent and used,
follow-ups (run.json `requests`, `usage_this_run`, `usage_all_answers`, `http`).
The engine counts (core/run/engine.py); the store counts its own hits and misses."""

from __future__ import annotations

import msgspec

from tension.cache.records import Usage
from tension.core.llm.client import ShortAnswerError

__all__ = ["Counts", "ShortCounted"]


class Counts(msgspec.Struct, kw_only=True):
    """Every count of a run's LLM work but the store's hits and misses."""

    requests: dict[str, int]  # LLM requests sent, per role (a batch counts its prompts)
    usage_sent: Usage = msgspec.field(default_factory=Usage)  # what this run's requests used
    usage_all: Usage = msgspec.field(default_factory=Usage)  # what every answer used, cached or not
    followups: int = 0  # requests sent to complete short answers

    def sent(self, role: str, n: int = 1) -> None:
        self.requests[role] = self.requests.get(role, 0) + n

    def spend(self, usage: Usage, followups: int) -> None:
        """What requests used, answered or not (this run's usage)."""
        self.usage_sent.add(usage)
        self.followups += followups


class ShortCounted:
    """Around a send: a request that stays short still spent what it used (a class,
    not a generator: it wraps every request the run sends)."""

    def __init__(self, counts: Counts):
        self.counts = counts

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, ShortAnswerError):
            self.counts.spend(exc.spent, exc.followups)
