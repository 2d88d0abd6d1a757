"""The view's web server: aiohttp on 127.0.0.1, every path answered by `Site`.
It binds the loopback address only unless told otherwise, and reads; it never
writes to a run folder or the cache.

It answers only requests addressed to a name it serves on (`Host`: 127.0.0.1,
localhost, [::1], or the --host given): a web page the user has open elsewhere
could otherwise rebind its own domain name to 127.0.0.1 and read every story,
ending and verdict through the browser (DNS rebinding). Every answer carries the
usual hardening headers: no content sniffing, no referrer, no framing, and a
content security policy under which only the view's own script and style sheet
run (the pages need nothing else).

One exception to "no framing": the view a notebook's `result.view()` serves is
given a `Framing`, a random token and the notebook's origins. A request whose
path starts with /TOKEN/ is answered as the same path without it, and may be
framed by those origins alone (`frame-ancestors` names them); every other
request, and every request without the token, is answered as before: framed by
nothing. The pages' links are relative, so a page framed under /TOKEN/ links
to pages under it. The token keeps the exception to the URL the notebook shows;
the origins keep it to the notebook (another site given the URL still cannot
frame it).

The view writes one thing, an audit's labels (core/view/labelling.py), by POST: each write
must carry the view's write token (`Site.token`, new each start, held by the labelling page,
which another site's page cannot read) and pass the Host check, from no other origin, with
a small JSON body."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import re
import secrets
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple
from urllib.parse import urlsplit

from aiohttp import web

from tension.core.errors import ConfigError
from tension.core.view.labelling import MAX_BODY
from tension.core.view.site import Site

__all__ = ["make_app", "serve", "url", "is_loopback", "served_names", "HEADERS", "Framing", "framing",
           "framed_headers", "frame_origin"]

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
_HOST_NAME = re.compile(r"^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


class Framing(NamedTuple):
    """Who may frame the view: requests under /`token`/ may be framed by `origins`
    (each `scheme://host[:port]`, as `frame_origin` writes it) and by nothing else."""

    token: str
    origins: tuple[str, ...]


def framing(origins: Sequence[str]) -> Framing:
    """A new per-view token (random, 192 bits) for `origins` (checked by `frame_origin`)."""
    checked = tuple(dict.fromkeys(frame_origin(o) for o in origins))
    if not checked:
        raise ConfigError("the view's framing: no origin given")
    return Framing(secrets.token_urlsafe(24), checked)


def frame_origin(origin: str) -> str:
    """`origin` (a notebook's address: `http://localhost:8888`, a path is dropped) as
    the one CSP source it is, `scheme://host[:port]`, written from its checked parts;
    ConfigError for anything that is not one web origin (another scheme, a wildcard,
    a user name, a list)."""
    text = origin.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"view(origin=…): expected a web origin like 'http://localhost:8888', got {origin!r} "
                          f"({e})") from e
    host = (parts.hostname or "").rstrip(".")
    ok_host = "%" not in host and (_is_address(host) or bool(_HOST_NAME.match(host)))
    if parts.scheme not in ("http", "https") or not ok_host or parts.username is not None:
        raise ConfigError(f"view(origin=…): expected a web origin like 'http://localhost:8888' (http or https, "
                          f"a host, a port), got {origin!r}")
    name = f"[{host}]" if ":" in host else host
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{name}" + (f":{port}" if port is not None and port != default else "")


def framed_headers(origins: Sequence[str]) -> dict[str, str]:
    """HEADERS for an answer that `origins` alone may frame: `frame-ancestors` names
    them, and X-Frame-Options (which cannot name an origin) is left out; a browser
    that reads `frame-ancestors` ignores X-Frame-Options when both are sent."""
    csp = HEADERS["Content-Security-Policy"].replace("frame-ancestors 'none'", "frame-ancestors " + " ".join(origins))
    return {**{k: v for k, v in HEADERS.items() if k != "X-Frame-Options"}, "Content-Security-Policy": csp}

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


def make_app(site: Site, host: str = "127.0.0.1", frame: Framing | None = None) -> web.Application:
    """The view's app; with `frame`, what is asked under /TOKEN/ may be framed by its
    origins (the module's docstring)."""
    names = served_names(host)
    any_address = _name(host) in _WILDCARD
    token = frame.token.encode() if frame is not None else b""
    framed = framed_headers(frame.origins) if frame is not None else HEADERS

    def misdirected(request: web.Request) -> web.Response | None:
        given = request.headers.get("Host")
        if given is not None:
            name = _host_name(given)
            if name not in names and not (any_address and _is_address(name)):
                return web.Response(status=421, text=f"this view answers only for {', '.join(sorted(names))} "
                                    f"(Host: {given!r} is none of them)\n", headers=HEADERS)
        return None

    def placed(path: str) -> tuple[str, str, dict[str, str], bool]:
        """(path without the notebook's token, the root, the headers, whether it was /TOKEN alone)."""
        if token:
            first, slash, rest = path[1:].partition("/")
            if hmac.compare_digest(first.encode(), token):
                return "/" + rest, f"/{first}/", framed, not slash
        return path, "/", HEADERS, False

    async def handle(request: web.Request) -> web.StreamResponse:
        if (refused := misdirected(request)) is not None:
            return refused
        path, root, headers, bare = placed(request.path)
        if bare:  # /TOKEN: its pages' relative links need the slash
            raise web.HTTPFound(root + "index.html", headers=headers)
        if path == "/":
            raise web.HTTPFound(root + "index.html", headers=headers)
        doc = await site.get(path)
        return web.Response(status=doc.status, body=doc.body, content_type=doc.content_type,
                            charset="utf-8", headers=headers)

    async def write(request: web.Request) -> web.StreamResponse:
        """A write (labels, core/view/labelling.py): the Host check as every request, then the
        view's write token in X-Tension-Token, a same-origin Origin when the browser sends one,
        a JSON body of at most MAX_BODY bytes; else refused, before the body is read."""
        if (refused := misdirected(request)) is not None:
            return refused
        path, _, headers, _ = placed(request.path)

        def refuse(status: int, why: str) -> web.Response:
            return web.json_response({"error": why}, status=status, headers=headers)

        if not hmac.compare_digest(request.headers.get("X-Tension-Token", "").encode(), site.token.encode()):
            return refuse(403, "a write needs this view's token (X-Tension-Token), which its labelling page holds")
        origin = request.headers.get("Origin")
        if origin is not None:  # a browser's write says where its page came from ("null": nowhere)
            came = _host_name(urlsplit(origin).netloc)
            if came not in names and not (any_address and _is_address(came)):
                return refuse(403, f"a write from another origin ({origin!r}) is refused")
        if request.content_type != "application/json":
            return refuse(415, f"expected application/json, got {request.content_type!r}")
        if request.content_length is None or request.content_length > MAX_BODY:
            return refuse(413, f"a write is at most {MAX_BODY} bytes, with its Content-Length")
        body = await request.content.read(MAX_BODY + 1)
        if len(body) > MAX_BODY:
            return refuse(413, f"a write is at most {MAX_BODY} bytes")
        doc = await site.post(path, body)
        return web.Response(status=doc.status, body=doc.body, content_type=doc.content_type, charset="utf-8",
                            headers=headers)

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_get("/{tail:.*}", handle)
    app.router.add_post("/{tail:.*}", write)
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


async def serve(site: Site, host: str, port: int, ready: Callable[[str], Awaitable[None] | None],
                frame: Framing | None = None) -> None:
    """Serve until cancelled; `ready(url)` is called once the socket listens (port 0:
    a free port, named in the url). `frame`: the notebook's exception to "no framing"."""
    runner = web.AppRunner(make_app(site, host, frame), access_log=None)
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
