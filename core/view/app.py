"""The view's web server: aiohttp on 127.0.0.1, every path answered by `Site`.
It binds the loopback address only unless told otherwise, and reads; it never
writes to a run folder or the cache.

It answers only requests addressed to a name it serves on (`Host`: 127.0.0.1,
localhost, [::1], or the --host given): a web page the user has open elsewhere
could otherwise rebind its own domain name to 127.0.0.1 and read every story,
ending and verdict through the browser (DNS rebinding). Every answer carries the
usual hardening headers: no content sniffing, no referrer, no framing, and a
content security policy under which only the view's own script and style sheet
run (the pages need nothing else)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable

from aiohttp import web

from tension.core.view.site import Site

__all__ = ["make_app", "serve", "url", "is_loopback", "served_names", "HEADERS"]

HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # the pages load view.js and view.css from the view itself and fetch its api;
    # their data is an inline JSON block (not a script: CSP does not run or block it)
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "Cross-Origin-Resource-Policy": "same-origin",
}
_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
_WILDCARD = frozenset({"0.0.0.0", "::", ""})


def served_names(host: str) -> frozenset[str]:
    """The names a request may give in `Host` to the view bound to `host`:
    the loopback names, and `host` itself; bound to every interface (0.0.0.0,
    ::), also this machine's own names (an IP address given as the Host is
    accepted too: a rebinding page sends its domain name, never an address)."""
    names = set(_LOOPBACK_NAMES) | {_name(host)}
    if _name(host) in _WILDCARD:
        names |= {_name(socket.gethostname()), _name(socket.getfqdn())}
    return frozenset(names - {""})


def _name(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def _host_name(header: str) -> str:
    """The name of a `Host` header, without its port (`[::1]:8780` → `::1`)."""
    header = header.strip()
    if header.startswith("["):
        return _name(header[:header.find("]") + 1] if "]" in header else header)
    return _name(header.rsplit(":", 1)[0] if header.count(":") == 1 else header)


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def make_app(site: Site, host: str = "127.0.0.1") -> web.Application:
    names = served_names(host)
    any_address = _name(host) in _WILDCARD

    async def handle(request: web.Request) -> web.StreamResponse:
        given = request.headers.get("Host")
        if given is not None:
            name = _host_name(given)
            if name not in names and not (any_address and _is_address(name)):
                return web.Response(status=421, text=f"this view answers only for {', '.join(sorted(names))} "
                                    f"(Host: {given!r} is none of them)\n", headers=HEADERS)
        if request.path == "/":
            raise web.HTTPFound("/index.html", headers=HEADERS)
        doc = await site.get(request.path)
        return web.Response(status=doc.status, body=doc.body, content_type=doc.content_type,
                            charset="utf-8", headers=HEADERS)

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
    runner = web.AppRunner(make_app(site, host), access_log=None)
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
