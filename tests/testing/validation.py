"""vLLM's validation errors, as the fake server gives them: `BadRequest` (raised
by an answer's maker, sent by the door), its JSON (`error_payload`, the faults'
too), and the checks of a chat body's model and sampling fields."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class BadRequest(Exception):
    """A request the server refuses: the status and vLLM's error fields."""

    def __init__(self, status: int, message: str, etype: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.etype, self.param = status, message, etype, param


def error_payload(status: int, message: str, etype: str, param: str | None = None) -> dict:
    """vLLM's error JSON ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": etype, "param": param, "code": status}}


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_model(body: dict, models: Sequence[str]) -> None:
    """vLLM's `_check_model`: a `model` the server does not serve is a 404 (none named: any)."""
    model = body.get("model")
    if model is None:
        return
    if not isinstance(model, str):
        raise BadRequest(400, f"model: expected a string, got {type(model).__name__}",
                         "BadRequestError", "model")
    if model not in models:
        raise BadRequest(404, f"The model `{model}` does not exist.", "NotFoundError", "model")


def check_sampling(body: dict) -> tuple[int, int | None, int | None]:
    """(n, max_tokens, seed) of a chat body, its `temperature` and `top_p` checked too;
    a value out of range is vLLM's 400 naming the field."""
    n = body.get("n", 1)
    if n is None:
        n = 1
    if not is_int(n) or n < 1:
        raise BadRequest(400, f"n: expected an int >= 1, got {n!r}", "BadRequestError", "n")
    temp = body.get("temperature")
    if temp is not None and (not is_num(temp) or temp < 0):
        raise BadRequest(400, f"temperature: expected a number >= 0, got {temp!r}",
                         "BadRequestError", "temperature")
    top_p = body.get("top_p")
    if top_p is not None and (not is_num(top_p) or not 0 < top_p <= 1):
        raise BadRequest(400, f"top_p: expected a number in (0, 1], got {top_p!r}",
                         "BadRequestError", "top_p")
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (not is_int(max_tokens) or max_tokens < 1):
        raise BadRequest(400, f"max_tokens: expected an int >= 1, got {max_tokens!r}",
                         "BadRequestError", "max_tokens")
    seed = body.get("seed")
    if seed is not None and not is_int(seed):
        raise BadRequest(400, f"seed: expected an int, got {seed!r}", "BadRequestError", "seed")
    return n, max_tokens, seed
