"""The servers of a role and how keys are spread over them.

A role (generation or judge) may have several *replicas*, each with a weight.
A key (a story id, a story id and position) has a preference order over them,
weighted rendezvous hashing (HRW) of the key over the replica URLs: so all of a
story's prompts, which share its prefix, meet one server's prefix cache; and
adding a replica of weight w moves only the keys it now wins, a share
w / (total weight) of them, none between the old replicas. The same hash splits a
corpus into shards (`score --shard I/N`). Requests are routed over the replicas
by core/llm/router.py.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import msgspec

from tension.core.errors import ConfigError
from tension.core.llm.client import normalize_base_url

__all__ = ["Replica", "parse_replicas", "hrw_order", "in_shard"]


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
        rep = Replica(url=normalize_base_url(rep.url), weight=float(rep.weight))
        if any(r.url == rep.url for r in out):
            raise ConfigError(f"{where}: {rep.url} is listed twice")
        out.append(rep)
    if not out:
        raise ConfigError(f"{name}: expected at least one URL")
    return out


def _unit(key: str, url: str) -> float:
    """A uniform number in (0, 1), fixed for (key, url)."""
    h = hashlib.blake2b(f"{url}\x00{key}".encode(), digest_size=8).digest()
    return (int.from_bytes(h, "big") + 0.5) / 2.0 ** 64


def hrw_order(key: str, replicas: Sequence[Replica]) -> list[int]:
    """Indices of `replicas`, best first, for `key`: weighted rendezvous hashing.
    Replica i scores −w_i / ln(u_i); the largest score wins with probability
    w_i / Σw, and the order depends only on (key, url, weight) of each replica."""
    scores = [-r.weight / math.log(_unit(key, r.url)) for r in replicas]
    return sorted(range(len(replicas)), key=lambda i: (-scores[i], replicas[i].url))


def in_shard(story_id: str, shard: int, shards: int) -> bool:
    """Whether a story belongs to shard `shard` of `shards` (`score --shard I/N`):
    a fixed hash of its id, so N processes on one cache split a corpus without
    talking to each other, each story scored by exactly one."""
    return int(_unit(story_id, "shard") * shards) == shard
