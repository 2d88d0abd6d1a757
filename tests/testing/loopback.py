"""`LoopbackServer`, the HTTP door to the fake answer model (documented, with
every setting, in tension.testing.openai_server, where tests import it from): its
settings as plain attributes and `reset`. Its parts, each a mixin of its own
module: the answer model (answers.py `AnswerModel`), its life in a thread
(loopback_thread.py), its aiohttp application (loopback_app.py), the info routes
(loopback_info.py), its limits (loopback_limits.py) and faults played on the wire
(loopback_faults.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .answers import AnswerModel
from .loopback_app import LoopbackApp
from .loopback_faults import WireFaults
from .loopback_info import InfoRoutes
from .loopback_limits import WireLimits
from .loopback_thread import ServedInThread
from .settings import AnswerSettings, WireSettings, route

__all__ = ["LoopbackServer"]


class LoopbackServer(ServedInThread, LoopbackApp, InfoRoutes, WireLimits, WireFaults, AnswerModel):
    """An aiohttp OpenAI-compatible server on 127.0.0.1 in a background thread.

    `model` is one served model name or several. Its settings are two records
    (tests/testing/settings.py): `settings`, an `AnswerSettings` (what either door
    answers: `empty_rate`, `yes_rate`, `dialect`, `delay`, `slow_seconds`,
    `retry_after`, …), and `wire`, a `WireSettings` (this server's own: `port`,
    `max_concurrent`, `api_key`, `prefix`, `rate_limit`, …); keywords name their
    fields. Every one is also a plain attribute, settable at any time from any
    thread (`max_concurrent` and `prefix` before start). `max_concurrent` > 0 serves
    at most that many chat requests at once: a replica's capacity, for the scale-out
    tests and bench. `misbehave` (one of `MISBEHAVIOURS`, or None) makes the model
    not do the task. `reset` makes a used server as new (the tests share one,
    tests/conftest.py).
    """

    def __init__(self, model: str | Sequence[str] = "test-model", settings: AnswerSettings | None = None,
                 wire: WireSettings | None = None, **knobs: Any) -> None:
        """`model`: the served name(s); `settings` (an `AnswerSettings`, what either door
        answers) and `wire` (a `WireSettings`, this server's own), the defaults without
        them, with any of their fields given as keywords replaced, each in its record."""
        models: tuple[str, ...] = (model,) if isinstance(model, str) else tuple(model)
        if not models:
            raise ValueError("LoopbackServer needs at least one model name")
        answers, own = route("LoopbackServer", knobs, (AnswerSettings, WireSettings))
        self.settings = AnswerSettings.replaced("LoopbackServer", settings, answers)
        self.wire = WireSettings.replaced("LoopbackServer", wire, own)
        self.host = self.wire.host
        self.port = self.wire.port
        # The knobs, plain attributes a test may set at any time; `reset` restores them.
        self._knobs: dict[str, Any] = {
            "models": models, "model": models[0], **self.settings.values(),
            **{k: v for k, v in self.wire.values().items() if k not in ("host", "port")},
        }
        self.models: tuple[str, ...]
        self.model: str
        vars(self).update(self._knobs)
        self._init_model_state()  # records, faults, scripts, vocabulary, prefix cache, counters (answers.py)
        self._init_limits()  # no rate-limit window, no semaphore, no slot held
        self._init_app()  # no request being served
        self._init_thread()  # no loop, thread or runner

    def reset(self) -> LoopbackServer:
        """As a new server on the same port, for one shared by many tests: every knob
        as the constructor set it (attributes a test added are dropped), no records,
        faults, scripted answers, token vocabulary or prefix cache, /metrics counters
        at 0. A request still being served (left behind by the last test) is cancelled
        by a restart, so that it records nothing in the next test; a stopped server
        starts again."""
        if self.running and self._active:
            self.stop()
        for k in [k for k in vars(self) if not k.startswith("_") and k not in self._knobs
                  and k not in ("host", "port", "responders", "settings", "wire")]:
            delattr(self, k)
        vars(self).update(self._knobs)
        with self._lock:
            self._init_records()
            self._init_faults()
            self._init_vocabulary()
            self._rate_window, self._rate_refused = None, 0
            self.responders.clear()
            self._draws.clear()
        if self.running:  # idle: nothing in the server's loop uses these now
            self._init_counters()
            self._capacity = None
        else:
            self.start()  # a fresh prefix cache, semaphore and counters
        return self

    def __repr__(self) -> str:
        state = f"port={self.port}" if self.running else "stopped"
        return f"<LoopbackServer models={list(self.models)} {state}>"
