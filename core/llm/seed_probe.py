"""Whether a server's seeds hold, measured once where its kind does not say (M4 of
../shared/reviews/external-servers-2026-12-07.md).

`--seed` makes a run reproducible only on a server that answers a seeded request
sent again with the same text. vLLM does (its kind says so), llama.cpp's batched
decoding does not, llama-cpp-python serves one request at a time
(core/llm/traits.py `learn`); an OpenAI-compatible server of another kind may do
either: FastChat ignores seeds, and transformers serve with --continuous-batching
sets a request's seed when it joins a batch others share, so its answer depends on
what arrived with it. Such a run said nothing and recorded `batch_invariant: null`.

So before the first seeded generation request a run sends to a server of kind
"other" (`Router.pieces`, after the servers were checked), `check_seeds` sends one
request of that kind made small (one choice, PROBE_TOKENS tokens, the same model,
prompt, sampling and extra body) and compares its answers:

1. alone: the reference answer;
2. again, at once beside the same request at the next seed: the same text means
   the seed held, alone and in company ("held"; 3 requests);
3. otherwise alone again: the reference text means the answer depends on what
   arrived with it ("depend on arrival"), another means the seed is ignored
   ("ignored"; 4 requests).

A finding other than "held" is said once on stderr; each goes to run.json
`servers[].seeds` (`seeds_from`, `probe_requests`). The probe's requests go
straight to the transport, marked with PROBE_HEADER: no retry, no count of the
run's requests (run.json `http`, `requests`, `usage`), no cache record; a probe
that gets no readable answer learns nothing and the run goes on (its own requests
then meet whatever failed), but a field the server refuses (a 422 naming it) stops
the run with the refusal its own request would meet (core/llm/refusals.py), so the
run's request is not sent to be refused again. What a probe found is the server's
lesson (`Server.lessons`, core/llm/taught.py `SeedLesson`), kept in the cache folder by
server and model (core/run/taught.py) and put back on the record before the next run's
first request, so a rerun does not probe again; a fully cached rerun sends nothing at all, the probe included.
A greedy request (temperature 0) or an unseeded one is not probed: its seed decides
nothing. Behind a vllm-router the run starts (`--base-url A,B`) each server is probed
directly, one after the other, and the router's record takes the worst finding.
"""

from __future__ import annotations

import asyncio

import msgspec

from tension.core.errors import StatusError
from tension.core.llm.client import Client
from tension.core.llm.failures import error_message
from tension.core.llm.protocol import ChatRequest, ChatResponse, body_bytes
from tension.core.llm.refusals import field_refusal, refused_fields
from tension.core.llm.servers import Server
from tension.core.llm.taught import SeedLesson
from tension.core.llm.traits import BY_KIND, Seeds
from tension.core.llm.transport import TransportError

__all__ = ["PROBE_HEADER", "PROBE_TOKENS", "EARLIER_PROBE", "check_seeds"]

# Marks the probe's requests: a proxy's log, or the test server's counts, can leave them out.
PROBE_HEADER = "X-Tension-Probe"
PROBE_TOKENS = 16  # enough that two samples at a temperature above 0 part (a short text could agree by chance)
EARLIER_PROBE = "an earlier run's probe, kept in the cache"
_WORST_FIRST: tuple[Seeds, ...] = ("ignored", "depend on arrival", "held")

_ENC = msgspec.json.Encoder()
_DEC = msgspec.json.Decoder(ChatResponse)


async def check_seeds(client: Client, server: Server, request: ChatRequest) -> None:
    """Before `request` (a generation request) goes to `server`: its seeds learned, once
    (module docstring); said when they do not hold."""
    t = server.traits
    if request.seed is None or request.temperature == 0 or t.seeds is not None:
        return
    if not server.workers and t.kind != "other":  # its kind settles it
        if t.batch_invariant is not None:
            t.seeds, t.seeds_from = "held" if t.batch_invariant else "depend on arrival", BY_KIND
        return
    if server.seeds_probe is not None:  # the first request's probe: wait for it (then the seeds are known, or not)
        await server.seeds_probe.wait()
        return
    server.seeds_probe = asyncio.Event()
    try:
        if server.workers:
            await _behind(client, server, request)
        else:
            await _settle(client, server, request)
    finally:
        server.seeds_probe.set()


async def _behind(client: Client, front: Server, request: ChatRequest) -> None:
    """A router the run started (vllm-router): each server behind it learned directly, one
    after the other (through the router, its count of a worker's requests would hold the
    probe's), and the router's record takes the worst of their findings."""
    workers = [client.server(url) for url in front.workers]
    for w in workers:
        await check_seeds(client, w, request)
    found = [w.traits.seeds for w in workers]
    if workers and all(f is not None for f in found):
        front.traits.seeds = next(f for f in _WORST_FIRST if f in found)
        front.traits.seeds_from = "the servers behind it"


async def _settle(client: Client, server: Server, request: ChatRequest) -> None:
    """The server's seeds from an earlier run's probe of them, or from a probe now."""
    t = server.traits
    was = server.lessons.earlier_seeds(request.model)
    if was is not None and was.kind == t.kind:
        t.seeds, t.seeds_from = was.seeds, EARLIER_PROBE
        _say(server, was.seeds, f"an earlier run's probe of {was.requests} requests, kept in the cache")
        return
    seeds, sent = await _probe(client, server, request)
    t.probe_requests += sent
    if seeds is None:
        t.seeds_from = f"a probe of {sent} request(s) that got no readable answer"
        return
    t.seeds, t.seeds_from = seeds, f"a probe of {sent} requests"
    if seeds != "ignored":
        t.batch_invariant = seeds == "held"
    server.lessons.probed(request.model, SeedLesson(kind=t.kind, seeds=seeds, requests=sent))
    _say(server, seeds, f"a probe of {sent} requests")


async def _probe(client: Client, server: Server, request: ChatRequest) -> tuple[Seeds | None, int]:
    """(what the probe found, None when an answer could not be read; its requests sent)."""
    a = msgspec.structs.replace(server.wire_form(request), n=1,
                                max_tokens=min(request.max_tokens or PROBE_TOKENS, PROBE_TOKENS),
                                stream=None, stream_options=None, logprobs=None, top_logprobs=None)
    seed = a.seed if a.seed is not None else 0
    b = msgspec.structs.replace(a, seed=seed + 1 if seed < 2**31 - 2 else 0)  # another request, in company
    sent = 0

    async def text(req: ChatRequest) -> str | None:
        nonlocal sent
        sent += 1
        try:
            reply = await client.transport.send("POST", server.root + "/v1/chat/completions",
                                                body_bytes(_ENC, req), {PROBE_HEADER: "seeds"},
                                                client.timeouts.request)
            if reply.status in (400, 422) and (fields := refused_fields(
                    e := StatusError(reply.status, server.root, error_message(reply.body)), req)):
                raise field_refusal(server, fields, e)  # what the run's own request would meet: stop as it would
            choices = _DEC.decode(reply.body).choices if reply.status == 200 else []
        except (TransportError, msgspec.DecodeError, msgspec.ValidationError, ValueError):
            return None
        return (choices[0].message.content or "") if choices else None

    alone = await text(a)
    if alone is None:
        return None, sent
    beside, _ = await asyncio.gather(text(a), text(b))  # neither raises: both end
    if beside is None:
        return None, sent
    if beside == alone:
        return "held", sent
    again = await text(a)
    if again is None:
        return None, sent
    return ("depend on arrival" if again == alone else "ignored"), sent


def _say(server: Server, seeds: Seeds, how: str) -> None:
    """A finding other than "held", said on stderr (a held seed is only recorded: run.json)."""
    if server.notice is None or seeds == "held":
        return
    if seeds == "ignored":
        what = (f"ignores seeds ({how}: one seeded request sent alone twice got two answers): --seed does not "
                "make this run reproducible, and a retry, a resume or another run gets other endings")
    else:
        what = (f"answers a seeded request by what arrives with it ({how}: one seeded request got one answer "
                "alone twice and another beside a second request; continuous batching, e.g. transformers serve "
                "--continuous-batching): --seed makes this run reproducible only where its requests arrive "
                "alike, and a retry, a resume or another run may get other endings; a server serving one "
                "request at a time holds seeds")
    server.notice(f"{server.name} {what} (answers in the cache are read back as they are; run.json "
                  "`servers[].seeds`, docs/servers.md \"Seeds\")")
