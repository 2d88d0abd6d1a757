"""Routing over the replicas of a role: story affinity, per-replica lanes, health
and failover.

A *router* holds the replicas of one role (generation or judge). Each request
carries an affinity key — the story id for generation (and tokenize), the story
id and position for the judge — and goes to the first healthy replica of that
key's preference order (core/llm/replicas.py: weighted rendezvous hashing of the
key over the replica URLs, so all of a story's prompts meet one server's prefix
cache).

    router = Router("generation", replicas, client, limit=64, total_seconds=1800)
    sched = Scheduler({**router.lanes(), ...})      # one lane per replica
    sched.service(router.health_loop())
    result = await router.chat(sched, "story-017", request)

Concurrency stays with the Scheduler: every replica is one lane (a semaphore of
``limit`` requests in flight). With one replica the router is a pass-through:
the lane is the role's own name, the client's retry policy applies as before,
and no health or /metrics request is sent.

With several, a request is tried on a replica with a short retry budget
(`FAILOVER_RETRY`). When that runs out the replica is taken out; the request and
every other unfinished request of that replica go to the next replica of their
preference order, and a health loop probes the replica (``GET /v1/models``, which
also checks it still serves the model) with exponential backoff until it answers,
then re-admits it. When every replica is out, requests wait for one to come back,
for at most the run's retry time. Which replica answered never enters a cache
key: the key hashes the request, and the URL is not part of it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec

from tension.core.errors import ConfigError, RetryBudgetError, ServerError
from tension.core.llm.client import ChatResult, Client, RetryPolicy
from tension.core.llm.prometheus import parse_samples, prefix_cache_hit_rate
from tension.core.llm.protocol import ChatRequest
from tension.core.llm.replicas import Replica, hrw_order

__all__ = ["Router", "ReplicaStats", "FAILOVER_RETRY"]

# Per-replica retries when another replica can take the request: a dead server is
# noticed within a second or two instead of after the whole retry budget.
FAILOVER_RETRY = RetryPolicy(attempts=2, total_seconds=10.0, backoff=0.25, backoff_cap=2.0)
PROBE_FIRST = 0.5  # seconds before the first probe of a replica taken out; doubles per failed probe
PROBE_CAP = 30.0
PROBE_TIMEOUT = 10.0  # one probe (or start-up check) may take this long


class ReplicaStats(msgspec.Struct, kw_only=True):
    """What one replica did in a run (run.json, the progress bar, `bench`)."""

    url: str
    role: str
    weight: float = 1.0
    up: bool = True
    requests: int = 0  # answers it gave (one chat call, follow-ups included)
    completion_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    failures: int = 0  # calls that ran out of their retries here
    rerouted: int = 0  # requests that went on to another replica after it failed
    stories_taken: int = 0  # stories it took over, unstarted, from a busier replica's queue
    taken_out: list[str] = []  # why it was taken out, each time
    readmitted: int = 0
    busy_seconds: float = 0.0
    output_tokens_per_s: float | None = None
    prefix_cache_hit_rate: float | None = None  # from its /metrics, over the run; None without
    models_error: str | None = None


class _State:
    def __init__(self, rep: Replica, role: str, lane: str):
        self.rep = rep
        self.lane = lane
        self.up = True
        self.next_probe = 0.0
        self.probe_wait = PROBE_FIRST
        self.stats = ReplicaStats(url=rep.url, role=role, weight=rep.weight)
        self.metrics_start: dict[str, float] | None = None
        self.metrics_end: dict[str, float] | None = None


class _Rerouted(Exception):
    """The replica was taken out while the request waited for its lane."""


class Router:
    """The replicas of one role; see the module docstring."""

    def __init__(self, role: str, replicas: Sequence[Replica], client: Client, *, limit: int,
                 total_seconds: float, tokenize_limit: int = 0, failover_retry: RetryPolicy = FAILOVER_RETRY,
                 probe_first: float = PROBE_FIRST, probe_cap: float = PROBE_CAP,
                 on_change: Callable[[str], None] | None = None):
        if not replicas:
            raise ValueError("a Router needs at least one replica")
        self.role = role
        self.replicas = list(replicas)
        self.client = client
        self.limit = limit
        self.total_seconds = total_seconds
        self.failover_retry = failover_retry
        self.probe_first = probe_first
        self.probe_cap = probe_cap
        self.on_change = on_change  # told "url taken out: why" / "url re-admitted"
        self.model: str | None = None
        single = len(self.replicas) == 1
        self._states = [_State(r, role, role if single else f"{role} {r.url}") for r in self.replicas]
        self.tokenize_limit = tokenize_limit  # > 0: this role also answers /tokenize, in lanes of its own
        self._changed: asyncio.Event | None = None  # made on first use, in the running loop
        self._pinned: dict[str, _State] = {}
        self._t0 = time.monotonic()
        self._t1: float | None = None

    @property
    def single(self) -> bool:
        return len(self._states) == 1

    @property
    def urls(self) -> list[str]:
        return [s.rep.url for s in self._states]

    def lanes(self) -> dict[str, int]:
        """Scheduler lanes of the chat requests: one per replica."""
        return {s.lane: self.limit for s in self._states}

    def tokenize_lanes(self) -> dict[str, int]:
        return {self._tokenize_lane(s): self.tokenize_limit for s in self._states} if self.tokenize_limit else {}

    def _tokenize_lane(self, st: _State) -> str:
        return "tokenize" if self.single else f"tokenize {st.rep.url}"

    def preference(self, key: str) -> list[str]:
        """The replica URLs in `key`'s preference order (up or not)."""
        return [st.rep.url for st in self._order(key)]

    def is_up(self, url: str) -> bool:
        return next(s for s in self._states if s.rep.url == url).up

    def pin(self, key: str, url: str) -> None:
        """Send `key`'s requests to `url` first from now on (the rest of its order
        stays): a story taken over by an idle replica before it started."""
        st = next(s for s in self._states if s.rep.url == url)
        st.stats.stories_taken += 1
        self._pinned[key] = st

    def _order(self, key: str) -> list[_State]:
        order = [self._states[i] for i in hrw_order(key, self.replicas)]
        first = self._pinned.get(key)
        return order if first is None else [first] + [s for s in order if s is not first]

    # -- start-up -----------------------------------------------------------------

    async def check_models(self, model: str | None, flag: str) -> str:
        """The role's model id, checked against every replica's /v1/models: each must
        serve it (given), or all must list the same first model (not given). A
        replica that does not answer is taken out (and probed later); a replica
        serving another model is a ConfigError naming it."""
        listed: dict[str, list[str]] = {}
        errors: dict[str, str] = {}
        for st in self._states:
            try:
                async with asyncio.timeout(PROBE_TIMEOUT):
                    listed[st.rep.url] = await self.client.models(st.rep.url, retry=RetryPolicy(attempts=1))
            except (ServerError, TimeoutError) as e:
                errors[st.rep.url] = str(e) or type(e).__name__
        if not listed:
            raise ServerError(f"no {self.role} replica answered /v1/models: "
                              + "; ".join(f"{u}: {e}" for u, e in errors.items()))
        if model is None:
            firsts = {u: ids[0] if ids else None for u, ids in listed.items()}
            model = next(iter(firsts.values()))
            if model is None:
                raise ServerError(f"{next(iter(firsts))}/v1/models lists no model; pass {flag}")
        for url, ids in listed.items():
            if model not in ids:
                raise ConfigError(
                    f"{flag.replace('-model', '-base-url')}: replica {url} serves {', '.join(ids) or 'no model'}, "
                    f"not {model}; every {self.role} replica must serve the same model")
        for st in self._states:
            if st.rep.url in errors:
                self._take_out(st, f"did not answer /v1/models at start: {errors[st.rep.url]}")
        self.model = model
        return model

    async def resolve_model(self, given: str | None, flag: str, requests: dict[str, int] | None = None) -> str:
        """The role's model id for the cache keys. On one server a given id is used
        as it is (so a fully cached rerun sends nothing), else the server's first
        listed model; several replicas are each asked (`check_models`). Each
        /v1/models request is counted in `requests["models"]`."""
        asked = len(self._states) if not self.single else (0 if given else 1)
        if requests is not None and asked:
            requests["models"] = requests.get("models", 0) + asked
        if not self.single:
            return await self.check_models(given, flag)
        if not given:
            url = self._states[0].rep.url
            ids = await self.client.models(url)
            if not ids:
                raise ServerError(f"{url}/v1/models lists no model; pass {flag}")
            given = ids[0]
        self.model = given
        return given

    # -- requests -------------------------------------------------------------------

    async def chat(self, sched, key: str, request: ChatRequest) -> ChatResult:
        """`request` on the first healthy replica of `key`'s preference order."""
        if self.single:
            st = self._states[0]
            res = await sched.request(st.lane, self.client.chat, st.rep.url, request)
            self._count(st, res)
            return res
        return await self._routed(sched, key, lambda st: st.lane,
                                  lambda url, retry: self.client.chat(url, request, retry=retry))

    async def tokenize(self, sched, key: str, model: str, text: str) -> int:
        """/tokenize on `key`'s replica (the one its chat requests go to)."""
        if self.single:
            st = self._states[0]
            return await sched.request(self._tokenize_lane(st), self.client.tokenize, st.rep.url, model, text)
        return await self._routed(sched, key, self._tokenize_lane,
                                  lambda url, retry: self.client.tokenize(url, model, text, retry=retry))

    def max_model_len(self) -> int | None:
        """The context length a replica's /tokenize reported (all serve one model)."""
        return next((self.client.max_model_len[u] for u in self.urls if u in self.client.max_model_len), None)

    async def _routed(self, sched, key: str, lane_of: Callable[[_State], str],
                      call: Callable[[str, RetryPolicy], Awaitable[Any]]):
        deadline = time.monotonic() + self.total_seconds
        order = self._order(key)
        while True:
            st = next((s for s in order if s.up), None)
            if st is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RetryBudgetError(
                        f"every {self.role} replica is out ({'; '.join(self._why_out())}) and none came back "
                        f"within {self.total_seconds:g} s")
                await self._wait_for_change(remaining)
                continue
            try:
                res = await sched.request(lane_of(st), self._attempt, st, call)
            except _Rerouted:
                continue
            except RetryBudgetError as e:
                st.stats.failures += 1
                if st.up:
                    self._take_out(st, str(e))
                st.stats.rerouted += 1
                continue
            return res

    async def _attempt(self, st: _State, call):
        if not st.up:
            raise _Rerouted()
        t0 = time.perf_counter()
        try:
            res = await call(st.rep.url, self.failover_retry)
        finally:
            st.stats.busy_seconds += time.perf_counter() - t0
        if isinstance(res, ChatResult):
            self._count(st, res)
        return res

    def _count(self, st: _State, res: ChatResult) -> None:
        s = st.stats
        s.requests += res.usage.requests
        s.completion_tokens += res.usage.completion_tokens
        s.prompt_tokens += res.usage.prompt_tokens
        s.cached_tokens += res.usage.cached_tokens

    # -- health -------------------------------------------------------------------

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    async def _wait_for_change(self, timeout: float) -> None:
        ev = self._event()
        try:
            async with asyncio.timeout(min(timeout, self.probe_cap)):
                await ev.wait()
        except TimeoutError:
            pass

    def _signal_change(self) -> None:
        ev, self._changed = self._event(), asyncio.Event()
        ev.set()

    def _take_out(self, st: _State, why: str) -> None:
        st.up = False
        st.stats.up = False
        st.stats.taken_out.append(why)
        st.probe_wait = self.probe_first
        st.next_probe = time.monotonic() + st.probe_wait
        if self.on_change:
            self.on_change(f"{self.role} replica {st.rep.url} taken out: {why}")

    def _why_out(self) -> list[str]:
        return [f"{s.rep.url}: {s.stats.taken_out[-1] if s.stats.taken_out else '?'}" for s in self._states]

    async def probe(self, st: _State) -> bool:
        """Re-admit `st` if it answers /v1/models listing the role's model."""
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                ids = await self.client.models(st.rep.url, retry=RetryPolicy(attempts=1))
        except (ServerError, TimeoutError):
            ok = False
        else:
            ok = self.model is None or self.model in ids
            st.stats.models_error = None if ok else f"serves {', '.join(ids)}, not {self.model}"
        if ok:
            st.up = True
            st.stats.up = True
            st.stats.readmitted += 1
            if self.on_change:
                self.on_change(f"{self.role} replica {st.rep.url} re-admitted")
            self._signal_change()
        else:
            st.probe_wait = min(self.probe_cap, st.probe_wait * 2)
            st.next_probe = time.monotonic() + st.probe_wait
        return ok

    async def health_loop(self) -> None:
        """Probe replicas that were taken out, each on its own backoff (a service
        task of the scheduler: it runs until the work is done)."""
        while True:
            now = time.monotonic()
            due = [s for s in self._states if not s.up and s.next_probe <= now]
            for st in due:
                await self.probe(st)
            waits = [s.next_probe - time.monotonic() for s in self._states if not s.up]
            await asyncio.sleep(max(0.01, min([self.probe_first, *waits])))

    # -- figures ------------------------------------------------------------------

    async def scrape_metrics(self, when: str) -> None:
        """Read each replica's /metrics ("start" or "end"); a server without it, or
        one that is down, gives no hit rate."""
        for st in self._states:
            text = await self.client.get_text(st.rep.url, "/metrics", timeout=PROBE_TIMEOUT)
            values = parse_samples(text) if text is not None else None
            if when == "start":
                st.metrics_start = values
            else:
                st.metrics_end = values
        if when == "end":
            self._t1 = time.monotonic()

    def figures(self) -> list[dict[str, Any]]:
        """Per-replica figures as plain dicts (run.json, `bench`)."""
        wall = max(1e-9, (self._t1 or time.monotonic()) - self._t0)
        out = []
        for st in self._states:
            s = st.stats
            s.output_tokens_per_s = round(s.completion_tokens / wall, 3)
            rate = prefix_cache_hit_rate(st.metrics_start, st.metrics_end)
            s.prefix_cache_hit_rate = None if rate is None else round(rate, 6)
            out.append(msgspec.to_builtins(s))
        return out

    def postfix(self) -> str:
        """Compact per-replica requests for the progress bar; ``!`` marks a replica out."""
        return self.role[0] + "[" + " ".join(
            f"{s.stats.requests}{'' if s.up else '!'}" for s in self._states) + "]"
