"""Faults played on the test server's wire (`WireFaults`, mixed into
`LoopbackServer`): the fault a request drew (faults.py `FaultPlan._take_fault`)
as an HTTP client meets it. Some come before the answer is made (an error status,
a dropped connection, a slow answer: `_fault_first`), the others change the answer
made (an HTML page, a wrong Content-Type, a body cut in half: `_fault_last`);
"few_choices" and "empty_content" are the answer model's own (answers.py). What a
plain aiohttp client sees of each: the docstring of tension.testing.openai_server."""

from __future__ import annotations

import asyncio

from aiohttp import web

from .faults import FAULT_STATUS
from .validation import error_payload
from .wire_json import json_response


class WireFaults:
    """The wire's part of a fault; `retry_after` and `slow_seconds` are the server's settings."""

    retry_after: str | None
    slow_seconds: float

    async def _fault_first(self, request: web.Request, fault: str) -> tuple[int, web.Response] | None:
        """The status recorded and the answer sent in place of the real one, or None
        to make the answer (after a "slow" fault's wait)."""
        if fault in FAULT_STATUS:
            status, etype = FAULT_STATUS[fault]
            resp = json_response(error_payload(status, f"injected fault {fault}", etype), status)
            if fault == "429" and self.retry_after is not None:
                resp.headers["Retry-After"] = str(self.retry_after)
            return status, resp
        if fault == "drop":
            request.transport.close()  # FIN, no response; aiohttp then skips writing
            return 0, web.Response(status=204)
        if fault == "slow":
            await asyncio.sleep(self.slow_seconds)
        return None

    def _fault_last(self, request: web.Request, fault: str, status: int,
                    data: bytes) -> tuple[int, web.Response] | None:
        """The status recorded and the answer sent in place of the encoded answer
        `data` (of `status`), or None to send it as it is."""
        if fault == "nonjson":
            return 200, web.Response(text="<html>oops</html>", content_type="text/html")
        if fault == "wrong_content_type":
            return status, web.Response(body=data, status=status, content_type="text/plain")
        if fault == "truncate":
            head = (
                f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                f"Connection: close\r\n\r\n"
            ).encode()
            tr = request.transport
            tr.write(head + data[: len(data) // 2])
            tr.close()  # flushes the half body, then FIN
            return status, web.Response(status=204)
        return None
