"""A minimal, fast OpenAI-compatible stub for client benchmarks (bench/client.py, bench/scale.py).

It answers from fixed bytes so that the server costs as little CPU as possible and
the client under test is what gets measured. Raw asyncio (uvloop when installed),
HTTP/1.1 keep-alive with Content-Length bodies; no aiohttp in the request path.

- ``POST /v1/chat/completions``: a valid ``chat.completion`` with ``n`` choices
  (n from the body, default 1). With n = 1 the content is "Y" (a judge answer);
  with n > 1 choice i is a short distinct ending. ``usage`` is fixed. The model is
  echoed from the body.
- ``POST /tokenize``: ``{"count": <whitespace words of "prompt">}``. With
  ``messages``, the stub's chat template rendered (``<|role|>`` lines, then
  ``<|assistant|>``) as token ids that are code points; a prompt that holds a
  rendered template gets its code points too (the judge's batched path checks
  the two agree, core/llm/batch.py).
- ``POST /detokenize``: code points back into text.
- ``POST /v1/completions``: one "Y" choice per prompt of a list (the judge's
  batched path), usage fixed per prompt.
- ``GET /v1/models``, ``GET /health``.
- ``GET /stats``: ``{"requests": N, "chat": N, "tokenize": N}`` since start, so a
  benchmark can check that every request it counted reached the server.

Anything else gets a 404 JSON error; a chunked body gets 411.

Run it as::

    python -m tension.testing.stub_server --port 8123 [--cpu 0]

(`start_stub` does so in a child process). It prints ``listening on
http://127.0.0.1:PORT`` (flushed) and serves until SIGINT/SIGTERM. ``--cpu N`` pins
the process to that core.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable

import msgspec

__all__ = ["StubProtocol", "chat_body", "loop_factory", "main", "start_stub"]

MODELS = ("bench-gen", "bench-judge")
_USAGE = {"prompt_tokens": 512, "completion_tokens": 1, "total_tokens": 513}


class _ChatHead(msgspec.Struct):
    """The only fields of a chat body the stub looks at (the rest is skipped)."""

    model: str = "bench-judge"
    n: int = 1


class _TokenizeBody(msgspec.Struct):
    prompt: str = ""
    messages: list[dict[str, str]] | None = None


class _Detokenize(msgspec.Struct):
    tokens: list[int]


class _CompletionHead(msgspec.Struct):
    model: str = "bench-judge"
    prompt: list[str] | str = ""


_chat_dec = msgspec.json.Decoder(_ChatHead)
_detok_dec = msgspec.json.Decoder(_Detokenize)
_completion_dec = msgspec.json.Decoder(_CompletionHead)
_tok_dec = msgspec.json.Decoder(_TokenizeBody)
_enc = msgspec.json.Encoder()


def chat_body(model: str, n: int) -> bytes:
    """The answer to a chat request for ``model`` with ``n`` choices."""
    if n == 1:
        contents = ["Y"]
    else:
        contents = [f"Choice {i}: the keeper leaves the harbour at dawn, and the letter stays hidden."
                    for i in range(n)]
    return _enc.encode({
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": i, "message": {"role": "assistant", "content": c},
                     "logprobs": None, "finish_reason": "stop"} for i, c in enumerate(contents)],
        "usage": {**_USAGE, "completion_tokens": n * (1 if n == 1 else 14),
                  "total_tokens": 512 + n * (1 if n == 1 else 14)},
    })


def _response(status: int, body: bytes, close: bool = False) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 411: "Length Required"}.get(status, "Error")
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n")
    if close:
        head += "Connection: close\r\n"
    return head.encode("ascii") + b"\r\n" + body


def _error(status: int, message: str) -> bytes:
    return _enc.encode({"error": {"message": message, "type": "BadRequestError", "param": None,
                                  "code": status}})


_MODELS_BODY = _enc.encode({"object": "list", "data": [{"id": m, "object": "model", "owned_by": "vllm"}
                                                        for m in MODELS]})
_CANNED: dict[tuple[str, int], bytes] = {}  # (model, n) -> full response bytes
COUNTS = {"requests": 0, "chat": 0, "tokenize": 0, "completions": 0, "prompts": 0}


def _chat(body: bytes) -> bytes:
    try:
        head = _chat_dec.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        return _response(400, _error(400, f"bad chat body: {e}"))
    if head.n < 1:
        return _response(400, _error(400, f"n: expected an int >= 1, got {head.n}"))
    key = (head.model, head.n)
    out = _CANNED.get(key)
    if out is None:
        out = _response(200, chat_body(head.model, head.n))
        if len(_CANNED) < 4096:
            _CANNED[key] = out
    COUNTS["chat"] += 1
    return out


def _tokenize(body: bytes) -> bytes:
    try:
        tb = _tok_dec.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        return _response(400, _error(400, f"bad tokenize body: {e}"))
    COUNTS["tokenize"] += 1
    if tb.messages is not None or "<|user|>" in tb.prompt:
        text = tb.prompt if tb.messages is None else (
            "".join(f"<|{m.get('role')}|>\n{m.get('content')}\n" for m in tb.messages) + "<|assistant|>\n")
        ids = [ord(c) for c in text]
        return _response(200, _enc.encode({"count": len(ids), "max_model_len": 32768, "tokens": ids}))
    return _response(200, b'{"count":%d,"max_model_len":32768}' % len(tb.prompt.split()))


def _detokenize(body: bytes) -> bytes:
    try:
        ids = _detok_dec.decode(body).tokens
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        return _response(400, _error(400, f"bad detokenize body: {e}"))
    return _response(200, _enc.encode({"prompt": "".join(map(chr, ids))}))


_CANNED_COMPLETIONS: dict[tuple[str, int], bytes] = {}  # (model, prompts) -> full response bytes


def _completions(body: bytes) -> bytes:
    try:
        head = _completion_dec.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        return _response(400, _error(400, f"bad completions body: {e}"))
    k = 1 if isinstance(head.prompt, str) else len(head.prompt)
    key = (head.model, k)
    out = _CANNED_COMPLETIONS.get(key)
    if out is None:
        out = _response(200, _enc.encode({
            "id": "cmpl-stub", "object": "text_completion", "created": 1_700_000_000, "model": head.model,
            "choices": [{"index": i, "text": "Y", "logprobs": None, "finish_reason": "stop"} for i in range(k)],
            "usage": {"prompt_tokens": 512 * k, "completion_tokens": k, "total_tokens": 513 * k}}))
        if len(_CANNED_COMPLETIONS) < 4096:
            _CANNED_COMPLETIONS[key] = out
    COUNTS["completions"] += 1
    COUNTS["prompts"] += k
    return out


class StubProtocol(asyncio.Protocol):
    """One connection: parse pipelined requests from a buffer, answer each at once."""

    __slots__ = ("transport", "buf")

    def connection_made(self, transport):
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        out = []
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buf[:end]
            lower = head.lower()
            length = 0
            i = lower.find(b"\r\ncontent-length:")
            if i >= 0:
                j = lower.find(b"\r\n", i + 2)
                length = int(lower[i + 17: j if j >= 0 else None])
            elif b"\r\ntransfer-encoding:" in lower:
                out.append(_response(411, _error(411, "send a Content-Length body"), close=True))
                self.transport.write(b"".join(out))
                self.transport.close()
                self.buf = b""
                return
            total = end + 4 + length
            if len(buf) < total:
                break
            body = buf[end + 4: total]
            buf = buf[total:]
            line_end = head.find(b"\r\n")
            method, _, rest = head[: line_end if line_end >= 0 else None].partition(b" ")
            path = rest.partition(b" ")[0]
            COUNTS["requests"] += 1
            if method == b"POST" and path == b"/v1/chat/completions":
                out.append(_chat(body))
            elif method == b"POST" and path == b"/tokenize":
                out.append(_tokenize(body))
            elif method == b"POST" and path == b"/v1/completions":
                out.append(_completions(body))
            elif method == b"POST" and path == b"/detokenize":
                out.append(_detokenize(body))
            elif method == b"GET" and path == b"/v1/models":
                out.append(_response(200, _MODELS_BODY))
            elif method == b"GET" and path == b"/health":
                out.append(_response(200, b"{}"))
            elif method == b"GET" and path == b"/stats":
                out.append(_response(200, _enc.encode(COUNTS)))
            else:
                out.append(_response(404, _error(404, f"no route {method.decode()} {path.decode()}")))
            if b"\r\nconnection: close" in lower:
                self.transport.write(b"".join(out))
                self.transport.close()
                self.buf = b""
                return
        self.buf = buf
        if out:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(StubProtocol, host, port, backlog=1024, reuse_address=True)
    port = server.sockets[0].getsockname()[1]
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"listening on http://{host}:{port}", flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--cpu", type=int, default=None, help="pin the process to this core")
    ap.add_argument("--no-uvloop", action="store_true", help="plain asyncio event loop")
    args = ap.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    with asyncio.Runner(loop_factory=loop_factory(args.no_uvloop)) as runner:
        runner.run(serve(args.host, args.port))
    return 0


def loop_factory(no_uvloop: bool = False) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's new_event_loop when installed (and not `no_uvloop`), else None: asyncio's."""
    if not no_uvloop:
        try:
            import uvloop
            return uvloop.new_event_loop
        except ImportError:
            pass
    return None


def start_stub(port: int = 0, cpu: int | None = None, no_uvloop: bool = False) -> tuple[subprocess.Popen, str]:
    """The stub in a child process (pinned to core `cpu` if given): the process and its
    base URL, once it listens. The caller terminates it."""
    cmd = [sys.executable, "-m", "tension.testing.stub_server", "--port", str(port)]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    if no_uvloop:
        cmd.append("--no-uvloop")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"the stub did not start ({' '.join(cmd)}): {line!r}")
    return proc, line.removeprefix("listening on ")


if __name__ == "__main__":
    sys.exit(main())
