"""The server of one role (generation or judge) as a run sees it.

With one server, requests go straight to it. With several (`--base-url A,B,C`),
the run starts the vLLM project's router in front of them (core/llm/routing.py `routing`, and
core/llm/vllm_router.py) and sends every request there. Each request carries a
routing key (`X-Session-ID`, core/llm/client.py): the story for generation and
/tokenize, the story and position for the judge. The router sends a new key to
its least loaded worker and keeps it there (`sticky_least_loaded`), so the
prompts that share a prefix meet one prefix cache and the load stays even.
Failover is the router's (retries on another worker, a circuit breaker per
worker, health checks); the client's own retries come on top.

    gen, judge = Router("generation", replicas, client, limit=64), Router("judge", ...)
    await gen.resolve_model("--model"); ...
    async with routing(gen, judge):      # core/llm/routing.py: starts vllm-router if needed
        result = await gen.chat(Ticket(key="story-017"), request)

A router resolves the `Server` it sends to once (`server`: the one server, or the
vLLM router the run started) and hands it down with the request's `Ticket`
(core/llm/ticket.py).

A router only sends. Concurrency is the run's (core/run/engine.py holds every
request in its role's Scheduler lane: ``lanes()``, ``limit`` requests in flight
per server). Which server answered never enters a cache key.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import msgspec

from tension.cache.records import Usage
from tension.core.errors import ConfigError, RefusedError, ServerError
from tension.core.llm.batch import Batch, Batcher, Template
from tension.core.llm.client import ChatResult, Client
from tension.core.llm.failures import RetryPolicy
from tension.core.llm.preflight import listing_refused
from tension.core.llm.prometheus import by_label, prefix_cache_delta, prefix_cache_hit_rate
from tension.core.llm.protocol import ChatRequest
from tension.core.llm.replicas import Replica
from tension.core.llm.seed_probe import check_seeds
from tension.core.llm.servers import Server
from tension.core.llm.ticket import Piece, Ticket
from tension.core.llm.vllm_router import LocalRouter, RouterSettings
from tension.core.redact import redact

__all__ = ["Router", "ReplicaStats", "WATCH_SECONDS", "PROBE_TIMEOUT"]

PROBE_TIMEOUT = 10.0  # a start-up check or a /metrics reading may take this long
WATCH_SECONDS = 2.0  # how often the router's /metrics is read during a run
_BREAKER = {0: "closed", 1: "open", 2: "half-open"}


class ReplicaStats(msgspec.Struct, kw_only=True):
    """What one server of a role did in a run (run.json, the progress bar, `bench`).
    Behind a router, `requests` and `failures` are the router's counts for the
    worker (every role it serves; HTTP requests, so a batch of judge prompts is
    one); alone, the client's own (LLM requests: a batch counts its prompts)."""

    url: str
    role: str
    router: str | None = None  # the vLLM router in front of it, if any
    up: bool = True  # healthy, circuit breaker not open, at the end of the run
    requests: int = 0
    failures: int = 0
    circuit_breaker: str | None = None
    taken_out: str | None = None  # why the run took it out of the router (core/llm/unreadable.py)
    completion_tokens: int | None = None  # the client's count: one server only
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens_per_s: float | None = None
    prefix_cache_hit_rate: float | None = None  # from its /metrics, over the run; None without


class Router:
    """The servers of one role; see the module docstring."""

    def __init__(self, role: str, replicas: Sequence[Replica], client: Client, *, limit: int,
                 tokenize_limit: int = 0, timeout: float = 600.0,
                 on_change: Callable[[str], None] | None = None, batch: str = "off"):
        if not replicas:
            raise ValueError("a Router needs at least one server")
        for r in replicas:
            if client.has_key and urlsplit(r.url).username is not None:
                # aiohttp refuses to send both (a ValueError after the first requests); said before any
                raise ConfigError(f"the {role} server {redact(r.url)} has a user in its URL, and an API key is "
                                  "set too (OPENAI_API_KEY, or the variable --api-key-env names): only one can be "
                                  "sent; drop the user and password from the URL, or unset the key")
        self.role = role
        self.workers = [r.url for r in replicas]
        self.client = client
        self.limit = limit
        self.tokenize_limit = tokenize_limit  # > 0: this role also answers /tokenize, in a lane of its own
        # The router leaves a server that holds a request for half the client's
        # timeout and retries it on another, inside the client's own attempt: a hung
        # server costs its requests that half, not the client's whole retry budget.
        self.settings = RouterSettings(request_timeout_secs=max(1, int(timeout // 2)))
        self.on_change = on_change  # told "worker url unhealthy" / "… healthy again"
        # `batch_template` + `complete` send a list of requests as one /v1/completions request when the
        # server renders its chat template for us (core/llm/batch.py)
        self.batcher = Batcher(client, batch, role)
        self.model: str | None = None
        self.url = self.workers[0]  # the router's, once `routing` started it
        self.server: Server = client.server(self.url)  # where its requests go: resolved once per `url`
        self.local: LocalRouter | None = None
        # what is printed and stored of a URL goes without its password (core/redact.py)
        self._stats = {u: ReplicaStats(url=redact(u), role=role) for u in self.workers}
        if self.single:
            st = self._stats[self.url]
            st.completion_tokens = st.prompt_tokens = 0  # cached_tokens: None until an answer reports them
        self._start: dict[str, dict[str, float] | None] = {}
        self._end: dict[str, dict[str, float] | None] = {}
        self._router_start: dict[str, dict[str, float]] = {}  # the router's counters at the start
        self._t0 = time.monotonic()
        self._t1: float | None = None

    @property
    def single(self) -> bool:
        return len(self.workers) == 1

    @property
    def urls(self) -> list[str]:
        return list(self.workers)

    def servers(self) -> list[Server]:
        """The records of the role's servers (behind the vLLM router, if one is started)."""
        return [self.client.server(u) for u in self.workers]

    def every_server(self) -> list[Server]:
        """The role's server record and those behind it: what a refusal may be kept on."""
        return [self.server, *self.servers()]

    def same_servers(self, other: Router) -> bool:
        """Whether `other` sends to the same servers (their records: one server, however spelled)."""
        return set(map(id, self.servers())) == set(map(id, other.servers()))

    def lanes(self) -> dict[str, int]:
        """The Scheduler lane of the role's chat requests: `limit` per server."""
        return {self.role: self.limit * len(self.workers)}

    def tokenize_lanes(self) -> dict[str, int]:
        return {"tokenize": self.tokenize_limit * len(self.workers)} if self.tokenize_limit else {}

    # -- start-up -----------------------------------------------------------------

    async def resolve_model(self, given: str | None, flag: str, requests: dict[str, int] | None = None) -> str:
        """The role's model id for the cache keys. On one server a given id is used
        as it is (so a fully cached rerun sends nothing), else the server's first
        listed model. Several servers are each asked (once per run, whichever role
        asks first): a router sends any request to any of them, so each must answer
        and serve the model. Each /v1/models request is counted in `requests["models"]`."""
        urls = self.workers if not self.single else ([] if given else self.workers)
        known = {u: list(m) for u in urls if (m := self.client.server(u).models) is not None}  # asked already
        if requests is not None and len(urls) > len(known):
            requests["models"] = requests.get("models", 0) + len(urls) - len(known)
        listed = {u: known[u] if u in known else await self._models(u, flag) for u in urls}
        model = given or next(iter(listed.values()))[0]
        for url, ids in listed.items():
            if model not in ids:
                raise ConfigError(
                    f"{flag.replace('-model', '-base-url')}: server {url} serves {', '.join(ids) or 'no model'}, "
                    f"not {model}; every {self.role} server must serve the same model")
        if not given:
            for u in listed:  # the judge on the generation servers takes the generation model as given
                self.client.server(u).defaulted(model, flag, self.role)
        self.server.model_named_by_path(model, flag)
        self.model = model
        return model

    async def _models(self, url: str, flag: str) -> list[str]:
        try:
            async with asyncio.timeout(PROBE_TIMEOUT if not self.single else None):
                ids = await self.client.models(self.client.server(url),
                                               retry=RetryPolicy(attempts=1) if not self.single else None)
        except RefusedError as e:  # the key, or a list item that is not a server's root
            item = flag.replace("-model", "-base-url") + (f"[{self.workers.index(url)}]" if not self.single else "")
            raise listing_refused(self.role, url, item, e) from None
        except TimeoutError:
            raise ServerError(f"{self.role} server {url} did not answer /v1/models "
                              f"within {PROBE_TIMEOUT:g} s") from None
        if not ids:
            raise ServerError(f"{url}/v1/models lists no model; pass {flag}")
        return ids

    # -- requests -------------------------------------------------------------------
    # A router sends; which lane a request waits in is the run's engine's concern
    # (core/run/engine.py), so nothing here knows the scheduler.

    def point_at(self, url: str) -> None:
        """Send to `url` from now on (the vLLM router `routing` started, or none)."""
        self.url, self.server = url, self.client.server(url)

    async def chat(self, ticket: Ticket, request: ChatRequest) -> ChatResult:
        """`request` on the role's server (or router, routed by the ticket's key)."""
        res = await self.client.chat(self.server, request, ticket)  # its retry policy
        self._tally(res.usage)
        return res

    async def pieces(self, ticket: Ticket, request: ChatRequest) -> AsyncGenerator[Piece | ChatResult, None]:
        """`chat`, each piece of an answer that takes several requests handed up as
        it comes (core/llm/choices.py), then the whole answer. Before the first seeded one
        a server's seeds are learned, once (core/llm/seed_probe.py), after the servers' check;
        both wait for a request to be sent (an answer the cache holds in pieces sends nothing)."""

        async def ready() -> None:
            await self.client.check_gate()
            await check_seeds(self.client, self.server, request)

        async with contextlib.aclosing(self.client.pieces(self.server, request, ticket, ready=ready)) as gen:
            async for got in gen:
                if isinstance(got, ChatResult):
                    self._tally(got.usage)
                yield got

    async def batch_template(self, requests: Sequence[ChatRequest]) -> Template | None:
        """The chat template that lets `requests` travel as one completion request
        (core/llm/batch.py), or None: send them as chat requests. Rendered on a
        server itself: a router need not pass /detokenize on."""
        return await self.batcher.template(self.server, requests)

    async def complete(self, ticket: Ticket, template: Template, requests: Sequence[ChatRequest]) -> Batch:
        """`requests` as one batched completion request, an answer each."""
        batch = await self.batcher.complete(self.server, template, requests, ticket)
        self._tally(batch.usage)
        return batch

    def _tally(self, usage: Usage) -> None:
        """A single server's own figures (behind a router they come from the router's)."""
        if self.single:
            s = self._stats[self.url]
            s.requests += usage.requests
            s.completion_tokens = (s.completion_tokens or 0) + usage.completion_tokens
            s.prompt_tokens = (s.prompt_tokens or 0) + usage.prompt_tokens
            if usage.cached_unreported < usage.requests:  # none reported (issue 61): null, not 0
                s.cached_tokens = (s.cached_tokens or 0) + usage.cached_tokens

    async def tokenize(self, ticket: Ticket, model: str, text: str) -> int:
        """/tokenize on the ticket's server (the router sends it where the key's chat requests go)."""
        return await self.client.tokenize(self.server, model, text, None, ticket)

    def max_model_len(self) -> int | None:
        """The context length the server said (all serve one model; core/llm/servers.py `Server.context_len`)."""
        return self.server.context_len

    # -- figures ------------------------------------------------------------------

    async def scrape_metrics(self, when: str) -> None:
        """Read each server's /metrics and the router's ("start" or "end"); a server
        without it, or one that is down, gives no hit rate."""
        readings = self._start if when == "start" else self._end
        for url in self.workers:
            readings[url] = await self.client.metrics(url, timeout=PROBE_TIMEOUT)
        if self.local is not None:
            text = await self.client.get_text(self.local.metrics_root, "/metrics", timeout=PROBE_TIMEOUT)
            if when == "start":
                self._router_start = _router_counters(text or "")
            else:
                self._router_figures(text)
        if when == "end":
            self._t1 = time.monotonic()

    async def watch(self) -> None:
        """Read the router's per-worker figures every WATCH_SECONDS and report a
        worker that turns unhealthy or healthy (a Scheduler service task)."""
        if self.local is None:
            return
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            self._router_figures(await self.client.get_text(self.local.metrics_root, "/metrics", timeout=PROBE_TIMEOUT))

    def _router_figures(self, text: str | None) -> None:
        if text is None:
            return
        now, start = _router_counters(text), self._router_start
        health = by_label(text, "vllm_router_worker_health", "worker")
        breaker = by_label(text, "vllm_router_cb_state", "worker")
        for url, s in self._stats.items():
            s.requests, s.failures = (int(now[k].get(url, 0) - start.get(k, {}).get(url, 0))
                                      for k in ("requests", "failures"))
            s.circuit_breaker = _BREAKER.get(int(breaker.get(url, 0)))
            if self.client.server(url).taken_out is not None:  # told when it was; the router no longer asks it
                continue
            up = health.get(url, 1.0) == 1 and s.circuit_breaker != "open"
            if up != s.up and self.on_change:
                h = f"{health[url]:g}" if url in health else "?"  # a worker the router does not report
                self.on_change(f"{self.role} server {s.url} {'healthy again' if up else 'unhealthy'} "
                               f"(router: health {h}, circuit breaker {s.circuit_breaker})")
            s.up = up

    def take_out(self, url: str, why: str) -> None:
        """The run took `url` out of the router (it answers unreadably), or started the
        router without it (the router would mark it unhealthy: `routing`): kept on
        its `Server` record, so every role that uses it sees it."""
        self.client.server(url).taken_out = why
        self._stats[url].up = False

    def prefix_cache_tokens(self) -> dict[str, tuple[float, float] | None]:
        """Per server, (Δ hits, Δ queries) of its prefix cache, in tokens, between the
        "start" and "end" readings of `scrape_metrics`; None without them."""
        return {url: prefix_cache_delta(self._start.get(url), self._end.get(url)) for url in self.workers}

    def figures(self) -> list[dict[str, Any]]:
        """Per-server figures as plain dicts (run.json, `bench`)."""
        wall = max(1e-9, (self._t1 or time.monotonic()) - self._t0)
        out = []
        for url, s in self._stats.items():
            s.router = self.local.url if self.local else None
            s.taken_out = self.client.server(url).taken_out
            if s.completion_tokens is not None:
                s.output_tokens_per_s = round(s.completion_tokens / wall, 3)
            rate = prefix_cache_hit_rate(self._start.get(url), self._end.get(url))
            s.prefix_cache_hit_rate = None if rate is None else round(rate, 6)
            out.append(msgspec.to_builtins(s))
        return out

    def postfix(self) -> str:
        """Compact per-server requests for the progress bar; ``!`` marks one out."""
        return self.role[0] + "[" + " ".join(
            f"{s.requests}{'' if s.up else '!'}" for s in self._stats.values()) + "]"


def _router_counters(text: str) -> dict[str, dict[str, float]]:
    """The router's per-worker counters a run takes deltas of: requests it passed
    on, and requests that failed there (its circuit breaker's failure outcomes)."""
    return {"requests": by_label(text, "vllm_router_processed_requests_total", "worker"),
            "failures": by_label(text, "vllm_router_cb_outcomes_total", "worker", where={"outcome": "failure"})}
