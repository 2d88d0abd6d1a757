"""`estimate --block-size B --kv-blocks C` (or `--gpu-profile h200`): the prefix-cache
model run over the positions `estimate` found, beside the ideal.

The ideal (docs/cost.md) prefills every shared prefix once; a real engine shares
only full blocks, recomputes a prompt's last partial block for each of a request's
n copies, and evicts under a finite KV cache. The model (engine.py, schedule.py)
replays the run's requests in the scheduler's order and concurrency on each server's
block pool and says what it computes.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from tension.core.config import ScoreConfig
from tension.core.errors import ConfigError
from tension.core.pipelines.prefix.engine import EngineSpec
from tension.core.pipelines.prefix.gpu import PROFILES
from tension.core.pipelines.prefix.schedule import Schedule, simulate
from tension.core.pipelines.prefix.synthetic import SyntheticPrompts
from tension.core.pipelines.score.feed import max_open

__all__ = ["CacheModelOptions", "RolePrediction", "PrefixPrediction", "predict", "engine_specs"]


class CacheModelOptions(msgspec.Struct, frozen=True, kw_only=True):
    block_size: int | None = None  # --block-size
    kv_blocks: int | None = None  # --kv-blocks: each server's KV cache, in blocks
    gpu_profile: str | None = None  # --gpu-profile: block size and KV blocks of a GPU setup
    prefill_tok_s: float | None = None  # --prefill-tok-s: prompt tokens a GPU computes per second

    @property
    def wanted(self) -> bool:
        return self.block_size is not None or self.kv_blocks is not None or self.gpu_profile is not None


class RolePrediction(msgspec.Struct, kw_only=True):
    queried: int  # prompt tokens the engine looks up (every copy of an n > 1 request)
    hit: int
    computed: int  # queried - hit: prompt tokens the engine computes
    hit_rate: float
    ideal_computed: int  # the ideal's computed tokens (every shared prefix once)
    over_ideal: float  # computed / ideal_computed


class PrefixPrediction(msgspec.Struct, kw_only=True):
    block_size: int
    kv_blocks: dict[str, int]  # per server: "generation", "judge" (the same server: one entry)
    profile: str | None
    roles: dict[str, RolePrediction]
    hit_rate: float
    computed: int
    ideal_computed: int
    positions: int
    seconds: float
    never_fit: int = 0  # requests whose prompts alone outgrow a whole KV cache: left out (vLLM would refuse them)


def engine_specs(opts: CacheModelOptions, cfg: ScoreConfig) -> tuple[EngineSpec, EngineSpec | None]:
    """(generation server, judge server or None when the judge shares it)."""
    if opts.gpu_profile is not None:
        gen_e, judge_e = PROFILES[opts.gpu_profile]
        B = opts.block_size or 16
        gen, judge = gen_e.spec(B), judge_e.spec(B)
        if opts.kv_blocks is not None:
            gen = msgspec.structs.replace(gen, kv_blocks=opts.kv_blocks)
            judge = msgspec.structs.replace(judge, kv_blocks=opts.kv_blocks)
        return gen, judge
    if opts.block_size is None or opts.kv_blocks is None:
        raise ConfigError("--block-size and --kv-blocks go together (or give --gpu-profile h200)")
    spec = EngineSpec(block_size=opts.block_size, kv_blocks=opts.kv_blocks)
    shared = cfg.judge_base_url is None or cfg.judge_replicas() == cfg.generation_replicas()
    return spec, (None if shared else spec)


def predict(cfg: ScoreConfig, opts: CacheModelOptions, stories: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
            const: dict[str, int], ending_tokens: float, ideal: dict[str, int]) -> PrefixPrediction:
    """The model over `stories` (per story: P, a and c of each position, in ascending k)."""
    gen, judge = engine_specs(opts, cfg)
    prompts = SyntheticPrompts(
        block_size=gen.block_size, n=cfg.endings, gen_head=const["ending_system"] + const["ending_instruction"],
        judge_head=const["judge_system"] + const["judge_head"], judge_mid=const["judge_mid"],
        judge_tail=const["judge_tail"], ending_tokens=ending_tokens, judge_output=min(cfg.judge_max_tokens, 2),
        warm=cfg.warm_judge)
    sched = Schedule(gen_concurrency=cfg.gen_concurrency, judge_concurrency=cfg.judge_concurrency,
                     max_open=max_open(cfg, 1, 1))
    pred = simulate(prompts.corpus(stories), sched, gen, judge)
    roles = {}
    for role, rt in pred.roles.items():
        ic = ideal.get(role, 0)
        roles[role] = RolePrediction(queried=rt.queries, hit=rt.hits, computed=rt.computed, hit_rate=rt.hit_rate,
                                     ideal_computed=ic, over_ideal=rt.computed / ic if ic else float("nan"))
    tot = pred.total
    ic = sum(ideal.values())
    blocks = {"generation": gen.kv_blocks} if judge is None else {"generation": gen.kv_blocks,
                                                                   "judge": judge.kv_blocks}
    return PrefixPrediction(block_size=gen.block_size, kv_blocks=blocks, profile=opts.gpu_profile, roles=roles,
                            hit_rate=tot.hit_rate, computed=tot.computed, ideal_computed=ic,
                            positions=pred.positions, seconds=pred.seconds, never_fit=pred.never_fit)
