"""Before the first chat request: every server and model a run needs, checked.

A run names its servers by role (generation, judge, reader) and each role's
models. `check_servers` asks each server root once for ``GET /v1/models`` before
anything else is sent, so that

- a model the server does not serve (a typo in --judge-model) stops the run with
  exit status 2, naming the server, the model asked for and the models it has,
  before one story is generated (not after the whole generation, story by story);
- a server that does not answer (a wrong --judge-base-url) is found before the
  other servers' work starts, with what was tried;
- a missing endpoint is told from a missing model: with the model checked here,
  a 404 from the first /tokenize request (FastAPI's ``{"detail": "Not Found"}``,
  no model named) can only be the endpoint, and says to pass --tokenizer
  (core/llm/failures.py reads vLLM's 404 "The model `X` does not exist." as the
  model). That first /tokenize request is the endpoint's check: a probe of our own
  would be sent by reruns whose token counts are all cached.

It depends only on the Client, not on how requests are routed (our Router today,
the vLLM project's router later), and pipelines install it with
``client.set_gate(lambda: check_servers(client, needs))``: it runs before the first
chat or /tokenize request, so a fully cached rerun still sends nothing.

A server's seeds are probed later, not here (core/llm/seed_probe.py, from
`Router.pieces`): the gate opens for a /tokenize or a judge request too, and the
probe is for a run about to send a seeded generation request, after this check.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from tension.core.errors import ConfigError, RefusedError, RetryBudgetError, ServerError, StatusError
from tension.core.llm.client import Client, RetryPolicy
from tension.core.llm.failures import KEY_ADVICE
from tension.core.llm.server_keys import base_root, server_key

__all__ = ["Need", "check_servers", "listing_refused"]

# A role with several replicas: one try each; one that does not answer is left to
# the router (taken out and probed), as long as another answers.
REPLICA_RETRY = RetryPolicy(attempts=1)


class Need(msgspec.Struct, frozen=True, kw_only=True):
    """What a run needs of one role: its servers, the flag naming them, and the
    models they must serve (and the flag naming those)."""

    role: str
    urls: tuple[str, ...]
    flag: str
    models: tuple[str, ...]
    model_flag: str


async def check_servers(client: Client, needs: Sequence[Need], requests: dict[str, int] | None = None) -> None:
    """Check every need (module docstring); raise ConfigError (a model or an endpoint
    missing, a key refused) or ServerError (no server of a role answers).
    ``requests`` counts the /v1/models requests sent ("models")."""
    listed: dict[str, list[str]] = {}  # by `server_key`: a server shared by roles is asked once
    for need in needs:
        answered = []
        for url in map(base_root, need.urls):
            key = server_key(url)
            if key not in listed and (known := client.server(url).models) is not None:
                listed[key] = list(known)  # this run asked already (Router.resolve_model)
            if key not in listed:
                ids = await _models(client, need, url, requests)
                if ids is None:
                    continue
                listed[key] = ids
            answered.append(url)
            _check_models(need, url, listed[key])
        if not answered:
            raise ServerError(f"no {need.role} server ({need.flag}) answered GET /v1/models: "
                              + ", ".join(need.urls))


async def _models(client: Client, need: Need, url: str, requests: dict[str, int] | None) -> list[str] | None:
    """The models `url` lists; None for a replica that does not answer (one of several)."""
    if requests is not None:
        requests["models"] = requests.get("models", 0) + 1
    several = len(need.urls) > 1
    try:
        return await client.models(client.server(url), retry=REPLICA_RETRY if several else None)
    except RetryBudgetError as e:
        if several:
            return None
        raise ServerError(f"the {need.role} server {url} ({need.flag}) did not answer: {e}; start it "
                          f"or correct {need.flag}") from e
    except RefusedError as e:
        raise listing_refused(need.role, url, need.flag, e) from e
    except StatusError as e:
        raise ConfigError(f"{need.flag} {url}: GET /v1/models answered HTTP {e.status}: {e.body}") from e


def listing_refused(role: str, url: str, flag: str, e: RefusedError) -> ConfigError:
    """The error of a GET /v1/models that `url` refused: the key, or a URL that is
    not a server's root (e.g. one ending in /v1/chat/completions). `flag` names the
    URL (``--base-url``, or ``--base-url[1]`` for an item of a list)."""
    if e.missing == "key":
        return ConfigError(f"the {role} server {url} ({flag}) refused GET /v1/models with HTTP "
                           f"{e.status} ({e.body}): {KEY_ADVICE}")
    return ConfigError(f"{flag} {url}: not the root of an OpenAI-compatible server (GET /v1/models "
                       f"answered HTTP {e.status}: {e.body})")


def _check_models(need: Need, url: str, ids: list[str]) -> None:
    for model in need.models:
        if model not in ids:
            raise ConfigError(f"{need.model_flag} {model}: the {need.role} server {url} ({need.flag}) does not "
                              f"serve it; it serves {', '.join(ids) or 'no model'}")

