"""The block-pool kernels against a plain model of vLLM's block manager written
here, one sequence at a time, with every full block hashed (ours skips hashing the
blocks nobody can match): same hits, same free blocks, same cache contents, after
any order of admissions and releases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tension.kernels.prefix_cache import Pool, block_hashes, common_prefix


class RefPool:
    """vLLM 0.32's BlockPool + FullAttentionManager, per sequence, in plain Python."""

    def __init__(self, capacity: int, block_size: int):
        self.B = block_size
        self.queue = list(range(1, capacity))  # block 0: the null block
        self.hash: dict[int, object] = {}
        self.ref = [0] * capacity
        self.table: dict[object, int] = {}

    def chain(self, tokens: list[int]) -> list[object]:
        out, h = [], None
        for i in range(len(tokens) // self.B):
            h = hash((h, tuple(tokens[i * self.B:(i + 1) * self.B])))
            out.append(h)
        return out

    def admit(self, prompt: list[int], output: list[int]) -> tuple[int, list[int]] | None:
        B = self.B
        hs = self.chain(prompt)
        cap = (len(prompt) - 1) // B
        hit = 0
        while hit < min(len(hs), cap) and hs[hit] in self.table:
            hit += 1
        tokens = prompt + output[:-1]  # the last token sampled is never fed
        total = -(-len(tokens) // B)
        hit_blocks = [self.table[h] for h in hs[:hit]]
        need = (total - hit) + sum(self.ref[b] == 0 for b in hit_blocks)
        if need > len(self.queue):
            return None
        for b in hit_blocks:
            if self.ref[b] == 0:
                self.queue.remove(b)
            self.ref[b] += 1
        blocks = list(hit_blocks)
        for _ in range(total - hit):
            b = self.queue.pop(0)
            old = self.hash.pop(b, None)
            if old is not None and self.table.get(old) == b:
                del self.table[old]
            self.ref[b] = 1
            blocks.append(b)
        for i, h in enumerate(self.chain(tokens)):
            if i >= hit:
                self.hash[blocks[i]] = h
                self.table.setdefault(h, blocks[i])
        return hit, blocks

    def release(self, blocks: list[int]) -> None:
        front, back = [], []
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                (back if b in self.hash else front).append(b)
        self.queue = front + self.queue + back


def _group_tokens(rng, shared_len: int, tails: list[int], outs: int, identical: bool, tag: int):
    base = [int(t) for t in rng.integers(0, 50, shared_len)]  # few distinct ids: blocks repeat across groups
    if identical:
        prompts = [base + [int(t) for t in rng.integers(0, 50, tails[0])]] * len(tails)
    else:
        prompts = [base + [10_000 + tag * 1000 + i] + [int(t) for t in rng.integers(0, 50, n)]
                   for i, n in enumerate(tails)]
    outputs = [[20_000_000 + tag * 10_000 + i * 100 + j for j in range(outs)] for i in range(len(tails))]
    return prompts, outputs


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), capacity=st.integers(8, 60), block=st.sampled_from([2, 4, 16]),
       ops=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 4), st.integers(1, 9), st.integers(1, 5),
                              st.booleans(), st.booleans()), min_size=1, max_size=25))
def test_hits_and_queue_match_a_per_sequence_reference(seed, capacity, block, ops):
    rng = np.random.default_rng(seed)
    ref = RefPool(capacity, block)
    pool = Pool(capacity, block)
    live: list[tuple[list[list[int]], np.ndarray, int, int, int]] = []
    prefixes = [[int(t) for t in rng.integers(0, 50, 40)] for _ in range(3)]
    for tag, (shared_len, k, tail, outs, identical, release_first) in enumerate(ops):
        if release_first and live:
            ref_blocks, held, m, own, kk = live.pop(int(rng.integers(len(live))))
            for b in ref_blocks:
                ref.release(b)
            pool.release(held, m, own, kk)
        tails = [tail] * k
        prompts, outputs = _group_tokens(rng, 0, tails, outs, identical, tag)
        head = prefixes[tag % 3][:shared_len]  # groups share prefixes with earlier ones
        prompts = [head + p for p in prompts]
        L = len(prompts[0])
        hs = [block_hashes(np.asarray(p, dtype=np.int64), block) for p in prompts]
        m = min(len(h) for h in hs)
        for h in hs[1:]:
            m = min(m, common_prefix(hs[0], h))
        m = min(m, (L - 1) // block)
        tokens = L + outs - 1
        own_total, own_hashed = -(-tokens // block) - m, tokens // block - m
        held = np.empty(m + k * own_total, dtype=np.int64)
        free_before = pool.free
        got = pool.admit(hs[0][:m].copy(), L, own_total, own_hashed, k, held)
        # the reference admits the k sequences one by one; all or none fit, as in the kernel
        snapshot = (list(ref.queue), dict(ref.hash), list(ref.ref), dict(ref.table))
        ref_hits, ref_blocks = [], []
        for p, o in zip(prompts, outputs):
            r = ref.admit(p, o)
            if r is None:
                break
            ref_hits.append(r[0])
            ref_blocks.append(r[1])
        if got < 0:
            ref.queue, ref.hash, ref.ref, ref.table = snapshot
            assert pool.free == free_before
            # the kernel asks for all k at once: it refuses only what the reference could not hold whole
            assert len(ref_hits) < k
            continue
        assert len(ref_hits) == k, "the kernel admitted what the engine could not hold"
        assert ref_hits[0] == got
        assert all(h == m for h in ref_hits[1:])
        assert pool.free == len(ref.queue)
        live.append((ref_blocks, held, m, own_total, k))
    for ref_blocks, held, m, own, kk in live:
        for b in ref_blocks:
            ref.release(b)
        pool.release(held, m, own, kk)
    assert pool.free == len(ref.queue) == capacity - 1
    # the free queue holds the same blocks in the same order (block ids are assigned alike)
    order, b = [], int(pool.nxt[capacity])
    while b != capacity:
        order.append(b)
        b = int(pool.nxt[b])
    assert order == ref.queue


def test_block_hashes_chain_on_the_parent_and_cover_full_blocks_only():
    a = np.arange(40, dtype=np.int64)
    b = a.copy()
    b[3] = 999  # changes block 0, so every block after it
    ha, hb = block_hashes(a, 16), block_hashes(b, 16)
    assert len(ha) == 2  # 40 tokens: two full blocks, the partial one is not hashed
    assert (ha != hb).all()
    c = a.copy()
    c[35] = 999  # in the partial block: no hash changes
    assert (block_hashes(c, 16) == ha).all()
    assert len(block_hashes(a[:15], 16)) == 0
    assert (ha >= 2).all()


def test_a_pool_needs_its_null_block_and_one_more():
    with pytest.raises(ValueError, match="at least 2"):
        Pool(1, 16)
    with pytest.raises(ValueError, match="block size"):
        Pool(10, 0)
