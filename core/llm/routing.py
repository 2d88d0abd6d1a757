"""The vLLM router a run starts in front of a role's servers, for the length of
its work (`routing`), and what the run does about those servers meanwhile.

One router serves the roles on the same servers (a judge on the generation
servers shares their router, and their prefix caches). Before it starts, a
server whose GET /health needs the API key is left out (the router's health
checks send none, and would mark it unhealthy); while it runs, a worker sending
unreadable answers is taken out (core/llm/unreadable.py). Each is said once, for
the roles it serves, and kept on its `Server` record (run.json
`replicas[].taken_out`). The `Router` (core/llm/router.py) is what sends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from tension.core.errors import ConfigError
from tension.core.llm.router import PROBE_TIMEOUT, Router
from tension.core.llm.unreadable import Unreadable
from tension.core.llm.vllm_router import HEALTH_NEEDS_KEY, LocalRouter, health_status
from tension.core.redact import redact

__all__ = ["routing"]


@contextlib.asynccontextmanager
async def routing(*routers: Router) -> AsyncIterator[None]:
    """The vLLM router in front of each role with several servers, for the length
    of the block: one router for roles on the same servers (a judge on the
    generation servers shares their router, and their prefix caches)."""
    started: dict[tuple[str, ...], LocalRouter] = {}
    groups: dict[tuple[str, ...], list[Router]] = {}
    left_out: dict[tuple[str, ...], dict[str, str]] = {}
    try:
        for r in routers:
            if r.single:
                continue
            key = tuple(r.workers)
            if key not in started:
                left_out[key] = out = await _unhealthy_to_the_router(r)
                local = LocalRouter([w for w in r.workers if w not in out], settings=r.settings)
                await asyncio.to_thread(local.check_workers)
                local.spawn()  # on the loop's thread, which outlives the router (LocalRouter.spawn)
                started[key] = local
                await asyncio.to_thread(local.wait_ready)
            r.local = started[key]
            r.point_at(r.local.url)
            groups.setdefault(key, []).append(r)
        for key, group in groups.items():
            _watch_workers(started[key], group)
            _tell_left_out(started[key], group, left_out[key])
        yield
    finally:
        for local in started.values():
            for r in routers:
                r.client.server(local.url).behind_router(None, None)
            await asyncio.to_thread(local.stop)


async def _unhealthy_to_the_router(r: Router) -> dict[str, str]:
    """The servers of `r` that vllm-router would mark unhealthy although the run's
    own checks pass them, each with why: a GET /health that needs the API key (the
    run sends it, the router's health checks do not; L4 of
    ../shared/reviews/external-servers-2026-12-02.md: LiteLLM's /health answers 500
    without one, and the run went on silently on the other server). None of them
    left is an error: the router would have no server."""
    if not r.client.has_key:
        return {}
    out = {}
    for url in r.workers:
        status = await asyncio.to_thread(health_status, url, PROBE_TIMEOUT)
        if status is None or status in (404, 405):  # healthy, down (the router waits), or no /health at all
            continue
        if await r.client.get_text(url, "/health", timeout=PROBE_TIMEOUT) is not None:
            out[url] = HEALTH_NEEDS_KEY.format(status=status)
    if len(out) == len(r.workers):
        raise ConfigError(f"every {r.role} server's GET /health needs the API key ({', '.join(map(redact, out))}), "
                          "and vllm-router's health checks send none: it would mark them all unhealthy. Let /health "
                          "answer without a key, or give one server alone (no router)")
    return out


def _tell_left_out(local: LocalRouter, group: list[Router], out: dict[str, str]) -> None:
    """Servers the router was started without (`_unhealthy_to_the_router`): said at
    the start, and kept in each role's figures (run.json `replicas[].taken_out`)."""
    if not out:
        return
    roles = " and ".join(r.role for r in group)
    for url, why in out.items():
        for r in group:
            r.take_out(url, why)
    asked = len(group[0].workers)
    why = "; ".join(f"{redact(url)} unhealthy ({why})" for url, why in out.items())
    message = (f"asked for {asked} {roles} servers, vllm-router uses {len(local.workers)}: {why}; let its /health "
               "answer without a key, or leave it out of the base URLs")
    tell = group[0].on_change or group[0].client.notice
    if tell is not None:
        tell(message)


def _watch_workers(local: LocalRouter, group: list[Router]) -> None:
    """How the run's messages name `local` (by the servers behind it, not its
    private port), and the check that takes out a worker sending unreadable
    answers (core/llm/unreadable.py), told once for the roles it serves."""
    client = group[0].client
    roles = " and ".join(r.role for r in group)
    front = client.server(local.url)
    front.adopt([client.server(w) for w in local.workers])

    def out(worker: str, why: str, left: list[str]) -> None:
        for r in group:
            r.take_out(worker, why)
        tell = group[0].on_change or client.notice
        if tell is not None:
            tell(f"{roles} server {redact(worker)} sent an unreadable answer ({why}): taken out of vllm-router; "
                 f"the run goes on with {', '.join(map(redact, left))}")

    front.behind_router(f"the {roles} servers (via vllm-router over {', '.join(map(redact, local.workers))})",
                        Unreadable(local, client.transport, out).check, list(local.workers))
