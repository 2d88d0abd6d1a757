"""JSON on the test server's wire (tension.testing.openai_server): bodies read
(`decode`, failing with one of `DECODE_ERRORS`) and answers written (`encode`,
`json_response`), with msgspec where it is installed and the standard library
where it is not."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

try:  # msgspec is a dependency of the project, but the server does not insist on it
    import msgspec

    encode = msgspec.json.encode
    decode = msgspec.json.decode
    DECODE_ERRORS: tuple[type[BaseException], ...] = (msgspec.DecodeError,)
except ImportError:  # pragma: no cover - exercised only without msgspec

    def encode(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()

    def decode(data: bytes) -> Any:
        return json.loads(data)

    DECODE_ERRORS = (ValueError, UnicodeDecodeError)


def json_response(payload: Any, status: int = 200) -> web.Response:
    """`payload` as an application/json answer."""
    return web.Response(body=encode(payload), status=status, content_type="application/json")
