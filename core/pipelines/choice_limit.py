"""The most choices the generation servers answer in one HTTP request, as `estimate`
knows it before sending, and the HTTP requests that makes of the generation requests
(`tension-run estimate`'s figures; core/pipelines/estimate.py asks for it)."""

from __future__ import annotations

import msgspec

from tension.core.llm.router import Router

__all__ = ["ChoiceLimit", "choice_limit"]


class ChoiceLimit(msgspec.Struct, kw_only=True):
    """The most choices the generation servers answer one HTTP request, as the run
    knows it before sending (core/llm/traits.py `ServerTraits.max_n`: said by the
    server, its kind, or learned and recorded), and what that makes of the
    generation requests: a server that takes n in chunks of m is sent ⌈n / m⌉ HTTP
    requests per position (core/llm/choices.py). `known` False: the servers were
    not asked, or do not say (`how` tells which); `http_*` are then None."""

    known: bool
    max_n: int | None = None  # None with `known`: every server answers n whole (vLLM)
    how: str = ""  # where the limit comes from, or why it is not known
    per_position: int | None = None  # HTTP requests of one position's n endings
    http_requests: int | None = None  # of every generation request
    http_to_send: int | None = None  # of those still to send


def choice_limit(gen: Router, n: int, requests: int, to_send: int, *, asked: bool = True) -> ChoiceLimit:
    """What the generation servers of `gen` take of `n` choices a request (`ChoiceLimit`),
    for `requests` generation requests of which `to_send` are not cached. `asked`:
    whether the run could have asked them (a local --tokenizer without --model asks
    nothing)."""
    limits: list[int | None] = []
    hows: list[str] = []
    for s in gen.servers():
        t = s.traits
        if t.max_n is not None:
            limits.append(t.max_n)
            hows.append(f"{s.name} answers at most {t.max_n} choice(s) a request: {t.max_n_from or 'learned'}")
        elif s.models is None:
            why = ("not asked: no --model was given" if not asked else
                   "not asked: its token counts came from a local --tokenizer or the cache")
            return ChoiceLimit(known=False, how=f"{s.name} {why}")
        elif t.kind == "vllm":
            limits.append(None)
        else:
            return ChoiceLimit(known=False, how=f"{s.name} is {s.what}, which does not say it")
    bounded = [m for m in limits if m is not None]
    if not bounded or min(bounded) >= n:
        return ChoiceLimit(known=True, how="the servers answer n choices in one request",
                           per_position=1, http_requests=requests, http_to_send=to_send)
    m = min(bounded)  # several servers that differ: the most requests (a position goes to any of them)
    per = -(-n // m)
    return ChoiceLimit(known=True, max_n=m, how="; ".join(hows), per_position=per, http_requests=requests * per,
                       http_to_send=to_send * per)
