"""The view's web server: aiohttp on 127.0.0.1, every path answered by `Site`.
It binds the loopback address only unless told otherwise, and reads; it never
writes to a run folder or the cache."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from tension.core.view.site import Site

__all__ = ["make_app", "serve"]


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


async def serve(site: Site, host: str, port: int, ready: Callable[[str], Awaitable[None] | None]) -> None:
    """Serve until cancelled; `ready(url)` is called once the socket listens (port 0:
    a free port, named in the url)."""
    runner = web.AppRunner(make_app(site), access_log=None)
    await runner.setup()
    try:
        tcp = web.TCPSite(runner, host, port)
        await tcp.start()
        bound = runner.addresses[0][1]
        res = ready(f"http://{host}:{bound}/")
        if asyncio.iscoroutine(res):
            await res
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
