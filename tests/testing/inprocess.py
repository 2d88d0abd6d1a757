"""An OpenAI-compatible server in process: a `Transport` (core/llm/transport.py)
that answers without sockets, in the manner of inspect_ai's mockllm.

Everything above the transport runs as it does against a real server: the
client's retries and follow-ups, the pre-flight check, the engine's cache, lanes
and counts, the committer. So a pipeline test can drive `score`, `generate` or
`fairplay` end to end in a fraction of the time an HTTP fake costs, and the
HTTP tests (tests/testing/openai_server.py) stay for the client and the wire.

    server = InProcessServer(models=["gen", "judge"])
    summary = score(cfg, corpus, out, transport=server)
    assert server.count("/v1/chat/completions") == summary.requests["generation"] + …

Answers are a function of the request alone (its messages, seed and choice
index), so a run is reproducible and a cached rerun is the same bytes. The
judge (the score prompt's system message) answers "Y" for about `yes_rate` of
the endings; everything else gets an ending of a few words. `fail_next(status)`
answers the next requests with an HTTP error; `respond(fn)` replaces the
answers (`fn(messages, n, seed) -> list[str] | None`, None: the default).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import msgspec

from tension.core.llm.transport import Reply, StreamStatus
from tension.core.prompts import score as score_prompts

__all__ = ["InProcessServer", "Sent"]

Respond = Callable[[list[dict[str, str]], int, int | None], list[str] | None]

_WORDS = "the keeper waited while rain fell and the ferry did not come back before the night".split()


class Sent(msgspec.Struct, kw_only=True):
    method: str
    path: str
    body: Any  # the decoded JSON body, or None


def _digest(*parts: object) -> bytes:
    return hashlib.sha256(repr(parts).encode()).digest()


class InProcessServer:
    """See the module docstring. `max_model_len` is what /tokenize reports."""

    def __init__(self, models: list[str], *, yes_rate: float = 0.3, max_model_len: int = 32768):
        self.models = list(models)
        self.yes_rate = yes_rate
        self.max_model_len = max_model_len
        self.sent: list[Sent] = []
        self._faults: list[int] = []
        self._respond: Respond | None = None

    # -- what a test sets and reads -----------------------------------------------

    def fail_next(self, status: int, times: int = 1) -> None:
        self._faults += [status] * times

    def respond(self, fn: Respond | None) -> None:
        self._respond = fn

    def count(self, path: str) -> int:
        return sum(s.path == path for s in self.sent)

    # -- the Transport -----------------------------------------------------------------

    async def open(self, headers: dict[str, str]) -> None:
        return None

    async def close(self) -> None:
        return None

    async def send(self, method: str, url: str, body: bytes | None, headers: dict[str, str] | None,
                   timeout: float | None = None) -> Reply:
        path = urlsplit(url).path
        payload = msgspec.json.decode(body) if body else None
        self.sent.append(Sent(method=method, path=path, body=payload))
        if self._faults:
            status = self._faults.pop(0)
            return Reply(status=status, body=b'{"error": {"message": "a planted fault"}}')
        if method == "GET" and path == "/v1/models":
            return self._json({"object": "list", "data": [{"id": m, "owned_by": "inprocess"} for m in self.models]})
        if method == "POST" and path == "/tokenize":
            return self._json({"count": len(str(payload.get("prompt", "")).split()),
                               "max_model_len": self.max_model_len})
        if method == "POST" and path == "/v1/chat/completions":
            return self._chat(payload)
        return Reply(status=404, body=b'{"detail": "Not Found"}')

    async def lines(self, url: str, body: bytes, headers: dict[str, str] | None) -> AsyncIterator[bytes]:
        raise StreamStatus(404, b'{"detail": "streaming is not served in process"}')
        yield b""  # an async generator

    # -- answers -------------------------------------------------------------------------

    @staticmethod
    def _json(doc: Any) -> Reply:
        return Reply(status=200, body=msgspec.json.encode(doc))

    def _chat(self, req: dict[str, Any]) -> Reply:
        if req.get("model") not in self.models:
            return Reply(status=404, body=msgspec.json.encode(
                {"error": {"message": f"The model `{req.get('model')}` does not exist."}}))
        messages, n, seed = req["messages"], int(req.get("n", 1)), req.get("seed")
        texts = (self._respond(messages, n, seed) if self._respond else None) or self._answers(messages, n, seed)
        prompt = sum(len(m["content"].split()) for m in messages)
        choices = [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                   for i, t in enumerate(texts)]
        return self._json({"model": req["model"], "choices": choices,
                           "usage": {"prompt_tokens": prompt,
                                     "completion_tokens": sum(len(t.split()) for t in texts)}})

    def _answers(self, messages: list[dict[str, str]], n: int, seed: int | None) -> list[str]:
        if messages and messages[0].get("content") == score_prompts.JUDGE_SYSTEM:
            h = _digest(messages[-1]["content"])
            return ["Y" if h[0] < 256 * self.yes_rate else "N"]
        out = []
        for i in range(n):
            # choice i of a seeded request samples with seed + i, as vLLM's do
            h = _digest(messages[-1]["content"], seed + i if seed is not None else i)
            out.append(" ".join(_WORDS[b % len(_WORDS)] for b in h[: 4 + h[0] % 6]).capitalize() + ".")
        return out
