"""`route`: the vLLM router over running servers, one URL for `score`."""

from __future__ import annotations

import os
import signal
import sys

import msgspec

from tension.core.cli.flags import Verb, number
from tension.core.cli.messages import EXIT_OK
from tension.core.llm.vllm_router import ROUTE_RETRY

__all__ = ["VERBS", "cmd_route"]


def cmd_route(args) -> int:
    """Start the vLLM project's router (vllm-router) over running OpenAI-compatible
    servers and print the one URL to give `score`; Ctrl-C stops it.

    Each server must list its models (GET /v1/models) and answer GET /health, where
    the router checks its workers (vLLM serves both); a server without /health is
    refused at once. The router's log is deleted when it stops cleanly."""
    from tension.core.config.settings import API_KEY_ENV, checked_key
    from tension.core.llm.vllm_router import ROUTE_RETRY, LocalRouter, RouterSettings, worker_models
    from tension.core.signals import stops_raise, wait_exit

    urls = [u.strip() for arg in args.urls for u in arg.split(",") if u.strip()]
    # a worker that does not answer is asked again, then stops `route` with exit 1, as
    # a server that stays down stops `score` (docs/reliability.md, "Exit statuses")
    retry = msgspec.structs.replace(ROUTE_RETRY, attempts=args.retries)
    key = checked_key(os.environ.get(API_KEY_ENV), f"the environment variable {API_KEY_ENV}")
    models = worker_models(urls, key, retry=retry, say=lambda line: print(line, file=sys.stderr, flush=True))
    urls = _healthy_to_the_router(urls, key)
    router = LocalRouter(urls, settings=RouterSettings(policy=args.policy), host=args.host, port=args.port)
    # SIGTERM ends the router as Ctrl-C does (a service manager stops it that way); the
    # handlers before are put back after (a caller of main() keeps its own)
    with stops_raise(signal.SIGINT, signal.SIGTERM), router:
        served = ", ".join(next(iter(models.values())))
        # the prints are inside the try: a Ctrl-C that lands as soon as the URL is
        # out (a script that read it) stops the router as cleanly as a later one
        try:
            print(f"vllm-router ready: {router.url} over {len(urls)} server(s) serving {served} "
                  f"(policy {args.policy}; metrics {router.metrics_url}; log {router.log})")
            print(f"then: tension-run score CORPUS --out DIR --base-url {router.url}")
            print("Ctrl-C stops it", flush=True)
            assert router.proc is not None  # `with router` started it
            code = wait_exit(router.proc)  # its own session: the Ctrl-C reaches only this process
        except KeyboardInterrupt:
            print("stopped the router", file=sys.stderr)
            return EXIT_OK
    router.keep_log = True  # named below
    print(f"error: vllm-router exited with status {code}; its log: {router.log}", file=sys.stderr)
    return 1


def _healthy_to_the_router(urls: list[str], key: str | None) -> list[str]:
    """`urls` without the servers vllm-router would mark unhealthy though they serve
    with the key (their /health needs it; the router's checks send none), said first
    as `score` says it; none left is a setting to change (exit 2)."""
    from tension.core.errors import ConfigError
    from tension.core.llm.vllm_router import health_needs_key
    from tension.core.redact import redact

    out = {url: why for url in urls if (why := health_needs_key(url, key)) is not None}
    if not out:
        return urls
    kept = [u for u in urls if u not in out]
    if not kept:
        raise ConfigError(f"every server's GET /health needs the API key ({', '.join(map(redact, out))}), and "
                          "vllm-router's health checks send none: it would mark them all unhealthy. Let /health "
                          "answer without a key, or give `score` the server alone (no router)")
    why = "; ".join(f"{redact(url)} unhealthy ({why})" for url, why in out.items())
    print(f"warning: asked for {len(urls)} servers, vllm-router uses {len(kept)}: {why}; let its /health "
          "answer without a key, or leave it out of the URLs", file=sys.stderr, flush=True)
    return kept


def _route_flags(p) -> None:
    p.add_argument("urls", nargs="+", metavar="URL", help="server roots, e.g. http://gpu1:8000 (or comma-separated)")
    p.add_argument("--host", default="127.0.0.1", help="address the router listens on (default: %(default)s; "
                   "0.0.0.0 opens it to the network)")
    p.add_argument("--port", type=number(int, ge=1, le=65535), default=30000, help="router port (default: %(default)s)")
    p.add_argument("--retries", type=number(int, ge=1), default=ROUTE_RETRY.attempts,
                   help="attempts per server to list its models, the first included, before a server that does not "
                        "answer stops the command (exit 1; default: %(default)s)")
    p.add_argument("--policy", default="sticky_least_loaded",
                   choices=["sticky_least_loaded", "consistent_hash", "cache_aware", "power_of_two", "round_robin",
                            "random"],
                   help="how requests are spread: sticky_least_loaded sends each new story (X-Session-ID) to the "
                        "least loaded server and keeps it there, on one prefix cache (default: %(default)s)")


VERBS = [Verb("route", cmd_route, _route_flags, (), frozenset({"urls", "host", "port", "retries", "policy"}),
              "environment: OPENAI_API_KEY is sent to the servers when they are checked.")]
