"""One vLLM engine's admission, run and release of requests, on the block pool of
`kernels.prefix_cache`, in engine steps.

The engine's scheduler (vLLM 0.32 ``v1/core/sched/scheduler.py``) serves its
waiting queue first come first served: a request is admitted when a sequence slot
(``max_num_seqs``) and the blocks of its whole prompt are free (``scheduler_reserve_full_isl``,
the default), else it and everything behind it wait. The n sequences of one
request are admitted one by one, so a request may start with some of them.

Time is counted in engine steps: an admitted sequence runs for its prefill (its
uncached prompt tokens over ``max_num_batched_tokens``, the step's token budget)
plus one step per output token. Its output blocks are taken at admission
rather than one at a time (the order blocks are taken in does not change which
cached blocks a pop from the queue's head evicts, only when); preemption, which
the engine does when a decode finds no free block, is not modelled, so the
model holds for KV caches that admit the running requests' outputs.
"""

from __future__ import annotations

import collections
import functools
import heapq
import math
from collections.abc import Callable

import msgspec
import numpy as np

from tension.kernels.prefix_cache import Pool, lookup

__all__ = ["EngineSpec", "Group", "Engine", "RoleTotals"]


class EngineSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What the model needs of one server: its block size, its number of KV blocks
    (``num_gpu_blocks``, as its log prints it), ``max_num_seqs`` and ``max_num_batched_tokens``."""

    block_size: int
    kv_blocks: int
    max_num_seqs: int = 256
    max_batched_tokens: int = 8192


class Group(msgspec.Struct, kw_only=True):
    """k sequences sent as one request (an n > 1 generation request, or the prompts
    of a batched judge request) that share their first full blocks `hashes`
    (capped at (prompt - 1) // B) and each have `prompt` tokens and `output` tokens
    of their own at the end."""

    hashes: np.ndarray  # uint64
    prompt: int
    output: int
    k: int
    role: str = "generation"

    def own(self, block_size: int) -> tuple[int, int]:
        """(blocks, full blocks) each sequence holds past the shared ones: its KV
        holds prompt + output - 1 tokens when it ends (the last token sampled is
        never fed)."""
        tokens = self.prompt + self.output - 1
        m = len(self.hashes)
        return max(0, -(-tokens // block_size) - m), max(0, tokens // block_size - m)


class RoleTotals(msgspec.Struct, kw_only=True):
    requests: int = 0  # sequences admitted
    queries: int = 0  # prompt tokens (vllm:prefix_cache_queries)
    hits: int = 0  # of them found in the cache (vllm:prefix_cache_hits)

    @property
    def computed(self) -> int:
        return self.queries - self.hits

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


class _Waiting:
    __slots__ = ("group", "left", "done", "running")

    def __init__(self, group: Group, done: Callable[[], None]):
        self.group = group
        self.left = group.k  # sequences not admitted yet
        self.running = 0  # admitted, not finished
        self.done = done


class Engine:
    """One server: its pool, its waiting queue and its running sequences."""

    def __init__(self, spec: EngineSpec, clock: Clock):
        self.spec = spec
        self.pool = Pool(spec.kv_blocks, spec.block_size)
        self.clock = clock
        self.waiting: collections.deque[_Waiting] = collections.deque()
        self.seqs = 0
        self.roles: dict[str, RoleTotals] = {}
        self.never_fits = 0  # requests whose prompt alone is larger than the pool: left out, counted

    def submit(self, group: Group, done: Callable[[], None]) -> None:
        self.waiting.append(_Waiting(group, done))

    def schedule(self) -> None:
        """Admit from the head of the queue while a slot and the blocks are free."""
        B, spec, pool = self.spec.block_size, self.spec, self.pool
        while self.waiting and self.seqs < spec.max_num_seqs:
            w = self.waiting[0]
            g = w.group
            own_total, own_hashed = g.own(B)
            h1, touched = lookup(pool.table, pool.ref, g.hashes)
            m = len(g.hashes)
            fixed = touched + (m - h1)
            room = pool.free - fixed
            k = min(w.left, spec.max_num_seqs - self.seqs)
            if own_total:
                k = min(k, room // own_total) if room >= 0 else 0
            elif room < 0:
                k = 0
            if k <= 0:
                if self.seqs == 0:  # larger than the whole pool: nothing will ever free room for it
                    self.never_fits += 1
                    self.waiting.popleft()
                    self.clock.after(0, w.done)
                    continue
                return
            held = np.empty(m + k * own_total, dtype=np.int64)
            got = pool.admit(g.hashes, g.prompt, own_total, own_hashed, k, held)
            assert got >= 0
            rt = self.roles.setdefault(g.role, RoleTotals())
            rt.requests += k
            rt.queries += k * g.prompt
            rt.hits += (got + (k - 1) * m) * B
            uncached = (g.prompt - got * B) + (k - 1) * (g.prompt - m * B)
            steps = max(1, math.ceil(uncached / spec.max_batched_tokens)) + max(0, g.output - 1)
            self.seqs += k
            w.left -= k
            w.running += k
            if w.left == 0:
                self.waiting.popleft()
            self.clock.after(steps, functools.partial(self._finish, w, held, m, own_total, k))

    def _finish(self, w: _Waiting, held: np.ndarray, m: int, own_total: int, k: int) -> None:
        self.pool.release(held, m, own_total, k)
        self.seqs -= k
        w.running -= k
        if w.left == 0 and w.running == 0:
            w.done()


class Clock:
    """Engine steps: callbacks at a step, in the order they were set; after each
    step's callbacks, every engine admits what it can (frees first, then the
    requests they made possible, as the engine's step does)."""

    def __init__(self) -> None:
        self.now = 0
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._n = 0
        self.engines: list[Engine] = []

    def after(self, steps: int, fn: Callable[[], None]) -> None:
        self._n += 1
        heapq.heappush(self._heap, (self.now + steps, self._n, fn))

    def run(self) -> None:
        heap = self._heap
        while True:
            for e in self.engines:
                e.schedule()
            if not heap:
                return
            t = heap[0][0]
            self.now = t
            while heap and heap[0][0] == t:
                heapq.heappop(heap)[2]()
