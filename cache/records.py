"""What the cache stores: one msgpack record per completed request.

A record is written once, after the answer is complete (all n choices), and never
changed. New fields get defaults and a field's type never changes, so older
records stay readable (msgspec schema evolution).
"""

from __future__ import annotations

import msgspec

__all__ = ["Usage", "Endings", "Verdict", "JudgedPosition", "TokenCount", "Record", "encode", "decode"]


class Usage(msgspec.Struct, kw_only=True, omit_defaults=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    requests: int = 0

    def add(self, other: "Usage") -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_tokens += other.cached_tokens
        self.requests += other.requests


class Endings(msgspec.Struct, tag="endings", kw_only=True, omit_defaults=True):
    """The n endings of one generation request (possibly completed by follow-ups)."""

    texts: list[str]
    finish_reasons: list[str | None]
    model: str  # as the server reported it
    usage: Usage
    created: float  # unix time the record was completed
    seconds: float = 0.0  # wall time spent on the request(s)


class Verdict(msgspec.Struct, tag="verdict", kw_only=True, omit_defaults=True):
    """One judge answer, raw; parsed when used so a rerun can parse differently."""

    text: str
    finish_reason: str | None
    model: str
    usage: Usage
    created: float
    seconds: float = 0.0
    first_logprobs: dict[str, float] | None = None  # top log-probabilities of the first token


class JudgedPosition(msgspec.Struct, tag="judged", kw_only=True, omit_defaults=True):
    """The n judge answers of one position, raw and in ending order, written once
    every one of them is known: a rerun reads them with one lookup instead of n
    verdict keys. It is a summary of the `Verdict` records, which stay the truth:
    without it the pipeline reads those."""

    texts: list[str | None]  # the judge's answer per ending; None for an empty ending (never sent)
    first_logprobs: list[dict[str, float] | None] = []  # per ending, when the judge returned logprobs
    usage: Usage  # summed over the verdicts
    judged: int  # verdicts it stands for (non-empty endings)
    created: float


class TokenCount(msgspec.Struct, tag="tokens", kw_only=True, omit_defaults=True):
    count: int
    model: str
    created: float


Record = Endings | Verdict | JudgedPosition | TokenCount

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)


def encode(record: Record) -> bytes:
    return _encoder.encode(record)


def decode(data: bytes) -> Record:
    return _decoder.decode(data)
