"""A chat answer as vLLM streams it (``"stream": true``): the server-sent events
both doors send (`stream_events`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from .tokens import count_answer


def stream_events(payload: dict, body: dict, *, dialect: str, stream_cut: int,
                  encode: Callable[[Any], bytes]) -> Iterator[bytes]:
    """A chat answer `payload` as vLLM streams it (``"stream": true``), one
    server-sent event (``data: …\\n\\n``) at a time: a role event, one per word of
    each choice and a finish event per choice, the usage last when
    ``stream_options.include_usage`` is set (llama.cpp: one per choice, each counting
    that choice), then ``data: [DONE]``. `stream_cut` > 0: [DONE] after that many
    words, with no finish and no usage (a stream cut off); -1: before the first word. Both doors send these."""
    base = {"id": payload["id"], "object": "chat.completion.chunk", "created": payload["created"],
            "model": payload["model"]}

    def event(choices: list, usage: dict | None = None) -> bytes:
        return b"data: " + encode({**base, "choices": choices, "usage": usage}) + b"\n\n"

    words = 0
    for ch in payload["choices"]:
        i = ch["index"]
        yield event([{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        for piece in re.findall(r"\S+\s*", ch["message"]["content"]):
            if stream_cut and words >= max(stream_cut, 0):
                yield b"data: [DONE]\n\n"
                return
            words += 1
            yield event([{"index": i, "delta": {"content": piece}, "finish_reason": None}])
        yield event([{"index": i, "delta": {}, "finish_reason": ch["finish_reason"]}])
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") and "usage" in payload:  # serve_usage=False: none
        if dialect == "llamacpp":
            for ch in payload["choices"]:
                yield event([], {**payload["usage"], "completion_tokens": count_answer(ch["message"]["content"])})
        else:
            yield event([], payload["usage"])
    yield b"data: [DONE]\n\n"
