"""One streamed chat request, timed (`tension-run bench`): time to first token and
to the end. Not retried and never completed by follow-ups: a benchmark measures
what the server does, and reports a failure instead of hiding it. Each choice's
finish reason is kept: a choice without one was cut off (llama-cpp-python ends a
stream with ``[DONE]`` as soon as another request waits), and the client
(`streamed`, below) makes it a failure, never a figure. `streamed` asks in chunks
of what the server takes, as a chat request does (core/llm/choices.py).

Usage: vLLM sends one usage event at the end (``stream_options.include_usage``);
llama.cpp sends one per choice, each counting that choice, so their completion
tokens are summed (a non-streamed llama.cpp answer counts one choice only:
core/llm/traits.py `usage`). A usage without ``prompt_tokens_details.cached_tokens``,
or none at all, reports no cached prompt tokens (`Usage.cached_unreported`), never 0.

A server that ignores `stream` answers with the plain JSON body (no event at all,
issue 58 S5): its choices and usage are the answer, and the result says `plain`
(bench: time to first token not measured), instead of "0 choices".
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import msgspec

from tension.cache.records import Usage
from tension.core.errors import ServerError, StatusError
from tension.core.llm.answer_checks import misnumbered
from tension.core.llm.choices import NAsk, chunk
from tension.core.llm.failures import error_message, status_error
from tension.core.llm.protocol import ChatChunk, ChatRequest, ChatResponse, body_bytes, usage_of
from tension.core.llm.refusals import field_refusal, refused_fields
from tension.core.llm.results import StreamResult
from tension.core.llm.sending import Sender
from tension.core.llm.servers import Server
from tension.core.llm.transport import StreamStatus, Transport, TransportError
from tension.core.redact import redact_secrets

__all__ = ["chat_stream", "streamed"]

_ENC = msgspec.json.Encoder()
_CHUNK = msgspec.json.Decoder(ChatChunk)


async def streamed(sender: Sender, server: Server, request: ChatRequest) -> StreamResult:
    """`request.n` choices streamed, timed, never retried: in chunks of what the
    server takes, as a chat request asks (its n limit, learned the same way:
    core/llm/choices.py `NAsk`), one after another; the time to the first token is
    the first chunk's. An answer short of its choices, or one whose stream ended
    before a choice finished, is a ServerError: a benchmark reports a failure, never
    a figure from a cut answer."""
    server.in_record = True
    asks = NAsk(server)
    try:
        return await _chunked(sender, server, request, asks)
    finally:
        asks.close()


async def _chunked(sender: Sender, server: Server, request: ChatRequest, asks: NAsk) -> StreamResult:
    done: list[StreamResult] = []
    got = 0
    t0 = time.perf_counter()
    while got < request.n:
        ask = await asks.size(request.n - got)
        req = request if ask == request.n else chunk(request, got, ask)
        sender.count_attempt()
        try:
            res = await chat_stream(sender.transport, _ENC, _CHUNK, server.root, server.wire_form(req))
        except StatusError as e:
            if fields := refused_fields(e, req):  # a field it never takes: the settings must change
                asks.gave_up()
                raise field_refusal(server, fields, e) from None
            if asks.refused_with(ask, e):
                continue
            asks.gave_up()
            raise
        asks.answered(ask, request.seed is not None)
        _whole_stream(server.name, req, res)
        done.append(res)
        got += ask
    if len(done) == 1:
        return done[0]
    return StreamResult(texts=[t for r in done for t in r.texts], model=done[-1].model,
                        usage=_summed(r.usage for r in done), ttft=done[0].ttft,
                        seconds=time.perf_counter() - t0, events=sum(r.events for r in done),
                        finish_reasons=[f for r in done for f in r.finish_reasons],
                        plain=any(r.plain for r in done), opened=[o for r in done for o in _opened(r)])


async def chat_stream(transport: Transport, enc: msgspec.json.Encoder, dec: msgspec.json.Decoder[ChatChunk],
                      root: str, request: ChatRequest) -> StreamResult:
    url = root + "/v1/chat/completions"
    req = msgspec.structs.replace(request, stream=True, stream_options={"include_usage": True})
    parts: dict[int, list[str]] = {}
    finished: dict[int, str] = {}
    usages: list[Usage] = []
    model = request.model
    ttft = None
    events = 0
    ended: list[int] = []  # the index of every finish event, in order (one per choice, each once)
    seen: set[int] = set()  # the index of every choice an event named
    other: list[bytes] = []  # lines that are no event: a plain body, if no event comes
    data = False
    t0 = time.perf_counter()
    try:
        async for line in transport.lines(url, body_bytes(enc, req), None):
            if not line.startswith(b"data:"):
                if not data:
                    other.append(line)
                continue  # blank separators, comments, event names
            data = True
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            chunk = dec.decode(payload)
            model = chunk.model or model
            for ch in chunk.choices:
                seen.add(ch.index)
                if ch.delta.content:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    events += 1
                    parts.setdefault(ch.index, []).append(ch.delta.content)
                if ch.finish_reason:
                    finished[ch.index] = ch.finish_reason
                    ended.append(ch.index)
            if chunk.usage is not None:
                usages.append(chunk.usage.usage())
    except StreamStatus as e:
        raise status_error(e.status, url, error_message(e.body), request.model) from None
    except TransportError as e:
        raise ServerError(f"{url}: {e}") from e
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ServerError(f"{url}: malformed event in the stream: {e}") from e
    if not data and (plain := _plain(b"".join(other))) is not None:
        texts = [redact_secrets(c.message.content or "") for c in sorted(plain.choices, key=lambda c: c.index)]
        return StreamResult(texts=texts, model=plain.model or model,
                            usage=usage_of(plain.usage), ttft=None,
                            seconds=time.perf_counter() - t0, events=0,
                            finish_reasons=[c.finish_reason for c in sorted(plain.choices, key=lambda c: c.index)],
                            plain=True)
    named = ended + sorted(set(parts) - set(ended))  # the choices finished, then those cut off
    if (why := misnumbered(named, request.n)) is not None:
        # an index twice or out of range, or one missing between others: texts put together under
        # the wrong choice (core/llm/answer_checks.py); a benchmark reports it, never hides it.
        # Fewer choices numbered 0 … k − 1 are a server that drops n (`_whole_stream`).
        raise ServerError(f"{url}: the streamed answer's choices are misnumbered ({why}): expected indexes "
                          f"0 … {request.n - 1}, each once (a proxy renumbering choices?)")
    usage = usage_of(None)  # no usage event: nothing reported, cached prompt tokens neither
    if usages:
        usage = usages[-1] if len(usages) == 1 else Usage(
            requests=1, prompt_tokens=usages[0].prompt_tokens, cached_tokens=usages[0].cached_tokens,
            cached_unreported=usages[0].cached_unreported, completion_tokens=sum(u.completion_tokens for u in usages))
    texts = [redact_secrets("".join(parts.get(i, []))) for i in range(request.n)]
    return StreamResult(texts=texts, model=model, usage=usage, ttft=ttft, seconds=time.perf_counter() - t0,
                        events=events, finish_reasons=[finished.get(i) for i in range(request.n)],
                        opened=[i in seen for i in range(request.n)])


_plain_dec = msgspec.json.Decoder(ChatResponse)


def _plain(body: bytes) -> ChatResponse | None:
    """The plain chat answer `body` holds, if it is one (a server that ignores `stream`)."""
    if not body.strip():
        return None
    try:
        return _plain_dec.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _whole_stream(name: str, request: ChatRequest, res: StreamResult) -> None:
    """A streamed answer with every choice asked, each finished, or a ServerError (H3
    of ../shared/reviews/external-servers-2026-12-02.md: a server that drops `n`, or
    cuts a stream off, gave "0.2 tokens per ending" with exit 0)."""
    cut = sum(1 for t, o, f in zip(res.texts, _opened(res), res.finish_reasons) if (t or o) and f is None)
    if cut and not res.plain:  # (a plain answer is whole: a choice without a reason is the server's way)
        raise ServerError(f"{name}: the server ended the stream before {cut} of {request.n} choice(s) finished (no "
                          "finish_reason): a cut answer is no figure (llama-cpp-python cuts a stream as soon as "
                          "another request waits, unless its interrupt_requests setting is off; or use --no-stream)")
    given = sum(1 for f in res.finish_reasons if f is not None)
    if given < request.n and res.plain:
        raise ServerError(f"{name}: a request for {request.n} choices brought {given}, in a plain answer (the server "
                          "ignores `stream`: no time to first token); the server does not honour n, so no figure is "
                          "taken from it (try --no-stream, which asks for what is missing)")
    if given < request.n:
        raise ServerError(f"{name}: a streamed request for {request.n} choices brought {given}; the server does "
                          "not honour n when streaming, so no figure is taken from it (try --no-stream, which asks "
                          "for what is missing)")


def _opened(res: StreamResult) -> list[bool]:
    """Per choice, whether the stream named it (where not recorded: whether it brought text)."""
    return res.opened or [bool(t) for t in res.texts]


def _summed(usages: Iterable[Usage]) -> Usage:
    total = Usage()
    for u in usages:
        total.add(u)
    return total
