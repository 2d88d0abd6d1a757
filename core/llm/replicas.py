"""The servers of a role as flags and config files list them, and the split of a
corpus into shards (`score --shard I/N`). Requests are spread over several servers
by the vLLM router (core/llm/router.py).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import msgspec

from tension.core.errors import ConfigError
from tension.core.llm.server_keys import base_root, server_key
from tension.core.redact import redact

__all__ = ["Replica", "parse_replicas", "in_shard"]


class Replica(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One server of a role, as a config file lists it: ``{url = "…", weight = 2}``."""

    url: str
    weight: float = 1.0


def parse_replicas(value: Any, field: str) -> list[Replica]:
    """Replicas from a flag (``"http://a:8000,http://b:8000"``) or a config value
    (a URL, a list of URLs, or a list of ``{url, weight}`` tables). Raises
    ConfigError naming `field` and the bad entry."""
    name = field.replace("_", "-")
    if isinstance(value, str):
        items: Sequence[Any] = [u.strip() for u in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        raise ConfigError(f"{name}: expected a URL or a list of URLs, got {value!r}")
    out: list[Replica] = []
    for i, item in enumerate(items):
        where = f"{name}[{i}]" if len(items) > 1 else name
        if isinstance(item, Replica):
            rep = item
        elif isinstance(item, str):
            rep = Replica(url=item)
        elif isinstance(item, dict):
            try:
                rep = msgspec.convert(item, Replica)
            except msgspec.ValidationError as e:
                raise ConfigError(f"{where}: {e} (expected {{url = \"http://…\", weight = 1.0}})") from None
        else:
            raise ConfigError(f"{where}: expected a URL or {{url, weight}}, got {item!r}")
        if not rep.url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}: expected an http(s) URL, got {rep.url!r}")
        if not (math.isfinite(rep.weight) and rep.weight > 0):
            raise ConfigError(f"{where}: weight: expected a number > 0, got {rep.weight!r}")
        rep = Replica(url=base_root(rep.url), weight=float(rep.weight))
        if any(server_key(r.url) == server_key(rep.url) for r in out):  # one server, however spelled
            raise ConfigError(f"{where}: {redact(rep.url)} is listed twice (as {redact(twin(out, rep).url)})")
        out.append(rep)
    if not out:
        raise ConfigError(f"{name}: expected at least one URL")
    weighted = [f"{name}[{i}]" for i, r in enumerate(out) if r.weight != 1.0]
    if weighted and len(out) > 1:
        raise ConfigError(f"{', '.join(weighted)}: weights are not supported: the vLLM router's consistent "
                          "hashing weighs servers equally (list servers of equal capacity, or route unequal ones "
                          "with `tension-run route --policy power_of_two`, which gives up story affinity)")
    return out


def twin(listed: list[Replica], rep: Replica) -> Replica:
    """The replica of `listed` that is the server `rep` is."""
    return next(r for r in listed if server_key(r.url) == server_key(rep.url))


def _unit(key: str, url: str) -> float:
    """A uniform number in (0, 1), fixed for (key, url)."""
    h = hashlib.blake2b(f"{url}\x00{key}".encode(), digest_size=8).digest()
    return (int.from_bytes(h, "big") + 0.5) / 2.0 ** 64


def in_shard(story_id: str, shard: int, shards: int) -> bool:
    """Whether a story belongs to shard `shard` of `shards` (`score --shard I/N`):
    a fixed hash of its id, so N processes on one cache split a corpus without
    talking to each other, each story scored by exactly one."""
    return int(_unit(story_id, "shard") * shards) == shard
