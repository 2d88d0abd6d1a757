"""What servers taught a run by what they did, kept in the cache folder for the next
run (M1 of ../shared/reviews/external-servers-2026-12-07.md).

A server that takes `n` only partly teaches a run its limit (core/llm/choices.py: the
same short count twice, a 400 naming its bound, a 400 a smaller n does not get) and
the counts its short answers bring; the run keeps the pieces of its answers under
those counts (core/run/reads.py `chunk_key`). A resume that did not know them asked
each position's first request whole again, missed the pieces kept under the count
returned, and sent them again: a user who stopped and resumed within one round of a
slow queue made no progress.

So what a run's requests for a model taught a server's record (`Server.taught`) is
kept in the cache's meta database under the server's key and the model
(`meta_name`): read when the next run opens its servers (`remember`, called by
`Run.serving`) and put on their records before their first request
(`Server.remember`, used from the first request for more than one choice:
`Server.recall`), and written where it changed when the run closes (`keep`). Only
what a server's behaviour taught is kept: what it says of itself (/v1/models,
/props) each run learns again, and a limit it taught holds only while it says it is
the kind of server it was. A vLLM router the run starts in front of several servers
is a new server each run: nothing is kept for it (what a probe found of the seeds of
each server behind it is: below).

What a probe found of a server's seeds (M4: core/llm/seed_probe.py) is kept the same
way, in a record of its own (`seeds_name`): put back on the server before its first
request (`Lessons.remember_seeds`, core/llm/taught.py), so a rerun that sends seeded generation requests
does not probe again while the server says it is the kind it was.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import msgspec

from tension.cache.store import Store
from tension.core.llm.router import Router
from tension.core.llm.servers import Server
from tension.core.llm.taught import SeedLesson, Taught

__all__ = ["Lesson", "meta_name", "seeds_name", "remember", "keep"]

_DEC = msgspec.json.Decoder(Taught)
_SEEDS = msgspec.json.Decoder(SeedLesson)


class Lesson(msgspec.Struct, kw_only=True):
    """One server and model a run sends to, and what the cache held of them at its start."""

    server: Server
    model: str
    name: str  # its meta record's name (`meta_name`)
    was: Taught | None
    # what a probe found of its seeds (core/llm/seed_probe.py), in a record of its own (`seeds_name`)
    seeds_was: SeedLesson | None = None


def meta_name(key: str, model: str) -> str:
    """The meta record of what the server under `key` (core/llm/server_keys.py) taught
    about requests for `model`."""
    return "taught " + msgspec.json.encode([key, model]).decode()


def seeds_name(key: str, model: str) -> str:
    """The meta record of what a probe found of the seeds of the server under `key` for `model`."""
    return "seeds " + msgspec.json.encode([key, model]).decode()


def _read(store: Store, name: str, dec: msgspec.json.Decoder) -> object | None:
    """The meta record `name` as `dec` reads it; None: none, or another release's form."""
    raw = store.get_meta(name)
    try:
        return dec.decode(raw) if raw is not None else None
    except (msgspec.DecodeError, msgspec.ValidationError):  # another release's form: learned again
        return None


def remember(store: Store, routers: Iterable[Router], refresh: Collection[str] = ()) -> list[Lesson]:
    """Put what the cache holds of each router's server and model on the server's record
    (before any request of the block `Run.serving` opens); the lessons to `keep` at the end.
    A role in `refresh` (`--refresh`: its answers asked again) takes no earlier probe's
    finding of its seeds: the answers it asks again are probed again, and the new finding kept."""
    lessons: list[Lesson] = []
    for r in routers:
        if r.model is None:
            continue
        # several servers behind a router the run starts: what a probe found of each one's seeds
        for server in [r.server] if r.single else r.servers():
            name = meta_name(server.key, r.model)
            if any(lesson.name == name for lesson in lessons):
                continue
            got = _read(store, name, _DEC) if r.single else None
            was = got if isinstance(got, Taught) else None
            if was is not None:
                server.remember(r.model, was)
            got = _read(store, seeds_name(server.key, r.model), _SEEDS) if r.role not in refresh else None
            seeds = got if isinstance(got, SeedLesson) else None
            if seeds is not None:
                server.lessons.remember_seeds(r.model, seeds)
            lessons.append(Lesson(server=server, model=r.model, name=name, was=was, seeds_was=seeds))
    return lessons


def keep(store: Store, lessons: Iterable[Lesson]) -> None:
    """Write what the run's requests taught where it differs from what the cache held
    (nothing in a cache that cannot be written: a fully cached rerun's)."""
    if store.readonly:
        return
    for lesson in lessons:
        now = lesson.server.taught(lesson.model)
        if now is not None and now != lesson.was:
            store.put_meta(lesson.name, msgspec.json.encode(now))
        found = lesson.server.lessons.seeds_found(lesson.model)
        if found is not None and found != lesson.seeds_was:
            store.put_meta(seeds_name(lesson.server.key, lesson.model), msgspec.json.encode(found))
