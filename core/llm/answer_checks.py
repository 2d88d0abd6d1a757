"""What an answer claims beyond its shape, checked before it is believed.

A body can decode well and still be wrong in ways that scramble a run without a
word (../shared/reviews/newuser-2026-12-02.md F4, F5, F7, F15):

- `misnumbered`: a choice's `index` says which request (batched path) or which
  seeded choice (chat) it answers. A proxy that numbers every choice 0, or
  repeats one, would put one ending's verdict on another. An answer is read only
  when its k choices are numbered exactly 0 … k − 1, each once (k below what was
  asked is a short answer, completed by follow-ups as before); anything else is
  unreadable. Chat answers check it as they are decoded (`ChatResponse`), so the
  retry loop treats them as every unreadable answer; the batched path checks its
  own (core/llm/batch.py) and falls back to chat requests; a streamed answer
  (core/llm/stream.py) must bring every index it asked for.
- `streamed_unasked`: a 200 whose body is server-sent events though the request
  did not ask to stream (a proxy that forces streaming): no retry reads it.
- the model an answer names is not the model asked (a proxy substituting models,
  an alias): kept on its server's record and told once (core/llm/servers.py
  `Server.answered_by`).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["misnumbered", "streamed_unasked", "STREAMED_UNASKED"]

# Why a streamed body that was not asked for is refused rather than read as a stream: the
# events carry no usage unless asked (stream_options), and their log-probabilities take
# another shape, so a record made from them would differ from the one the plain answer
# gives (docs/reliability.md, "Servers that say less than they seem").
STREAMED_UNASKED = ("answered with a server-sent event stream (data: …) although the request did not ask to "
                    "stream: a proxy in front of the server that forces streaming? Point the base URL at the "
                    "server itself, or turn streaming off in the proxy")


def misnumbered(indexes: Sequence[int], asked: int | None = None) -> str | None:
    """Why choices numbered `indexes` (in the order sent) cannot be placed, or None
    when they are 0 … k − 1, each once, and k is at most `asked` (None: not known)."""
    k = len(indexes)
    if sorted(indexes) == list(range(k)) and (asked is None or k <= asked):
        return None
    shown = ", ".join(map(str, indexes[:12])) + (", …" if k > 12 else "")
    expected = "0" if k == 1 else f"0 … {k - 1}"
    if asked is not None and k > asked:
        return f"{k} choices for {asked} asked (indexes {shown})"
    return f"choice indexes {shown}, not {expected} each once"


def streamed_unasked(body: bytes) -> bool:
    """Whether a body that was to be one JSON object is server-sent events."""
    head = body.lstrip()[:6]
    return head.startswith((b"data:", b"event:"))
