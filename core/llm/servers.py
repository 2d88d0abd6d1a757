"""What a run knows of each server it sends to, by server root: its traits
(core/llm/traits.py, learned once) and its capacity (core/llm/capacity.py). The
client owns one `Servers`; run.json `servers` is its `record()`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from tension.core.llm.capacity import Capacity
from tension.core.llm.traits import ServerTraits
from tension.core.redact import redact

__all__ = ["Servers"]


class Servers:
    def __init__(self, notice: Callable[[str], None] | None):
        self.notice = notice
        self.traits: dict[str, ServerTraits] = {}
        self._capacity: dict[str, Capacity] = {}
        self._unsure: set[str] = set()  # servers told a constraint may not hold there
        self._path_models: set[str] = set()  # model ids told to be file paths

    def of(self, root: str) -> ServerTraits:
        """The server's traits (a blank record until something is learned)."""
        if root not in self.traits:
            self.traits[root] = ServerTraits(url=redact(root))
        return self.traits[root]

    def listed(self, root: str, t: ServerTraits, name: str) -> None:
        """Traits read from /v1/models (and /props) replace a blank record, keeping
        what requests taught already; a llama.cpp server's differences said once."""
        old = self.traits.get(root)
        if old is not None and old.max_n is not None and (t.max_n is None or old.max_n < t.max_n):
            t.max_n, t.max_n_from = old.max_n, old.max_n_from
        self.traits[root] = t
        if t.kind == "llamacpp" and self.notice is not None and (old is None or old.kind != "llamacpp"):
            slots = (f"{t.slots} slots: at most {t.slots} sequences sent at once, n asked in chunks of "
                     f"{t.max_n}" if t.slots else "its slots unknown")
            self.notice(f"{name} is llama.cpp's server: {slots}; /tokenize in its dialect; constrained answers "
                        "through its grammar; its usage counts one choice per request, so token totals are the "
                        "server's figure; its batched decoding is not batch-invariant, so a seeded answer sent "
                        "again may differ (docs/servers.md; run.json `servers`)")

    def model_named_by_path(self, model: str, flag: str) -> None:
        """A model id that is a file's absolute path (llama-server without --alias)
        goes into cache keys, run.json and every export: said once, with the way out."""
        if self.notice is None or model in self._path_models or not model.startswith("/"):
            return
        self._path_models.add(model)
        self.notice(f"{flag}: the model id is a file path ({model}): it goes into the cache keys, run.json and "
                    "the exports, and moving the file makes every cached answer a miss; start llama-server "
                    "with --alias NAME and pass that name (docs/servers.md)")

    def learned_n(self, root: str, name: str, n: int, how: str) -> None:
        """The server answers at most `n` choices a request: said once, then asked in chunks."""
        t = self.of(root)
        if t.max_n is not None and t.max_n <= n:
            return
        t.max_n, t.max_n_from = n, how
        if self.notice is not None:
            self.notice(f"{name} answers at most {n} choice(s) per request (learned from {how}): asking in "
                        f"chunks of {n}, each seeded as one request's choices are (seed + offset); run.json "
                        "`servers` records it")

    def constrained(self, root: str, name: str) -> None:
        """A constrained request (choice, JSON) goes to a server that is neither vLLM
        nor llama.cpp (a proxy, a hosted API): said once that it may not hold."""
        t = self.of(root)
        if t.kind != "other" or root in self._unsure or self.notice is None:
            return
        self._unsure.add(root)
        self.notice(f"{name} is neither vLLM nor llama.cpp (its /v1/models does not say owned_by vllm or llamacpp): "
                    "the answer constraint goes as vLLM's structured_outputs, which such a server (or the one behind "
                    "a proxy) may ignore; the malformed-answer checks will say if it did (docs/servers.md)")

    def capacity(self, root: str) -> Capacity:
        if root not in self._capacity:
            t = self.traits.get(root)
            self._capacity[root] = Capacity(t.slots if t is not None else None)
        return self._capacity[root]

    def overloaded(self, root: str, name: str, why: str, epoch: int) -> None:
        """A time-out or a 503 of a request sent at `epoch`: the server's capacity
        lowered (core/llm/capacity.py), said the first time."""
        cap = self.capacity(root)
        if cap.overloaded(epoch) and cap.stats.lowered == 1 and self.notice is not None:
            self.notice(f"{name} is sent more than it holds ({why}): at most {cap.stats.limit} sequence(s) at "
                        "once from now on, raised again as it answers (run.json `servers` records it)")

    def record(self) -> list[dict[str, Any]]:
        """Each server's traits and capacity (run.json `servers`)."""
        out = []
        for root, t in sorted(self.traits.items()):
            d = msgspec.to_builtins(t)
            cap = self._capacity.get(root)
            d["capacity"] = None if cap is None else msgspec.to_builtins(cap.stats)
            out.append(d)
        return out
