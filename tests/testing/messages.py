"""Chat messages as the fake server reads them: a message's text, the last user
message, the server's chat template (`render_template`, and `parse_rendered` back),
a request's kind (`classify`), and vLLM's check of a body's messages (`check_messages`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from .validation import BadRequest


def content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of an OpenAI content-part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text", ""), str)
        )
    return ""


def _role_text(messages: Iterable[dict], role: str) -> str:
    return "\n".join(content_text(m.get("content")) for m in messages if m.get("role") == role)


def last_user(messages: Sequence[dict]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            return content_text(m.get("content"))
    return ""


_ROLE_LINE = re.compile(r"<\|(system|user|assistant)\|>\n")
_NO_THINK = "<think>\n\n</think>\n\n"


def render_template(messages: Sequence[dict], add_generation_prompt: bool = True,
                    kwargs: dict | None = None, quirk: str | None = None) -> str:
    """The test server's chat template: ``<|role|>\\n`` + content + ``\\n`` per message,
    then ``<|assistant|>\\n`` (and an empty think block when enable_thinking is false).
    `quirk` "newlines": the template folds blank lines in a content, as a template that
    edits the text would (a prompt built around the rendered template then differs)."""
    def content(m: dict) -> str:
        text = content_text(m.get("content"))
        return text.replace("\n\n", "\n") if quirk == "newlines" else text

    text = "".join(f"<|{m.get('role')}|>\n{content(m)}\n" for m in messages)
    if add_generation_prompt:
        text += "<|assistant|>\n"
        if isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False:
            text += _NO_THINK
    return text


def parse_rendered(text: str) -> list[dict]:
    """The messages a prompt rendered by `render_template` holds (the generation
    prompt dropped); a text that is not one is a single user message."""
    if text.endswith(_NO_THINK):
        text = text[: -len(_NO_THINK)]
    if text.endswith("<|assistant|>\n"):
        text = text[: -len("<|assistant|>\n")]
    parts = _ROLE_LINE.split(text)
    if parts[0] != "" or len(parts) < 3 or not all(c.endswith("\n") for c in parts[2::2]):
        return [{"role": "user", "content": text}]
    return [{"role": r, "content": c[:-1]} for r, c in zip(parts[1::2], parts[2::2])]


def classify(messages: Sequence[dict]) -> str:
    """"generation" if a system message mentions "fiction writer", "judge" if it
    mentions "literary judge" (case-insensitive), else "other"."""
    system = _role_text(messages, "system").lower()
    if "literary judge" in system:
        return "judge"
    if "fiction writer" in system:
        return "generation"
    return "other"


def check_messages(msgs: Any) -> list[dict]:
    """`msgs` if it is a non-empty list of messages (objects with a string `role`, a
    string or part-list `content`), else vLLM's 400."""
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest(400, "messages: expected a non-empty list of messages",
                         "BadRequestError", "messages")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest(400, f"messages[{i}]: expected an object with a string `role`",
                             "BadRequestError", "messages")
        c = m.get("content")
        if c is not None and not isinstance(c, (str, list)):
            raise BadRequest(400, f"messages[{i}].content: expected a string, got "
                             f"{type(c).__name__}", "BadRequestError", "messages")
    return msgs
