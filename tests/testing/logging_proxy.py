"""A small HTTP proxy that writes down every request as it arrived (method, raw path,
Authorization header, body) before passing it on unchanged to one upstream: what a
client really sent, counted apart from the client's own counters. Used in front of a
real gateway in the slow tests (issue 61), as the reviews put a logging proxy in front of
each server (../shared/reviews/external-servers-2026-12-02.md).

Answers are read whole and sent back with their length (the runs it watches do not
stream); hop-by-hop headers are not passed on.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

__all__ = ["Seen", "LoggingProxy", "logging_proxy"]

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection",
        "content-length", "host"}


@dataclass(frozen=True)
class Seen:
    method: str
    path: str  # as on the request line, byte for byte (latin-1 decoded, as http.server reads it)
    authorization: str | None
    status: int
    body: bytes  # the request's body as sent


@dataclass
class LoggingProxy:
    url: str  # http://127.0.0.1:PORT
    seen: list[Seen] = field(default_factory=list)


def _handler(upstream: str, proxy: LoggingProxy, lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    parts = urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
            pass  # the record is `seen`

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=900)
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                status, answer_headers = answer.status, answer.getheaders()
            finally:
                conn.close()
            with lock:
                proxy.seen.append(Seen(self.command, self.path, self.headers.get("Authorization"), status, body or b""))
            self.send_response(status)
            for k, v in answer_headers:
                if k.lower() not in _HOP:
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _relay

    return Handler


@contextmanager
def logging_proxy(upstream: str) -> Iterator[LoggingProxy]:
    """A proxy on a free loopback port passing every request on to `upstream`
    (http://host:port), until the block ends."""
    proxy = LoggingProxy(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream, proxy, threading.Lock()))
    server.daemon_threads = True
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="logging-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
