"""vLLM's automatic prefix cache at block granularity, as numba kernels.

What the engine does (vLLM 0.32, ``vllm/v1/core/block_pool.py``,
``kv_cache_manager.py``, ``single_type_kv_cache_manager.py``, read in the embedded
server's environment), and what these kernels copy:

- A prompt is cut in blocks of B tokens; only *full* blocks are hashed, each hash
  chained on its parent's, so a block is found only when the whole prefix up to
  its end is the same. A request's hit is the longest run of its leading block
  hashes the cache holds, capped at ``(prompt tokens - 1) // B`` blocks (the last
  token is always computed, for its logits). Models with one full-attention KV
  group (Llama, Qwen3) get no partial-block hits.
- Blocks live in one pool of C (``num_gpu_blocks``; block 0 is vLLM's null block,
  so C - 1 hold tokens). A block held by a running request has a reference count
  and cannot be evicted. Free blocks sit in one queue; a new block is taken from
  its head, and a block taken that still holds a hash is evicted from the cache
  then.
- A finished request frees its blocks in reverse order; a block whose count drops
  to zero goes to the *tail* of the queue when it holds a hash (LRU: the blocks of
  a sequence's end are evicted before its start), to the *head* when it holds
  none (a partial block: reused first).
- Blocks are registered in the cache when they are scheduled, so the n copies of
  an n > 1 request, or the prompts of one batched request, admitted in the same
  step find the blocks the first one is computing.
- ``vllm:prefix_cache_queries`` counts the prompt tokens of each request admitted
  (preempted re-admissions apart), ``vllm:prefix_cache_hits`` the tokens of its hit.

The state is a few arrays (``Pool``) and a typed dict from block hash to block;
`admit` and `release` are the engine's allocate and free for a *group* of k
sequences that share their first m full blocks (the n copies of a generation
request; a position's judge prompts, which share everything before the ending).
Blocks past the shared ones never match anything (they hold an ending, or the text
after it), so they are counted, queued and evicted like the engine's, without
being hashed: only whether they are full (hashed) matters, which decides the end
of the queue they go to.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.typed import Dict

__all__ = ["Pool", "block_hashes", "admit", "release", "lookup", "common_prefix", "NO_HASH", "OWN_HASH"]

NO_HASH = np.uint64(0)  # a block that holds no full block of tokens
OWN_HASH = np.uint64(1)  # a full block no other request can match (not in the table)
_FNV = np.uint64(0x100000001B3)
_BASIS = np.uint64(0xCBF29CE484222325)


@numba.njit(cache=True)
def _mix(x: np.uint64) -> np.uint64:
    # splitmix64's finaliser: every input bit moves every output bit
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.njit(cache=True)
def block_hashes(tokens: np.ndarray, block_size: int) -> np.ndarray:
    """The chained hashes of the full blocks of `tokens` (int64 token ids): block
    i's hash covers its tokens and block i-1's hash, as vLLM's do; never 0 or 1."""
    n = len(tokens) // block_size
    out = np.empty(n, dtype=np.uint64)
    h = _BASIS
    for b in range(n):
        x = h
        for j in range(b * block_size, (b + 1) * block_size):
            x = (x ^ np.uint64(tokens[j])) * _FNV
        x = _mix(x)
        if x < np.uint64(2):
            x += np.uint64(2)
        out[b] = x
        h = x
    return out


@numba.njit(cache=True)
def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Leading entries equal in `a` and `b`."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Pool:
    """The engine's block pool: `capacity` blocks (block 0 is the null block), the
    free queue as a doubly linked list over the block ids with a sentinel at
    index `capacity`, each block's hash and reference count, the hash table, and
    the counters: [0] free blocks, [1] prefix-cache queries (tokens), [2] hits
    (tokens), [3] requests admitted, [4] blocks evicted that held a matchable hash."""

    def __init__(self, capacity: int, block_size: int):
        if block_size < 1:
            raise ValueError(f"block size: expected an integer >= 1, got {block_size}")
        self.block_size = block_size
        if capacity < 2:
            raise ValueError(f"a block pool needs at least 2 blocks (one is vLLM's null block), got {capacity}")
        self.capacity = capacity
        s = capacity
        self.nxt = np.empty(capacity + 1, dtype=np.int64)
        self.prv = np.empty(capacity + 1, dtype=np.int64)
        # the queue at start: blocks 1..C-1 in id order (block 0 taken as the null block)
        ids = np.arange(1, capacity, dtype=np.int64)
        self.nxt[s] = 1
        self.prv[s] = capacity - 1
        self.nxt[ids] = ids + 1
        self.nxt[capacity - 1] = s
        self.prv[ids] = ids - 1
        self.prv[1] = s
        self.nxt[0] = self.prv[0] = -1
        self.bhash = np.zeros(capacity, dtype=np.uint64)
        self.ref = np.zeros(capacity, dtype=np.int64)
        self.ref[0] = 1  # the null block is never free
        self.table = Dict.empty(key_type=types.uint64, value_type=types.int64)
        self.stats = np.zeros(5, dtype=np.int64)
        self.stats[0] = capacity - 1

    @property
    def free(self) -> int:
        return int(self.stats[0])

    @property
    def queries(self) -> int:
        return int(self.stats[1])

    @property
    def hits(self) -> int:
        return int(self.stats[2])

    def admit(self, hashes: np.ndarray, prompt_tokens: int, own_total: int, own_hashed: int, k: int,
              out: np.ndarray) -> int:
        """`admit` on this pool (see there)."""
        return int(admit(self.nxt, self.prv, self.bhash, self.ref, self.table, self.stats, hashes,
                         self.block_size, prompt_tokens, own_total, own_hashed, k, out))

    def release(self, held: np.ndarray, m: int, own_total: int, k: int) -> None:
        release(self.nxt, self.prv, self.bhash, self.ref, self.table, self.stats, held, m, own_total, k)


@numba.njit(cache=True)
def _unlink(nxt, prv, b):
    p, q = prv[b], nxt[b]
    nxt[p] = q
    prv[q] = p
    nxt[b] = prv[b] = -1


@numba.njit(cache=True)
def _pop_head(nxt, prv, bhash, table, stats, s):
    b = nxt[s]
    _unlink(nxt, prv, b)
    h = bhash[b]
    if h > np.uint64(1):
        if h in table and table[h] == b:
            del table[h]
            stats[4] += 1
    bhash[b] = NO_HASH
    return b


@numba.njit(cache=True)
def admit(nxt, prv, bhash, ref, table, stats, hashes, block_size, prompt_tokens, own_total, own_hashed, k, out):
    """Admit k sequences whose prompts share the full blocks `hashes` (m of them,
    already capped at (prompt_tokens - 1) // B) and each hold `own_total` more
    blocks (their own prompt tail and output), `own_hashed` of them full. The
    first finds the longest cached run of `hashes` and computes the rest, which is
    registered; the k - 1 others hit all m. Writes the block ids held to `out`
    (m shared, then own_total per sequence) and returns the first sequence's hit
    in blocks, or -1 when the free blocks do not hold them all (the request waits,
    nothing changes)."""
    s = len(nxt) - 1
    m = len(hashes)
    h1 = 0
    while h1 < m and hashes[h1] in table:
        h1 += 1
    touched_free = 0
    for i in range(h1):
        if ref[table[hashes[i]]] == 0:
            touched_free += 1
    needed = touched_free + (m - h1) + k * own_total
    if needed > stats[0]:
        return -1
    for i in range(h1):
        b = table[hashes[i]]
        if ref[b] == 0:
            _unlink(nxt, prv, b)
            stats[0] -= 1
        ref[b] += k
        out[i] = b
    for i in range(h1, m):
        b = _pop_head(nxt, prv, bhash, table, stats, s)
        stats[0] -= 1
        ref[b] = k
        h = hashes[i]
        bhash[b] = h
        if h not in table:  # else another block holds it (a run evicted in the middle): that one stays
            table[h] = b
        out[i] = b
    j = m
    for _ in range(k):
        for t in range(own_total):
            b = _pop_head(nxt, prv, bhash, table, stats, s)
            stats[0] -= 1
            ref[b] = 1
            bhash[b] = OWN_HASH if t < own_hashed else NO_HASH
            out[j] = b
            j += 1
    stats[1] += k * prompt_tokens
    stats[2] += (h1 + (k - 1) * m) * block_size
    stats[3] += k
    return h1


@numba.njit(cache=True)
def release(nxt, prv, bhash, ref, table, stats, held, m, own_total, k):
    """The k sequences of an `admit` finish: each frees its blocks (its shared
    ones, then its own) in reverse order, as the engine does; a block no longer
    held goes to the tail of the free queue when it holds a hash (evicted last,
    least recently used first), to the head when it holds none."""
    s = len(nxt) - 1
    front = np.empty(len(held), dtype=np.int64)
    for c in range(k):
        nf = 0
        lo = m + c * own_total
        for r in range(own_total + m):  # own blocks last to first, then the shared ones
            b = held[lo + own_total - 1 - r] if r < own_total else held[m - 1 - (r - own_total)]
            ref[b] -= 1
            if ref[b] == 0:
                if bhash[b] == NO_HASH:
                    front[nf] = b
                    nf += 1
                else:  # append at the tail
                    last = prv[s]
                    nxt[last] = b
                    prv[b] = last
                    nxt[b] = s
                    prv[s] = b
                stats[0] += 1
        # the blockless-hash ones go to the front, in the order they were freed
        after = s
        for i in range(nf):
            b = front[i]
            q = nxt[after]
            nxt[after] = b
            prv[b] = after
            nxt[b] = q
            prv[q] = b
            after = b


@numba.njit(cache=True)
def lookup(table, ref, hashes):
    """(blocks of `hashes` the cache holds from the start, how many of those are
    free, i.e. taken out of the free queue when the request is admitted)."""
    h = 0
    touched = 0
    while h < len(hashes):
        if hashes[h] not in table:
            break
        b = table[hashes[h]]
        if ref[b] == 0:
            touched += 1
        h += 1
    return h, touched
