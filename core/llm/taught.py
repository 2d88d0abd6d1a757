"""What a server taught runs by what it did, per model: the n limit its answers showed,
the counts its answers came in (cut to its limit, or short), and whether its seeds hold (a probe's
finding: core/llm/seed_probe.py).

This run's lessons are kept on the server's record (`Server.lessons`); the cache
folder keeps them for the next run (core/run/taught.py), which puts them back before
its first request, so a resume looks its pieces up by what they are and sends
nothing already answered (M1 of ../shared/reviews/external-servers-2026-12-07.md).
A limit the server's kind, its slots or a router's workers gave is not a lesson: each
run learns it again from what the server says of itself. The counts its pieces were
asked in are: a rerun finds the pieces by them before it asks the server anything.
"""

from __future__ import annotations

import msgspec

from tension.core.llm.traits import Seeds, ServerTraits

__all__ = ["Taught", "SeedLesson", "Lessons", "TAUGHT_BY", "EARLIER"]

# How a limit its behaviour taught was learned (core/llm/choices.py, `Server.learned_n`).
TAUGHT_BY = ("short answers", "HTTP 400", "HTTP 400 to a larger n")
EARLIER = "an earlier run's "  # run.json `servers` max_n_from of a limit an earlier run learned
MAX_GIVES = 8  # counts of short answers kept per server and model (a glitching server's, bounded)


class Taught(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """What a server taught runs for requests of one model: kept in the cache folder and
    put on the next run's record before its first request."""

    kind: str = "other"  # what it said it was then: its limit holds while it says so still
    max_n: int | None = None  # its limit, and how it was learned (one of TAUGHT_BY)
    max_n_from: str | None = None
    # the counts its pieces were asked in (cut to its limit) or came back as (short answers): a resume's
    # pieces are looked up under them before the server is asked anything (core/llm/choices.py)
    gives: tuple[int, ...] = ()
    refuses: tuple[str, ...] = ()  # fields its 4xx refused (core/llm/refusals.py): a later run goes without


class SeedLesson(msgspec.Struct, frozen=True, kw_only=True):
    """What a probe found of a server's seeds for requests of one model (core/llm/seed_probe.py;
    kept in the cache folder in a record of its own: core/run/taught.py)."""

    kind: str  # what the server said it was then: the finding holds while it says so still
    seeds: Seeds
    requests: int  # the probe's requests


class Lessons:
    """One server's lessons per model: earlier runs' (`remember`, `remember_seeds`), the
    counts of choices this run's short answers brought (`gave`), together for the next
    (`taught`); and what this run's probe found of its seeds (`probed`, `seeds_found`)."""

    def __init__(self) -> None:
        self._earlier: dict[str, Taught] = {}
        self._shorts: dict[str, set[int]] = {}
        self._seeds_earlier: dict[str, SeedLesson] = {}
        self._seeds_found: dict[str, SeedLesson] = {}

    def remember_seeds(self, model: str, lesson: SeedLesson) -> None:
        """What an earlier run's probe found of its seeds for `model` (from the cache folder)."""
        self._seeds_earlier[model] = lesson

    def earlier_seeds(self, model: str) -> SeedLesson | None:
        return self._seeds_earlier.get(model)

    def probed(self, model: str, lesson: SeedLesson) -> None:
        """What this run's probe found of its seeds for `model`."""
        self._seeds_found[model] = lesson

    def seeds_found(self, model: str) -> SeedLesson | None:
        """What this run's probe found of its seeds for `model` (None: it did not probe)."""
        return self._seeds_found.get(model)

    def remember(self, model: str, taught: Taught) -> None:
        self._earlier[model] = taught

    def asking(self, model: str) -> Taught | None:
        """A request for more than one choice of `model`: from now on this run's lessons
        of it are kept; what an earlier run taught of it, if anything."""
        self._shorts.setdefault(model, set())
        return self._earlier.get(model)

    def gave(self, model: str, count: int) -> None:
        self._shorts.setdefault(model, set()).add(count)

    def given(self, model: str, limit: int | None) -> list[int]:
        """The counts a piece of an answer may be kept under besides the count asked: the
        server's `limit` now, the counts short answers brought, an earlier run's; largest first."""
        was = self._earlier.get(model)
        counts = self._shorts.get(model, set()) | set(was.gives if was is not None else ())
        counts |= {m for m in (limit, was.max_n if was is not None else None) if m}
        return sorted(counts, reverse=True)

    def taught(self, model: str, traits: ServerTraits, refuses: set[str] | None = None) -> Taught | None:
        """This run's lessons of `model` with earlier runs' (to keep for the next), and the
        fields the server `refuses`; None: no request for `model` asked more than one
        choice and it refuses none."""
        was = self._earlier.get(model)
        fields = tuple(sorted(refuses or ()))
        if model not in self._shorts:
            return msgspec.structs.replace(was or Taught(kind=traits.kind), refuses=fields) if fields else None
        how = traits.max_n_from
        if how is not None and how.startswith(EARLIER):  # as the earlier run learned it
            how = was.max_n_from if was is not None else None
        limit = traits.max_n if how in TAUGHT_BY else None
        gives = sorted(self._shorts[model] | set(was.gives if was is not None else ()))[:MAX_GIVES]
        return Taught(kind=traits.kind, max_n=limit, max_n_from=how if limit is not None else None,
                      gives=tuple(gives), refuses=fields)
