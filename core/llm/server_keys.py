"""How a run names a server, and where its requests go: a leaf, imported by
everything that needs a server's key (core/llm/servers.py holds the record kept
under it; core/llm/transport.py the in-process servers registered under it).

`server_key(url)` is the only key: the base URL with its scheme and host
lower-cased, its credentials dropped and its path kept without a trailing ``/``
or ``/v1`` (a hosted gateway's ``https://host/api/v1`` is the server
``https://host/api``). `base_root(url)` is where requests to it are sent:
credentials kept (they are sent), no trailing ``/`` or ``/v1``.
"""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

__all__ = ["server_key", "base_root"]


@functools.lru_cache(maxsize=1024)
def server_key(url: str) -> str:
    """The one key of a server (module docstring): scheme and host lower-cased,
    no credentials, the default port as given, the path kept without a trailing
    ``/`` or ``/v1``. Worked out once per URL: every request asks it, a few times."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""  # lower-cased by urlsplit
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return f"{parts.scheme.lower()}://{host}" + (f":{parts.port}" if parts.port else "") + path


def base_root(url: str) -> str:
    """The URL requests to a server are sent under (credentials kept: they are sent);
    not a key: what is known of a server is under `server_key`."""
    url = url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url
