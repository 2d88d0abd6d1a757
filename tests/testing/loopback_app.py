"""The test server's aiohttp application (`LoopbackApp`, mixed into
`LoopbackServer`): its routes (`_app`, every one also under a gateway's `prefix`),
the handlers of the routes that answer (chat, /v1/completions, /tokenize,
/detokenize, llama-cpp-python's token counter) and the one way each is served
(`_serve`): read the body, wait its turn (loopback_limits.py), play its fault
(loopback_faults.py), ask the answer model for the payload (answers.py), apply what
the wire settings change (``serve_cached_tokens``, ``stream_ignored``,
``stream_always``), send it, record it. The info routes are loopback_info.py's."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from .records import Recorded
from .rules import HTML_PAGE
from .settings import CHAT_PATH, COMPLETIONS_PATH, COUNT_PATH
from .streaming import stream_events
from .validation import BadRequest, error_payload
from .wire_json import DECODE_ERRORS, decode, encode, json_response


class LoopbackApp:
    """The routes and the serving of a LoopbackServer (its settings are its plain
    attributes; the payload makers are the answer model's, the middlewares and the
    turn loopback_limits.py's, the faults loopback_faults.py's)."""

    prefix: str
    dialect: str
    batching: bool
    misbehave: str | None
    serve_tokenize: bool
    serve_usage: bool
    serve_completions: bool
    serve_cached_tokens: bool
    stream_ignored: bool
    stream_always: bool
    stream_cut: int

    def _init_app(self) -> None:
        self._active = 0  # requests being served (in the server's loop)

    def _app(self) -> web.Application:
        """The application: every route, and the middlewares (the key, the rate limit)."""
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._auth, self._rate_limited])
        app.router.add_get("/v1/models", self._h_models)
        app.router.add_get("/health", self._h_health)
        app.router.add_get("/metrics", self._h_metrics)
        app.router.add_get("/props", self._h_props)
        app.router.add_post("/tokenize", self._h_tokenize)
        app.router.add_post(COUNT_PATH, self._h_count)
        app.router.add_post(CHAT_PATH, self._h_chat)
        app.router.add_post("/detokenize", self._h_detokenize)
        app.router.add_post(COMPLETIONS_PATH, self._h_completions)
        if self.prefix:  # a gateway's path prefix: the same handlers under it
            for route in list(app.router.routes()):
                if route.method in ("GET", "POST"):
                    app.router.add_route(route.method, self.prefix + route.resource.canonical, route.handler)
        return app

    # ------------------------------------------------------------------ handlers

    def _not_found(self, request: web.Request) -> web.Response:
        self._add_record(Recorded(request.path, request.method, None, 404, None, time.monotonic()))
        return json_response({"detail": "Not Found"}, status=404)

    async def _h_count(self, request: web.Request) -> web.StreamResponse:
        if self.dialect != "llamacpp_python":
            return self._not_found(request)
        return await self._serve(request, chat=False, payload=self._count_payload)

    async def _h_tokenize(self, request: web.Request) -> web.StreamResponse:
        if not self.serve_tokenize or self.dialect == "llamacpp_python":
            return self._not_found(request)
        return await self._serve(request, chat=False)

    async def _h_chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _h_detokenize(self, request: web.Request) -> web.StreamResponse:
        if not self.batching:
            return self._not_found(request)
        return await self._serve(request, chat=False, payload=self._detokenize_payload)

    async def _h_completions(self, request: web.Request) -> web.StreamResponse:
        if not self.batching or not self.serve_completions:
            return self._not_found(request)
        return await self._serve(request, chat=True, payload=self._completions_payload)

    # ------------------------------------------------------------------- serving

    async def _read_json(self, request: web.Request) -> tuple[Any, bool]:
        raw = await request.read()
        try:
            return decode(raw), True
        except DECODE_ERRORS:
            return None, False

    async def _serve(self, request: web.Request, chat: bool,
                     payload: Callable[..., Any] | None = None) -> web.StreamResponse:
        """Read, apply the fault, answer, record (also when cancelled by shutdown).
        `payload`: the answer's maker, when not the chat or /tokenize one."""
        make = payload
        t0 = time.monotonic()
        path = request.path.removeprefix(self.prefix) if self.prefix else request.path
        body: Any = None
        status = 0
        visit = self._arrive(request.headers, chat)  # answers.py: a probe's mark, the requests in flight
        fault = None if visit.probe else self._take_fault(path)  # planted faults are the run's requests'
        self._active += 1
        try:
            body, ok = await self._read_json(request)
            await self._wait_turn(body, chat, make is not None)
            if fault is not None and (played := await self._fault_first(request, fault)) is not None:
                status, resp = played
                return resp
            status, answer = self._answer(body, ok, chat, make, fault)
            if self.misbehave == "html200":
                status = 200
                return web.Response(text=HTML_PAGE, content_type="text/html")
            if status == 200 and isinstance(answer, dict):
                answer = self._wire_usage(answer)
            if chat and make is None and status == 200 and fault is None and (
                    (body.get("stream") is True and not self.stream_ignored) or self.stream_always):
                return await self._stream(request, body, answer)
            data = encode(answer)
            if fault is not None and (played_last := self._fault_last(request, fault, status, data)) is not None:
                status, resp = played_last
                return resp
            return web.Response(body=data, status=status, content_type="application/json")
        finally:
            if not isinstance(body, dict):
                body = None
            self._add_record(Recorded(path, request.method, body, status, fault, t0, probe=visit.probe))
            self._active -= 1
            self._leave(visit)

    def _answer(self, body: Any, ok: bool, chat: bool, make: Callable[..., Any] | None,
                fault: str | None) -> tuple[int, Any]:
        """The status and payload the answer model gives `body` (a 400 for a body
        that is not a JSON object, or one the model refuses)."""
        if not ok or not isinstance(body, dict):
            return 400, error_payload(400, "the body is not a JSON object", "BadRequestError")
        try:
            if make is not None:
                return 200, (make(body, fault) if chat else make(body))
            return 200, (self._chat_payload(body, fault) if chat else self._tokenize_payload(body))
        except BadRequest as e:
            return e.status, error_payload(e.status, e.message, e.etype, e.param)

    def _wire_usage(self, answer: dict) -> dict:
        """A 200 answer's `usage` as the server sends it: none with ``serve_usage`` off,
        without ``prompt_tokens_details`` with ``serve_cached_tokens`` off."""
        if not self.serve_usage:
            return {k: v for k, v in answer.items() if k != "usage"}
        usage = answer.get("usage")
        if not self.serve_cached_tokens and isinstance(usage, dict) and "prompt_tokens_details" in usage:
            usage = {k: v for k, v in usage.items() if k != "prompt_tokens_details"}
            return {**answer, "usage": usage}
        return answer

    async def _stream(self, request: web.Request, body: dict, payload: dict) -> web.StreamResponse:
        """The answer as vLLM streams it (``"stream": true``): server-sent events
        (streaming.py `stream_events`, which the in-process door sends too)."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for event in stream_events(payload, body, dialect=self.dialect, stream_cut=self.stream_cut, encode=encode):
            await resp.write(event)
        await resp.write_eof()
        return resp
