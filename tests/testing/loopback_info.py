"""The test server's routes that say what it is rather than answer (`InfoRoutes`,
mixed into `LoopbackServer`): ``GET /v1/models``, ``/health``, ``/metrics`` (the
Prometheus text of info.py's counters) and llama.cpp's ``/props``, each as the
server's dialect and settings have it (``serve_metrics``, ``serve_health``,
``serve_props``: a server without the route answers 404)."""

from __future__ import annotations

import time

from aiohttp import web

from .records import Recorded
from .wire_json import json_response


class InfoRoutes:
    """The info routes' handlers. The payloads are the answer model's (info.py
    `ServerInfo`); `_add_record` is its RecordBook's, `_not_found` the app's."""

    dialect: str
    serve_health: bool
    serve_metrics: bool
    serve_props: bool

    async def _h_health(self, request: web.Request) -> web.Response:
        if not self.serve_health or self.dialect == "llamacpp_python":
            return self._not_found(request)
        self._add_record(Recorded(request.path, request.method, None, 200, None, time.monotonic()))
        return web.Response(status=200)

    async def _h_models(self, request: web.Request) -> web.Response:
        t0 = time.monotonic()
        payload = self._models_payload()
        self._add_record(Recorded(request.path, request.method, None, 200, None, t0))
        return json_response(payload)

    async def _h_metrics(self, request: web.Request) -> web.Response:
        t0 = time.monotonic()
        if not self.serve_metrics or self.dialect == "llamacpp_python":
            self._add_record(Recorded(request.path, request.method, None, 404, None, t0))
            return web.Response(status=404, text="Not Found")
        text = self._metrics_text()
        self._add_record(Recorded(request.path, request.method, None, 200, None, t0))
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def _h_props(self, request: web.Request) -> web.Response:
        if self.dialect != "llamacpp" or not self.serve_props:
            return self._not_found(request)
        self._add_record(Recorded(request.path, request.method, None, 200, None, time.monotonic()))
        return json_response(self._props_payload())
