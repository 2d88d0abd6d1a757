"""What a run knows of each server it sends to: one key, one record.

`server_key(url)` (core/llm/server_keys.py, a leaf) is how a run names a
server, the only key anything learned about a server is kept under: the base URL
with its scheme and host lower-cased, its credentials dropped and its path kept
(a hosted gateway's ``https://host/api/v1`` is the server ``https://host/api``;
its ``/v1`` and a trailing ``/`` dropped). A `Server` holds everything the run knows or learns about
that server: its traits (core/llm/traits.py, learned from what it says and does),
its capacity (core/llm/capacity.py), its model listing, its context length, how
messages name it, the check of a router's workers when an answer through it is
unreadable (core/llm/unreadable.py), and what was already said of it. What differs
by server kind is a method here (`is_vllm`, `tokenize_body`, `wire_form`,
`learned_n`, `constrained`); a new kind is `traits.learn` and this module.

The client owns one `Servers` and is the one way in (`Client.server(url)`);
run.json `servers` is `Servers.record()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec

from tension.core.llm.capacity import Capacity
from tension.core.llm.failures import Outage
from tension.core.llm.model_names import way_to_name
from tension.core.llm.protocol import (
    ChatRequest,
    ContentTokenizeRequest,
    CountTokenizeRequest,
    ModelCard,
    Props,
    TokenizeRequest,
)
from tension.core.llm.ratelimit import Pacer, RateLimit
from tension.core.llm.server_keys import base_root, server_key
from tension.core.llm.taught import EARLIER, Lessons, Taught
from tension.core.llm.traits import COUNT_PATH, KIND_NAMES, ServerTraits, grammar_of, learn
from tension.core.llm.unreadable import Suspect
from tension.core.redact import redact

__all__ = ["Servers", "Server", "Taught", "server_key", "base_root"]  # Taught: core/llm/taught.py


class Server:
    """Everything a run knows of one server (module docstring)."""

    def __init__(self, key: str, notice: Callable[[str], None] | None, root: str | None = None):
        self.key = key
        # Where its requests go: the base URL as first given, credentials kept (they are
        # sent), without a trailing ``/`` or ``/v1`` (vLLM's /tokenize lives at the root).
        self.root = root if root is not None else key
        self.notice = notice
        self.traits = ServerTraits(url=redact(key))
        self.models: dict[str, str | None] | None = None  # model id -> owned_by, from /v1/models (None: not asked)
        self._context_said = False  # its context length is one the run may size prompts by (below)
        # How messages name it: its URL, or for a router the run started, the servers behind it
        # (core/llm/routing.py `routing`), with the check of those workers (core/llm/unreadable.py).
        self.router_name: str | None = None
        self.suspect: Suspect | None = None
        self.workers: list[str] = []  # a router the run started: the URLs of the servers behind it
        self.taken_out: str | None = None  # why the run took it out of that router (core/llm/router.py)
        # fields of the run's requests it refused (a 4xx naming them) or dropped (an answer without
        # what they asked for): core/llm/refusals.py; run.json `servers`
        self.refuses: set[str] = set()
        self.drops: set[str] = set()
        # What a run chose and answers claimed (core/llm/answer_checks.py): the model used because
        # none was given (`defaulted`); model asked -> the model its answers named (`answered_by`).
        self.default_model: str | None = None
        self.answered_as: dict[str, str] = {}
        # What was said of its failed attempts, and when a retry's wait ends (core/llm/failures.py)
        self.outage = Outage()
        # Its rate limit as its x-ratelimit-* headers tell it (core/llm/ratelimit.py): requests
        # to it wait for the window's reset instead of being refused with a 429.
        self.pacer = Pacer()
        self._capacity: Capacity | None = None
        self._told: set[str] = set()  # what was said of it once: "kind", "unsure", "overlong"
        # the request looking for its n limit, and its end (core/llm/choices.py `NAsk`)
        self.n_search: tuple[object, asyncio.Event] | None = None
        self.n_probes = 0  # 400s to n > 1 spent looking for it
        # the first seeded generation request's probe of its seeds, which every other one waits for
        # (core/llm/seed_probe.py; its finding goes to `lessons`)
        self.seeds_probe: asyncio.Event | None = None
        self.in_record = False  # listed, counted or chatted with: an item of run.json `servers`
        self.lessons = Lessons()  # what its answers taught of each model, this run's and earlier runs'

    @property
    def name(self) -> str:
        return self.router_name or redact(self.key)

    @property
    def what(self) -> str:
        """What kind of server it is, in words (`traits.KIND_NAMES`)."""
        return KIND_NAMES[self.traits.kind]

    def _verb(self, one: str, many: str) -> str:
        """`one` for a server, `many` for a router named by the servers behind it (L2)."""
        return one if self.router_name is None else many

    def behind_router(self, name: str | None, suspect: Suspect | None, workers: list[str] | None = None) -> None:
        """A router the run started is named by its workers, and checks them (None: it stopped)."""
        self.router_name, self.suspect, self.workers = name, suspect, list(workers or [])

    def adopt(self, workers: list[Server]) -> None:
        """A router the run started in front of `workers`: the kind-dependent traits
        (constraint form, /tokenize dialect, usage, the n limit) are theirs when they
        all agree (M1b: otherwise llama.cpp's grammar goes as vLLM's structured_outputs)."""
        kinds = {w.traits.kind for w in workers}
        if len(kinds) != 1 or "other" in kinds:
            return
        w = workers[0].traits
        t = self.traits
        t.kind, t.tokenize, t.constraint, t.usage, t.batch_invariant = (w.kind, w.tokenize, w.constraint, w.usage,
                                                                      w.batch_invariant)
        limits = [x.traits.max_n for x in workers]
        if all(m is not None for m in limits):
            t.max_n, t.max_n_from = min(m for m in limits if m is not None), "its workers' traits"

    # -- what it said of itself ---------------------------------------------------

    def kind_probe(self, models: list[ModelCard]) -> str | None:
        """The endpoint that tells what a server listing `models` is, when its
        owned_by alone does not (None: nothing to ask): llama.cpp's /props (its
        slots); llama-cpp-python's token counter, since its owned_by "me" is
        anyone's word (../shared/reviews/external-servers-2026-12-02.md M1)."""
        if self.traits.kind != "other":
            return None
        owners = {m.owned_by for m in models}
        return "/props" if "llamacpp" in owners else COUNT_PATH if "me" in owners else None

    def listed(self, models: list[ModelCard], props: Props | None, counts: bool = False) -> None:
        """Its /v1/models answer (with llama.cpp's /props, or whether
        llama-cpp-python's counter answered: `kind_probe`): the listing, and traits
        replacing a blank record, keeping what requests taught already; a llama.cpp
        or llama-cpp-python server's differences said once."""
        self.models = {m.id: m.owned_by for m in models}
        if self.traits.kind != "other":  # learned once per server
            return
        old, t = self.traits, learn(redact(self.key), models, props, counts)
        if old.max_n is not None and (t.max_n is None or old.max_n < t.max_n):
            t.max_n, t.max_n_from = old.max_n, old.max_n_from
        if self._context_said and old.context_len:
            t.context_len = old.context_len
        self.traits = t
        if t.kind == "llamacpp":  # its /tokenize does not say its context; vLLM's does
            self._context_said = self._context_said or t.context_len is not None
            self._say_once("kind", self._llamacpp_notice(t))
        if t.kind == "llamacpp_python":
            self._say_once("kind", f"{self.name} is {self.what}: one request at a time, one choice per request "
                           f"(n asked in chunks of 1); tokens counted by its {COUNT_PATH}; constrained answers "
                           "through its grammar / response_format (docs/servers.md; run.json `servers`)")

    def _llamacpp_notice(self, t: ServerTraits) -> str:
        slots = (f"{t.slots} slots: at most {t.slots} sequences sent at once, n asked in chunks of "
                 f"{t.max_n}" if t.slots else "its slots unknown")
        return (f"{self.name} {self._verb('is', 'are')} {self.what}: {slots}; /tokenize in its dialect; "
                "constrained answers "
                "through its grammar; its usage counts one choice per request, so token totals are the "
                "server's figure; its batched decoding is not batch-invariant, so a seeded answer sent "
                "again may differ (docs/servers.md; run.json `servers`)")

    def defaulted(self, model: str, flag: str, role: str) -> None:
        """No `flag` was given: `role` uses `model`, the first it lists; with several
        listed, said once (F1 of ../shared/reviews/newuser-2026-12-02.md), and kept
        in run.json `servers` (`default_model`)."""
        self.default_model = model
        ids = list(self.models or {})
        if len(ids) > 1:
            shown = ", ".join(ids[:8]) + (", …" if len(ids) > 8 else "")
            self._say_once(f"default {model}", f"{flag} not given: the {role} uses model {model}, the first of the "
                           f"{len(ids)} models {self.name} lists ({shown}); pass {flag} to choose (run.json "
                           "`servers` records it)")

    def answered_by(self, asked: str, answered: str) -> None:
        """An answer to a request for `asked` named the model `answered`: where they
        differ (an alias, a proxy substituting models), kept in run.json `servers`
        (`answered_as`) and said once per model asked (F15)."""
        if not answered or answered == asked or self.answered_as.get(asked) == answered:
            return
        self.answered_as[asked] = answered
        self._say_once(f"answered {asked} {answered}", f"{self.name} {self._verb('answers', 'answer')} requests "
                       f"for model {asked} as model "
                       f"{answered}: an alias, or a proxy substituting models? The cache keys and run.json name "
                       f"{asked}; run.json `servers` records the model that answered")

    def rate_limited(self, limit: RateLimit | None) -> None:
        """A request to it is no longer in flight, with its answer's rate-limit headers
        (None: no answer, or none sent): the pace they set (`Pacer`); a spent window
        said once."""
        spent = self.pacer.answered(limit)
        if spent is None:
            return
        what, seconds = spent
        self._say_once("paced", f"{self.name} {self._verb('says its', 'say their')} rate limit is spent "
                       f"(x-ratelimit-remaining-{what}: 0): requests to it wait for the reset "
                       f"(x-ratelimit-reset-{what}, {seconds:,.1f} s) rather than be refused (HTTP 429), and "
                       "then go as its headers allow")

    async def paced(self) -> None:
        """Wait until its rate limit takes one more request (`Pacer.admit`)."""
        await self.pacer.admit()

    def owned_by(self, model: str) -> str | None:
        """Who its /v1/models said owns `model` (None: not asked, or not said)."""
        return (self.models or {}).get(model)

    def is_vllm(self) -> bool:
        """Whether it said it is vLLM (/v1/models owned_by), the one answer to "is it vLLM?"."""
        return self.traits.kind == "vllm"

    @property
    def context_len(self) -> int | None:
        """Its context length per sequence, once it said one the run sizes prompts by
        (vLLM's /tokenize `max_model_len`, llama.cpp's /v1/models `meta.n_ctx`)."""
        return self.traits.context_len if self._context_said else None

    def counted(self, context_len: int | None) -> None:
        """What its /tokenize answer said of its context length."""
        if context_len:
            self.traits.context_len, self._context_said = context_len, True

    # -- how it is asked ----------------------------------------------------------

    @property
    def tokenize_path(self) -> str:
        """Where it counts tokens: /tokenize, or llama-cpp-python's COUNT_PATH."""
        return COUNT_PATH if self.traits.tokenize == "count" else "/tokenize"

    def tokenize_body(self, model: str, text: str) -> msgspec.Struct:
        """A token-count request in its dialect: vLLM's {model, prompt}, llama.cpp's
        {content}, llama-cpp-python's {input} (at `tokenize_path`)."""
        if self.traits.tokenize == "llamacpp":
            return ContentTokenizeRequest(content=text)
        if self.traits.tokenize == "count":
            return CountTokenizeRequest(input=text)
        return TokenizeRequest(model=model, prompt=text)

    def wire_form(self, request: ChatRequest) -> ChatRequest:
        """`request` as it takes it: its own constraint form in place of vLLM's."""
        if self.traits.constraint != "grammar" or not request.structured_outputs:
            return request
        form = grammar_of(request.structured_outputs)
        if form is None:
            return request
        return msgspec.structs.replace(request, structured_outputs=None, **form)

    @property
    def holds_constraint(self) -> bool:
        """Whether a constrained answer (choice, JSON) is known to hold on it: a vLLM or
        llama.cpp server says so by its kind; a proxy or a hosted API may ignore it."""
        return self.traits.kind != "other"

    def constrained(self) -> None:
        """A constrained request (choice, JSON) goes to it while it is neither vLLM
        nor llama.cpp (a proxy, a hosted API): said once that it may not hold."""
        if not self.holds_constraint:
            self._say_once("unsure", f"{self.name} {self._verb('is', 'are')} neither vLLM nor llama.cpp (its "
                           "/v1/models does not say owned_by "
                           "vllm or llamacpp): the answer constraint goes as vLLM's structured_outputs, which such a "
                           "server (or the one behind a proxy) may ignore; the malformed-answer checks will say if it "
                           "did (docs/servers.md)")

    def learned_n(self, n: int, how: str, seeded: bool = True) -> None:
        """It answers at most `n` choices a request: said once, then asked in chunks."""
        t = self.traits
        if t.max_n is not None and t.max_n <= n:
            return
        t.max_n, t.max_n_from = n, how
        if self.notice is not None:
            seeds = ", each seeded as one request's choices are (seed + offset)" if seeded else ""
            self.notice(f"{self.name} {self._verb('answers', 'answer')} at most {n} choice(s) per request (learned "
                        f"from {how}): asking in "
                        f"chunks of {n}{seeds}; run.json `servers` records it")

    # -- what earlier runs taught (core/run/taught.py) -----------------------------

    def remember(self, model: str, taught: Taught) -> None:
        """What earlier runs' requests for `model` taught of it (kept in the cache folder),
        on the record before the run's first request; used from the first request for
        more than one choice of `model` (`recall`)."""
        self.lessons.remember(model, taught)
        self.refuses.update(taught.refuses)  # not sent again: the pipeline goes without (core/llm/refusals.py)

    def recall(self, model: str, n: int, seeded: bool = True) -> None:
        """A request for `n` choices of `model` is about to be sized: the limit an earlier
        run learned is its limit while it says it is what it was then and nothing it said
        or did in this run set one; said once, and recorded in run.json as an earlier run's."""
        if n <= 1:
            return
        was = self.lessons.asking(model)
        if was is not None and was.max_n is not None and self.traits.max_n is None and was.kind == self.traits.kind:
            self.learned_n(was.max_n, f"{EARLIER}{was.max_n_from or 'answers'}, kept in the cache", seeded)

    def gave(self, model: str, count: int) -> None:
        """A request for `model` was asked in pieces of `count` choices (its limit), or answered
        with `count`, fewer than it asked: the counts its pieces are kept under (`given`)."""
        self.lessons.gave(model, count)

    def given(self, model: str) -> list[int]:
        """The counts a piece of an answer for `model` may be kept under besides the count
        asked (core/llm/choices.py): its limit, the counts its short answers brought, an
        earlier run's too; largest first."""
        return self.lessons.given(model, self.traits.max_n)

    def taught(self, model: str) -> Taught | None:
        """What its answers to this run's requests for `model` taught, with what earlier
        runs had (to keep for the next); None: no request for `model` asked more than one."""
        return self.lessons.taught(model, self.traits, self.refuses)

    def model_named_by_path(self, model: str, flag: str) -> None:
        """A model id that is a file's absolute path (llama-server without --alias)
        goes into cache keys, run.json and every export: said once, with the way out."""
        if model.startswith("/"):
            way = way_to_name(self.traits.kind, self.owned_by(model))  # the server's own (core/llm/model_names.py)
            self._say_once(f"path {model}", f"{flag}: the model id is a file path ({model}): it goes into the cache "
                           "keys, run.json and the exports, and moving the file makes every cached answer a miss; "
                           f"serve the model under a name ({way}) and pass that name (docs/servers.md)")

    def refuses_fields(self, fields: list[str]) -> None:
        """It refused requests sending `fields` (core/llm/refusals.py): kept, for run.json."""
        self.refuses.update(fields)

    def drops_field(self, field: str) -> None:
        """It answered without what `field` asked for (core/llm/refusals.py): kept, for run.json."""
        self.drops.add(field)

    def overlong(self, chars: int, max_tokens: int, limit: int) -> None:
        """It sent an answer far longer than max_tokens allows: said once."""
        self._say_once("overlong", f"{self.name} {self._verb('ignores', 'ignore')} max_tokens: it sent an answer "
                       f"of {chars:,} characters for "
                       f"max_tokens {max_tokens}; every answer longer than {limit:,} characters is kept cut to "
                       "that length")

    # -- what it holds at once ----------------------------------------------------

    @property
    def capacity(self) -> Capacity:
        if self._capacity is None:
            self._capacity = Capacity(self.traits.slots)
        return self._capacity

    def overloaded(self, why: str, epoch: int) -> None:
        """A time-out or a 503 of a request sent at `epoch`: its capacity lowered
        (core/llm/capacity.py), said the first time."""
        cap = self.capacity
        if cap.overloaded(epoch) and cap.stats.lowered == 1 and self.notice is not None:
            self.notice(f"{self.name} {self._verb('is', 'are')} sent more than {self._verb('it holds', 'they hold')} "
                        f"({why}): at most {cap.stats.limit} sequence(s) at "
                        "once from now on, raised again as it answers (run.json `servers` records it)")

    def record(self) -> dict[str, Any]:
        """Its traits and capacity (one item of run.json `servers`)."""
        d: dict[str, Any] = msgspec.to_builtins(self.traits)
        if self.models is not None:
            d["models"] = list(self.models)
        if self.default_model is not None:
            d["default_model"] = self.default_model
        if self.answered_as:
            d["answered_as"] = dict(self.answered_as)
        if self.refuses:
            d["refuses"] = sorted(self.refuses)
        if self.drops:
            d["drops"] = sorted(self.drops)
        d["capacity"] = None if self._capacity is None else msgspec.to_builtins(self._capacity.stats)
        return d

    def _say_once(self, what: str, text: str) -> None:
        if what not in self._told and self.notice is not None:
            self._told.add(what)
            self.notice(text)


class Servers:
    """The run's `Server` records, by `server_key`."""

    def __init__(self, notice: Callable[[str], None] | None):
        self.notice = notice
        self._by_key: dict[str, Server] = {}

    def server(self, url: str) -> Server:
        """The record of the server at `url` (any URL of it: credentials, case, /v1)."""
        key = server_key(url)
        if key not in self._by_key:
            self._by_key[key] = Server(key, self.notice, base_root(url))
        return self._by_key[key]

    def record(self) -> list[dict[str, Any]]:
        """Each server's traits and capacity (run.json `servers`), for servers the
        run learned something of."""
        return [s.record() for _, s in sorted(self._by_key.items()) if s.in_record]
