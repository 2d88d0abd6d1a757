"""The view's web server: aiohttp on 127.0.0.1, every path answered by `Site`.
It binds the loopback address only unless told otherwise, and reads; it never
writes to a run folder or the cache."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Awaitable, Callable

from aiohttp import web

from tension.core.view.site import Site

__all__ = ["make_app", "serve", "url", "is_loopback"]


def make_app(site: Site) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        if request.path == "/":
            raise web.HTTPFound("/index.html")
        doc = await site.get(request.path)
        return web.Response(status=doc.status, body=doc.body, content_type=doc.content_type,
                            charset="utf-8", headers={"Cache-Control": "no-cache"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    return app


def url(host: str, port: int) -> str:
    """The address a browser takes: an IPv6 host in brackets (`http://[::]:8780/`)."""
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


async def serve(site: Site, host: str, port: int, ready: Callable[[str], Awaitable[None] | None]) -> None:
    """Serve until cancelled; `ready(url)` is called once the socket listens (port 0:
    a free port, named in the url)."""
    runner = web.AppRunner(make_app(site), access_log=None)
    await runner.setup()
    try:
        tcp = web.TCPSite(runner, host, port)
        await tcp.start()
        bound = runner.addresses[0][1]
        res = ready(url(host, bound))
        if asyncio.iscoroutine(res):
            await res
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
