"""What a server's model listing teaches: its kind, asked once.

``GET /v1/models`` names the models and, through `owned_by`, usually the server's
kind. Where it does not settle it (`Server.kind_probe`), one more endpoint does:
llama.cpp's ``/props`` (its slots and context), or llama-cpp-python's token counter
(its owned_by "me" is anyone's word: ../shared/reviews/external-servers-2026-12-02.md
M1). Each is asked once, without retries, and a server that does not answer it is
taken as not that kind. The client's `models` endpoint hands the listing here; the
`Server` record keeps what was learned (`Server.listed`).
"""

from __future__ import annotations

import msgspec

from tension.core.llm.protocol import CountTokenizeRequest, ModelCard, Props, TokenizeResponse
from tension.core.llm.servers import Server
from tension.core.llm.transport import Transport, TransportError

__all__ = ["learn_kind"]

PROBE_TIMEOUT = 10.0  # seconds: an optional endpoint, asked once

_enc = msgspec.json.Encoder()
_tok_dec = msgspec.json.Decoder(TokenizeResponse)
_props_dec = msgspec.json.Decoder(Props)


async def learn_kind(transport: Transport, server: Server, cards: list[ModelCard]) -> None:
    """Record `server`'s listing, with what its kind's endpoint says when owned_by does not settle it."""
    probe = server.kind_probe(cards)
    props = await _props(transport, server) if probe == "/props" else None
    counts = probe is not None and probe != "/props" and await _counts(transport, server.root + probe)
    server.listed(cards, props, counts)


async def _counts(transport: Transport, url: str) -> bool:
    """Whether llama-cpp-python's token counter at `url` answers with a count."""
    try:
        reply = await transport.send("POST", url, _enc.encode(CountTokenizeRequest(input="a")), None, PROBE_TIMEOUT)
        return reply.status == 200 and _tok_dec.decode(reply.body).count is not None
    except (TransportError, msgspec.DecodeError, msgspec.ValidationError):
        return False


async def _props(transport: Transport, server: Server) -> Props | None:
    """llama.cpp's /props (its slots); None when it does not answer it."""
    try:
        reply = await transport.send("GET", server.root + "/props", None, None, PROBE_TIMEOUT)
        return _props_dec.decode(reply.body) if reply.status == 200 else None
    except (TransportError, msgspec.DecodeError, msgspec.ValidationError):
        return None
