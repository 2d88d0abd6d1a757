"""An OpenAI-compatible server in process: a `Transport` (core/llm/transport.py)
that answers without sockets, in the manner of inspect_ai's mockllm.

Everything above the transport runs as it does against a real server: the
client's retries and follow-ups, the pre-flight check, the engine's cache, lanes
and counts, the committer. So a pipeline test can drive `score`, `generate` or
`fairplay` end to end without the HTTP test server's thread and sockets, and the
HTTP tests (tests/testing/openai_server.py) stay for the client and the wire.

Through the API or the CLI (the verbs' doors), whose clients take it for its
`base_url` while it is `serving` (core/llm/transport.py `served_in_process`):

    with InProcessServer(["test-gen", "test-judge"]).serving() as server:
        r = tension.score(corpus, out=out, base_url=server.base_url, model="test-gen")
        assert server.count(kind="judge") == r.summary.requests["judge"]
        main(["score", corpus, "--out", out2, "--base-url", server.base_url, ...])

It answers by the same rules as the HTTP test server, LoopbackServer, because
both are doors to one fake answer model (tests/testing/answers.py): the same
endings (`expected_endings`), verdicts (`expected_verdict`), scripted answers
(`respond`, `script`: a reader's JSON), usage and cached tokens, validation errors,
misbehaviours, llama.cpp dialect, records (`count`, `requests`) and faults
(`fail_next`, `set_fault_rates`). So a spec moves from one door to the other with
its assertions unchanged. The wire's own faults have their in-process kin: "drop"
and "truncate" are a `TransportError` (what the HTTP transport makes of them),
"slow" sleeps `slow_seconds`. Streamed answers come as the HTTP server streams
them (the same events, `stream_cut` too), line by line.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import msgspec

from tension.core.llm.transport import Reply, StreamStatus, TransportError, served_in_process

from .answers import AnswerModel
from .faults import FAULT_STATUS
from .records import Recorded
from .rules import HTML_PAGE
from .settings import CHAT_PATH, COMPLETIONS_PATH, AnswerSettings, route
from .streaming import stream_events
from .validation import BadRequest, error_payload

__all__ = ["InProcessServer"]

_NOT_FOUND = b'{"detail": "Not Found"}'  # FastAPI's 404 for a route a server lacks
_numbers = itertools.count(1)  # each server its own root, so several can be served at once


class InProcessServer(AnswerModel):
    """See the module docstring. Its settings are an `AnswerSettings` (`settings`,
    the record LoopbackServer takes too), with any of its fields given as keywords
    replaced; the wire's (`WireSettings`: a port, a key, a rate limit…) it has not, and
    a keyword naming one is a TypeError that says so. `models=` is another name for
    `model`. `base_url` is this server's own root (``http://in-process-N:8000``): the
    transport passed as `transport=` ignores it; under `serving` it is the root a
    client's default transport sends to it."""

    def __init__(self, model: str | Sequence[str] = "test-model", settings: AnswerSettings | None = None, *,
                 models: Sequence[str] | None = None, **knobs: Any) -> None:
        names = tuple(models) if models is not None else ((model,) if isinstance(model, str) else tuple(model))
        if not names:
            raise ValueError("InProcessServer needs at least one model name")
        (answers,) = route("InProcessServer", knobs, (AnswerSettings,))
        self.settings = AnswerSettings.replaced("InProcessServer", settings, answers)
        self.models, self.model = names, names[0]
        self.base_url = f"http://in-process-{next(_numbers)}:8000"
        # plain attributes, as LoopbackServer's (`delay`: seconds each chat request takes, an interrupt test's pace)
        vars(self).update(self.settings.values())
        self._init_model_state()

    def __enter__(self) -> InProcessServer:  # as LoopbackServer's `with`: nothing to start or stop
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __repr__(self) -> str:
        return f"<InProcessServer {self.base_url} models={list(self.models)}>"

    @contextlib.contextmanager
    def serving(self) -> Iterator[InProcessServer]:
        """Inside, clients made without a transport (the CLI's, the API's) send
        the requests for `base_url` here, and the rest over HTTP."""
        with served_in_process(self.base_url, self):
            yield self

    def fail_next(self, kind: str | int, times: int = 1, path: str = CHAT_PATH) -> None:
        """LoopbackServer's `fail_next`; a status may be given as a number (503)."""
        super().fail_next(str(kind), times, path)

    # -- the Transport -----------------------------------------------------------------

    async def open(self, headers: dict[str, str]) -> None:
        return None

    async def close(self) -> None:
        return None

    async def send(self, method: str, url: str, body: bytes | None, headers: dict[str, str] | None,
                   timeout: float | None = None) -> Reply:
        reply, _, _ = await self._exchange(method, url, body, headers)
        return reply

    async def _exchange(self, method: str, url: str, body: bytes | None,
                        headers: dict[str, str] | None = None) -> tuple[Reply, str | None, Any]:
        """One request's reply, with the fault it took and its decoded body (recorded)."""
        path = urlsplit(url).path
        t0 = time.monotonic()
        visit = self._arrive(headers, path in (CHAT_PATH, COMPLETIONS_PATH))  # answers.py
        fault = None if visit.probe else self._take_fault(path)  # planted faults are the run's requests'
        try:
            doc: Any = msgspec.json.decode(body) if body else None
        except msgspec.DecodeError:
            doc = None
        status = 0
        try:
            # a transport yields to the loop on every request, as a socket would
            await asyncio.sleep(self.delay if path in (CHAT_PATH, COMPLETIONS_PATH) else 0)
            if fault in FAULT_STATUS:
                status, etype = FAULT_STATUS[fault]
                return Reply(status=status, body=msgspec.json.encode(
                    error_payload(status, f"injected fault {fault}", etype)),
                    retry_after=str(self.retry_after) if fault == "429" and self.retry_after is not None else None
                ), fault, doc
            if fault in ("drop", "truncate"):
                status = 200 if fault == "truncate" else 0
                raise TransportError(f"in process: a planted {fault}")
            if fault == "slow":
                await asyncio.sleep(self.slow_seconds)
            status, out = self._answer(method, path, doc, fault)
            if fault == "nonjson" and status == 200:
                return Reply(status=200, body=b"<html>oops</html>"), fault, doc
            return Reply(status=status, body=out), fault, doc
        finally:
            self._add_record(Recorded(path, method, doc if isinstance(doc, dict) else None, status, fault, t0,
                                      probe=visit.probe))
            self._leave(visit)

    def _answer(self, method: str, path: str, doc: Any, fault: str | None) -> tuple[int, bytes]:
        """(status, body) of one request, by the model's rules and the server's traits."""
        enc = msgspec.json.encode
        if method == "GET":
            if path == "/v1/models":
                return 200, enc(self._models_payload())
            if path == "/health" and self.serve_health:
                return 200, b""
            if path == "/metrics" and self.serve_metrics:
                return 200, self._metrics_text().encode()
            if path == "/props" and self.dialect == "llamacpp" and self.serve_props:
                return 200, enc(self._props_payload())
            return 404, _NOT_FOUND
        makers = {CHAT_PATH: lambda b: self._chat_payload(b, fault),
                  COMPLETIONS_PATH: lambda b: self._completions_payload(b, fault)}
        if self.serve_tokenize:
            makers["/tokenize"] = self._tokenize_payload
        if not self.batching:
            makers.pop(COMPLETIONS_PATH)
        else:
            makers["/detokenize"] = self._detokenize_payload
        make = makers.get(path) if method == "POST" else None
        if make is None:
            return 404, _NOT_FOUND
        if self.misbehave == "html200":
            return 200, HTML_PAGE.encode()
        if not isinstance(doc, dict):
            return 400, enc(error_payload(400, "the body is not a JSON object", "BadRequestError"))
        try:
            payload = make(doc)
        except BadRequest as e:
            return e.status, enc(error_payload(e.status, e.message, e.etype, e.param))
        if not self.serve_usage:
            payload = {k: v for k, v in payload.items() if k != "usage"}
        return 200, enc(payload)

    async def lines(self, url: str, body: bytes, headers: dict[str, str] | None) -> AsyncIterator[bytes]:
        """A streamed POST as the HTTP server streams it: an answer other than 200 is
        `StreamStatus`; a chat answer asked with ``"stream": true`` and no fault comes
        as its server-sent events (answers.py `stream_events`), line by line; any other
        answer (a fault's, a misbehaving server's page) as the lines of its body."""
        reply, fault, doc = await self._exchange("POST", url, body)
        if reply.status != 200:
            raise StreamStatus(reply.status, reply.body)
        streamed = (fault is None and isinstance(doc, dict) and doc.get("stream") is True
                    and urlsplit(url).path == CHAT_PATH and self.misbehave != "html200")
        if not streamed:
            for line in reply.body.splitlines(keepends=True):
                yield line
            return
        payload = msgspec.json.decode(reply.body)
        for event in stream_events(payload, doc, dialect=self.dialect, stream_cut=self.stream_cut,
                                   encode=msgspec.json.encode):
            await asyncio.sleep(0)  # each event a read from the socket: other tasks run between them
            for line in event.splitlines(keepends=True):
                yield line
