"""The HTTP client for OpenAI-compatible servers (vLLM and others): its endpoints.

One transport for the whole run (core/llm/transport.py, the only code that speaks
HTTP); bodies encoded and decoded with msgspec. The client sends; it never decides
how many requests run at once (the run's scheduler does). Its floors, each a
private layer of the one below:

    Client.chat / pieces / tokenize / models / post   what an endpoint means
      (models: what the listing teaches of the server's kind is listing.py's)
      └ choices.pieces     all n choices: chunks, follow-ups, pieces as they come
          └ sending.Sender.call(Attempt)   the one retry loop, one typed attempt
              └ Transport.send

Every endpoint takes the `Server` it is sent to (core/llm/servers.py, under the one
key `server_key`: `Client.server(url)` is the way in), never a URL string, and a
request's `Ticket` (core/llm/ticket.py: its routing key, its item's place, its
pieces' shelf). Retries are the sender's (core/llm/sending.py): 429, 5xx,
connection errors, time-outs and unreadable bodies; 401/403 and 404/405 refuse every
request alike: a RefusedError, which stops the run (core/errors.py).

`set_gate` holds the first chat or /tokenize request until a check has passed
(core/llm/preflight.py: every server and model a run needs), so a run that is
fully cached sends nothing, and one that is not finds a wrong model or an
unreachable server before its first chat request.

    async with Client(api_key=...) as client:
        result = await client.chat(client.server(base_url), ChatRequest(...))

The client counts only what is its own, HTTP attempts and retries; what an answer
used (its usage, its follow-ups) comes back with the answer, and the run's engine
counts it (core/run/engine.py). Everything a server sends that goes into an error
message passes the one redactor (core/redact.py); so do answer texts, for the key.

Base URLs are server roots (``http://host:8000``, or a gateway's
``https://host/api``); a trailing ``/v1`` is accepted and dropped, since vLLM's
``/tokenize`` lives at the root (`Server.root`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import TypeVar

import msgspec

from tension.core.errors import RefusedError
from tension.core.llm.choices import EMPTY_ANSWER_RETRIES, pieces
from tension.core.llm.failures import RetryPolicy
from tension.core.llm.gate import Gate
from tension.core.llm.listing import learn_kind
from tension.core.llm.prometheus import parse_samples
from tension.core.llm.protocol import (
    ChatRequest,
    ModelList,
    TokenizeResponse,
    body_bytes,
    routing_headers,
)
from tension.core.llm.results import ChatResult, ShortAnswerError, StreamResult, Timeouts
from tension.core.llm.sending import Attempt, Sender
from tension.core.llm.servers import Server, Servers, base_root
from tension.core.llm.stream import streamed
from tension.core.llm.ticket import NO_TICKET, Piece, Ticket
from tension.core.llm.transport import Transport, TransportError, default_transport
from tension.core.redact import register

__all__ = ["Timeouts", "ChatResult", "StreamResult", "ShortAnswerError", "Client", "EMPTY_ANSWER_RETRIES"]

T = TypeVar("T")

TOKENIZER_ADVICE = ("token counts for pct need the generation model's tokenizer: pass --tokenizer "
                    "PATH/tokenizer.json, or --tokenizer words to approximate with whitespace words")


class Client:
    """An OpenAI-compatible client. Unopened → open (``async with``) → closed.
    `transport` (default aiohttp) is what sends the bytes."""

    def __init__(self, *, api_key: str | None = None, timeouts: Timeouts = Timeouts(),
                 retry: RetryPolicy = RetryPolicy(), seed: int | None = None,
                 notice: Callable[[str], None] | None = None, transport: Transport | None = None):
        self._api_key = api_key
        register(api_key)  # never printed or stored, even when a server echoes it
        self._gate = Gate()
        self.timeouts = timeouts
        self._sender = Sender(transport or default_transport(connect=timeouts.connect, request=timeouts.request),
                              retry, notice, seed)
        self._state = "unopened"
        self._enc = msgspec.json.Encoder()
        self._tok_dec = msgspec.json.Decoder(TokenizeResponse)
        self._models_dec = msgspec.json.Decoder(ModelList)
        self.servers = Servers(notice)  # per server: everything the run knows of it (`server`)

    def server(self, url: str) -> Server:
        """What the run knows of the server at `url` (core/llm/servers.py): the one way in."""
        return self.servers.server(url)

    # The sender's, read-only from outside: its transport, policy and counts (run.json "http").
    @property
    def transport(self) -> Transport:
        return self._sender.transport

    @property
    def retry(self) -> RetryPolicy:
        return self._sender.retry

    @property
    def notice(self) -> Callable[[str], None] | None:
        """How the run is told what happens to its servers (None: silent)."""
        return self._sender.outages.notice

    @property
    def sent(self) -> int:
        """HTTP attempts, retries included."""
        return self._sender.sent

    @property
    def retries(self) -> int:
        return self._sender.retries

    @property
    def has_key(self) -> bool:
        """Whether requests carry an API key (an Authorization header)."""
        return bool(self._api_key)

    def __repr__(self) -> str:  # never show the key
        return f"<Client {self._state} key={'set' if self._api_key else 'none'}>"

    async def __aenter__(self) -> Client:
        if self._state == "closed":
            raise RuntimeError("this Client is closed; make a new one")
        if self._state == "open":
            raise RuntimeError("this Client is already open")
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        await self.transport.open(headers)
        self._state = "open"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._state == "open":
            await self.transport.close()
        self._state = "closed"

    def _check_open(self) -> None:
        if self._state != "open":
            raise RuntimeError("use `async with Client(...)` before sending")

    # -- the gate -----------------------------------------------------------------

    def set_gate(self, check: Callable[[], Awaitable[None]]) -> None:
        """Run `check` once, before the first chat or /tokenize request is sent; its
        error is every such request's error. Requests it sends itself pass."""
        self._gate.set(check)

    async def check_gate(self) -> None:
        """Run the gate's check now if it has not run (a verb that will send anyway
        checks before its work starts); chat and /tokenize call it themselves."""
        await self._gate.wait()

    # -- endpoints ------------------------------------------------------------

    # `retry` on an endpoint overrides the client's policy for that call (None: the
    # client's); the replica router asks for a short one where another replica can help.

    async def _call(self, a: Attempt[T]) -> T:
        self._check_open()
        return await self._sender.call(a)

    async def models(self, server: Server, retry: RetryPolicy | None = None) -> list[str]:
        """The model ids `server` lists; the listing, and the kind it tells, go on its record (listing.py)."""
        server.in_record = True
        data = await self._call(Attempt(method="GET", url=server.root + "/v1/models", body=None,
                                        decoder=self._models_dec, server=server, retry=retry))
        await learn_kind(self.transport, server, data.data)
        return [m.id for m in data.data]

    async def tokenize(self, server: Server, model: str, text: str, retry: RetryPolicy | None = None,
                       ticket: Ticket = NO_TICKET) -> int:
        """`text`'s token count by the server's /tokenize, in its dialect (vLLM's
        `prompt` → `count`, llama.cpp's `content` → `tokens`; llama-cpp-python's
        /extras/tokenize/count, `input` → `count`). An answer that counts
        nothing of a non-empty text, or none at all, is a server that cannot count:
        a ConfigError naming the way out, never retried as an outage."""
        await self.check_gate()
        server.in_record = True
        url = server.root + server.tokenize_path
        try:
            data = await self._call(Attempt(method="POST", url=url,
                                            body=self._enc.encode(server.tokenize_body(model, text)),
                                            decoder=self._tok_dec, server=server, model=model,
                                            headers=routing_headers(ticket.key), retry=retry))
        except RefusedError as e:
            if e.missing == "endpoint":
                # A 404 that names no model: the path is missing, not the model.
                raise RefusedError(e.status, url, e.body, "endpoint",
                                   f"{server.name} has no /tokenize endpoint; {TOKENIZER_ADVICE}") from e
            raise
        server.counted(data.max_model_len)
        count = data.count if data.count is not None else (len(data.tokens) if data.tokens is not None else None)
        if count is None or (count == 0 and text.strip()):
            said = "answered without a count" if count is None else "counted 0 tokens in a non-empty text"
            raise RefusedError(200, url, "", "endpoint",
                               f"{server.name}/tokenize {said}: this server cannot count tokens the way the "
                               f"tool asks (it is not vLLM's /tokenize, nor llama.cpp's); {TOKENIZER_ADVICE}")
        return count

    async def chat(self, server: Server, request: ChatRequest, ticket: Ticket = NO_TICKET,
                   retry: RetryPolicy | None = None) -> ChatResult:
        """All `request.n` choices, never returned short: from chunks the server takes
        and follow-ups for missing ones, with the seeds moved on as one request's
        choices have them (core/llm/choices.py)."""
        self._check_open()
        whole = None
        async with aclosing(pieces(self._sender, server, request, ticket, retry, self.check_gate)) as gen:
            async for got in gen:  # the pieces, if any (a ticket with a shelf), then the whole answer
                whole = got
        assert isinstance(whole, ChatResult)  # the last thing `pieces` gives
        return whole

    async def pieces(self, server: Server, request: ChatRequest, ticket: Ticket = NO_TICKET,
                     retry: RetryPolicy | None = None,
                     ready: Callable[[], Awaitable[None]] | None = None) -> AsyncGenerator[Piece | ChatResult, None]:
        """`chat`, with each piece of an answer that takes more than one request
        handed up as it comes (where the ticket has a shelf), then the whole answer.
        The gate's check (or `ready`, which runs it) waits for the first request sent:
        an answer whose pieces the shelf holds sends nothing (core/llm/choices.py)."""
        self._check_open()
        async with aclosing(pieces(self._sender, server, request, ticket, retry, ready or self.check_gate)) as gen:
            async for got in gen:
                yield got

    async def post(self, server: Server, path: str, body: msgspec.Struct, decoder: msgspec.json.Decoder[T], *,
                   model: str, ticket: Ticket = NO_TICKET, retry: RetryPolicy | None = None) -> T:
        """POST `body` to `path` of the server root with the client's retries, after
        the gate; the answer decoded. For endpoints spoken elsewhere (core/llm/batch.py)."""
        await self.check_gate()
        return await self._call(Attempt(method="POST", url=server.root + path, body=body_bytes(self._enc, body),
                                        decoder=decoder, server=server, model=model,
                                        headers=routing_headers(ticket.key), retry=retry))

    async def chat_stream(self, server: Server, request: ChatRequest) -> StreamResult:
        """`request.n` choices streamed, timed, never retried (core/llm/stream.py `streamed`)."""
        self._check_open()
        await self.check_gate()
        return await streamed(self._sender, server, request)

    async def metrics(self, root: str, timeout: float = 10.0) -> dict[str, float] | None:
        """The counters of the server at `root`'s ``/metrics`` (core/llm/prometheus.py
        `parse_samples`), read once without retries: the one reading of a server's
        figures (bench's phases, the router's hit rates); None where it has none or is down."""
        text = await self.get_text(root, "/metrics", timeout)
        return parse_samples(text) if text is not None else None

    async def get_text(self, root: str, path: str, timeout: float = 10.0) -> str | None:
        """GET a text endpoint (e.g. ``/metrics``) under `root` (a server's, or the
        local router's metrics port) once, without retries: the body of a 200
        answer, None for anything else or a server that cannot be reached (figures
        from optional endpoints go without)."""
        self._check_open()
        try:
            reply = await self.transport.send("GET", base_root(root) + path, None, None, timeout)
        except TransportError:
            return None
        return reply.body.decode("utf-8", "replace") if reply.status == 200 else None
