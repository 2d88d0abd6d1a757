"""What a fake server saw: one `Recorded` per request, kept by the door's
`RecordBook` (mixed into `AnswerModel`) when its `record` setting is on, for a test
to count (`count`) or read (`requests`)."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

from .messages import classify
from .settings import CHAT_PATH, KINDS


@dataclass(slots=True)
class Recorded:
    """One request as the server saw it, appended when it finished.

    `body` is the decoded JSON body (None for GET or a body that is not a JSON
    object); `status` is the status line sent (200 for "truncate"), 0 when none was
    sent ("drop", a request cancelled by shutdown); `fault` the injected fault kind or None;
    `t` is time.monotonic() at arrival.
    """

    path: str
    method: str
    body: dict | None
    status: int
    fault: str | None
    t: float
    # `kind`, found once ("": not yet; None is a kind, a request not for chat): a test that
    # waits for a count (`count(kind=…)` every few ms while a run goes on) classified every
    # record again at each look
    _kind: str | None = dataclasses.field(default="", repr=False, compare=False)
    # sent by the tool's own probe (PROBE_HEADER: core/llm/seed_probe.py), not by the run's work:
    # `count` and `requests` leave it out, `probes` has it
    probe: bool = False

    @property
    def kind(self) -> str | None:
        """generation/judge/other for chat requests (see `classify`), None otherwise."""
        if self._kind == "":
            self._kind = self._classify()
        return self._kind

    def _classify(self) -> str | None:
        if self.path != CHAT_PATH:
            return None
        msgs = self.body.get("messages") if isinstance(self.body, dict) else None
        if not isinstance(msgs, list):
            return "other"
        return classify([m for m in msgs if isinstance(m, dict)])


class RecordBook:
    """The records of a door, in order of completion (the lock is `AnswerModel`'s)."""

    record: bool
    _lock: threading.Lock

    def _init_records(self) -> None:
        self._records: list[Recorded] = []

    @property
    def requests(self) -> list[Recorded]:
        """A copy of the records of the run's requests, in order of completion (the tool's
        probes left out: `probes`)."""
        with self._lock:
            return [r for r in self._records if not r.probe]

    @property
    def probes(self) -> list[Recorded]:
        """The records of the tool's own probes (PROBE_HEADER), in order of completion."""
        with self._lock:
            return [r for r in self._records if r.probe]

    def count(self, path: str | None = None, kind: str | None = None, probes: bool = False) -> int:
        """Finished requests to `path` (any if None) of `kind` (any if None), the tool's
        probes left out unless `probes`. `kind` is "generation", "judge" or "other" and
        only matches chat requests."""
        if kind is not None and kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
        with self._lock:
            recs = [r for r in self._records if probes or not r.probe]
        return sum(
            1 for r in recs if (path is None or r.path == path) and (kind is None or r.kind == kind)
        )

    def reset_records(self) -> None:
        with self._lock:
            self._records.clear()

    def _add_record(self, rec: Recorded) -> None:
        prefix = getattr(self, "prefix", "")  # the wire's (WireSettings): recorded without it
        if prefix and rec.path.startswith(prefix + "/"):
            rec.path = rec.path[len(prefix):]
        if self.record:
            with self._lock:
                self._records.append(rec)
