"""What a server's failures mean, and how they are told at once.

`status_error` reads an HTTP error status: 401/403 refuse the key, a 404 whose
body names the model asked for (vLLM's "The model `X` does not exist.") lacks the
model, any other 404/405 lacks the endpoint (FastAPI's ``{"detail": "Not Found"}``
names no model) — each a RefusedError that stops the run — and any other 4xx
refuses this one request (StatusError). `error_message` is the text of an error
body, redacted. `Outages` says on the run's notice channel what a server did (did
not answer, refused with 429, failed with 5xx, sent an unreadable answer) and how
long it will be retried, at most once per server per interval; and when it
answers again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlsplit

import msgspec

from tension.core.errors import ContextLengthError, NLimitError, RefusedError, ServerError, StatusError
from tension.core.llm.protocol import ErrorBody
from tension.core.llm.traits import is_context_error, names_n
from tension.core.redact import redact

__all__ = ["RetryPolicy", "KEY_ADVICE", "status_error", "error_message", "parse_retry_after",
           "Retryable", "Outages"]

KEY_ADVICE = ("the server refuses the API key: check the key in OPENAI_API_KEY (or in the variable "
              "--api-key-env names, for generate)")


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How long a request is retried: a count and a total time, with backoff."""

    attempts: int = 8  # tries per request, the first included
    total_seconds: float = 1800.0  # give up when the next wait would pass this
    backoff: float = 0.5  # first wait; doubles each retry
    backoff_cap: float = 30.0  # longest wait (Retry-After may ask for more, up to this)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts: expected an integer >= 1, got {self.attempts}")
        if self.total_seconds < 0 or self.backoff < 0 or self.backoff_cap < 0:
            raise ValueError("total_seconds, backoff and backoff_cap must be >= 0")


def status_error(status: int, url: str, message: str, model: str | None, named: str | None = None) -> ServerError:
    """The error of an HTTP 4xx answer to a request for `model` (None: no model);
    `named`: how the message names the server in place of `url` (a router the run
    started, by the servers behind it, never its private port)."""
    where = named or url
    if status in (401, 403):
        return RefusedError(status, where, message, "key", KEY_ADVICE)
    if status in (404, 405):
        if status == 404 and model and model in message:
            return RefusedError(status, where, message, "model", f"the server does not serve the model {model!r}")
        return RefusedError(status, where, message, "endpoint", f"the server has no {urlsplit(url).path}")
    if status == 400 and is_context_error(message):
        return ContextLengthError(status, where, message)
    if status == 400 and names_n(message):
        return NLimitError(status, where, message)
    return StatusError(status, where, message)


def error_message(data: bytes) -> str:
    """The message of an error body (OpenAI/vLLM ``{"error": {"message"}}``, vLLM's
    ``{"error": "Unauthorized"}``, FastAPI's ``{"detail"}``, else its first 300
    bytes), redacted."""
    return redact(_error_text(data))


def _error_text(data: bytes) -> str:
    try:
        err = msgspec.json.decode(data, type=ErrorBody)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return data[:300].decode("utf-8", "replace")
    if isinstance(err.error, str):
        return err.error
    if err.error is not None and err.error.message:
        return err.error.message
    text = err.message or (err.detail if isinstance(err.detail, str) else None)
    return text or data[:300].decode("utf-8", "replace")


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date; fall back to our own backoff


class Retryable(Exception):
    """A failed attempt worth retrying; `kind` says what happened, for the notice
    (core/llm/failures.py `Outages`): "unreachable" (no answer), "refused" (429),
    "failed" (5xx) or "unreadable" (a 200 whose body cannot be read). `overload`:
    a time-out or a 503, the signs of a server sent more than it holds
    (core/llm/capacity.py). `streamed`: an unreadable answer that is a stream the
    request did not ask for (core/llm/answer_checks.py), which no retry cures."""

    def __init__(self, message: str, retry_after: float | None = None, kind: str = "unreachable",
                 overload: bool = False, streamed: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.kind = kind
        self.overload = overload
        self.streamed = streamed


class Outage(msgspec.Struct, kw_only=True):
    """What was said of one server's failed attempts (its `Server` record's
    `outage`, core/llm/servers.py): kept with the server, not by a second key."""

    told_at: float | None = None  # when its last notice was given (time.monotonic)
    quiet: int = 0  # retries since that notice, not told
    down: bool = False  # told, and no answer since
    # When the wait a retry to it takes ends (Retry-After): answers to other requests
    # before then do not make it "answering again" (`Outages.answered`).
    waiting_until: float = 0.0


class Outages:
    """Retries told through `notice` (None: silent), at most one line per server
    per `interval` seconds, with the retries not told since: with 512 requests in
    flight to a dead server, or a 429 storm, one line, not hundreds. After a
    notice, the server's next answer is told once ("answers again"). What was said
    of a server is its own `Outage`; this is how it is said."""

    # what happened, by the kind of a failed attempt (`Retryable`)
    VERBS = {"unreachable": "did not answer", "refused": "refused", "failed": "failed on",
             "unreadable": "sent an unreadable answer to"}

    def __init__(self, notice: Callable[[str], None] | None, interval: float = 30.0):
        self.notice = notice
        self.interval = interval

    def retrying(self, state: Outage, name: str, method: str, url: str, kind: str, why: str, attempt: int,
                 policy: RetryPolicy, start: float) -> None:
        """Attempt `attempt` (0-based) of a request begun at `start` to a server
        (its `Outage` record, `state`) failed (`kind`, `why`) and will be retried: say
        so, and until when the budget lasts. `name` is how the server is named (a
        router the run started is named by the servers behind it)."""
        if self.notice is None:
            return
        now = time.monotonic()
        if state.told_at is not None and now - state.told_at < self.interval:
            state.quiet += 1
            return
        quiet, state.quiet = state.quiet, 0
        state.told_at = now
        state.down = True
        left = policy.attempts - attempt - 1
        waits = sum(min(policy.backoff_cap, policy.backoff * 2 ** i) for i in range(attempt, policy.attempts - 1))
        seconds = max(0.0, min(policy.total_seconds - (now - start), waits))
        until = time.strftime("%H:%M:%S", time.localtime(time.time() + seconds))
        also = f"; {quiet} more retried since the last notice" if quiet else ""
        self.notice(f"{name} {self.VERBS.get(kind, 'did not answer')} {method} {urlsplit(url).path} ({why}); "
                    f"retrying up to {left} more time(s), until about {until} (retry budget: {policy.attempts} "
                    f"attempts, {policy.total_seconds:g} s), then giving up{also} (one such line per server "
                    f"every {self.interval:g} s at most)")

    def answered(self, state: Outage, name: str) -> None:
        """A request to a server (its `Outage`, `state`; named `name`) got an answer:
        an outage told is over, once the wait a retry of it takes has passed
        (`waiting_until`: answers to other requests meanwhile do not end it,
        Retry-After)."""
        if state.down and time.monotonic() >= state.waiting_until:
            state.down = False
            if self.notice and state.told_at is not None:
                self.notice(f"{name}: answering again (after {time.monotonic() - state.told_at:.0f} s)")
