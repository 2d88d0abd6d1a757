"""What the client (core/llm/client.py) hands back: its time-outs, a chat answer
with its choices and usage, a timed streamed answer (`bench`), and the error of
an answer that stayed short of its choices, carrying what it spent."""

from __future__ import annotations

import msgspec

from tension.cache.records import Usage
from tension.core.errors import RetryBudgetError

__all__ = ["Timeouts", "ChatResult", "StreamResult", "ShortAnswerError"]


class Timeouts(msgspec.Struct, frozen=True, kw_only=True):
    """Seconds. `request` bounds one whole attempt (connect + send + answer)."""

    connect: float = 10.0
    request: float = 600.0


class ChatResult(msgspec.Struct, kw_only=True):
    texts: list[str]
    finish_reasons: list[str | None]
    first_logprobs: list[dict[str, float] | None] = []  # when the request asked for logprobs
    model: str
    usage: Usage
    seconds: float
    followups: int = 0  # requests sent to complete a short answer (their usage is in `usage`)


class StreamResult(msgspec.Struct, kw_only=True):
    """A streamed chat completion, timed (for `tension-run bench`)."""

    texts: list[str]
    model: str
    usage: Usage  # from the last event (stream_options.include_usage); zeros if the server sent none
    ttft: float | None  # seconds from sending to the first content token; None if no content came
    seconds: float  # sending to the last event
    events: int  # content events received (≈ tokens when the server sent no usage)
    finish_reasons: list[str | None] = []  # per choice; None: the stream ended before it finished
    plain: bool = False  # answered with a plain JSON body, not streamed (a server ignoring `stream`): no ttft
    # per choice: some event named it (a role delta, say), though it may have brought no text: a choice
    # opened and never finished was cut off, not left out (llama-cpp-python cuts before the first token)
    opened: list[bool] = []


class ShortAnswerError(RetryBudgetError):
    """Follow-ups ran out before an answer had all its choices; what the request
    spent on the way (`spent`, `followups`) is still counted by the run."""

    def __init__(self, message: str, spent: Usage, followups: int):
        super().__init__(message)
        self.spent = spent
        self.followups = followups
