"""The KV cache the paper's setup leaves on one H200: the model's `--gpu-profile h200`.

Paper 000 runs the generator Qwen3-32B and the judge Qwen3-8B, bf16, on one
141 GB H200 (core/serving/profiles.py `paper_servers`: gpu_memory_utilization 0.62
and 0.30). vLLM gives each engine its share of the GPU's memory, takes the
weights out, and makes the rest KV blocks:

    KV bytes      = 141 GB × utilization − weights
    bytes / token = 2 (K and V) × layers × KV heads × head dim × 2 (bf16)
    blocks        = KV bytes / (bytes / token × 16)

| engine | share | weights | KV | layers × KV heads × dim | KiB / token | blocks of 16 |
|---|---:|---:|---:|---|---:|---:|
| Qwen3-32B | 0.62 → 87.4 GB | 65.5 GB | 21.9 GB | 64 × 8 × 128 | 256 | 5,226 |
| Qwen3-8B | 0.30 → 42.3 GB | 16.4 GB | 25.9 GB | 36 × 8 × 128 | 144 | 10,977 |

(The activation peak vLLM profiles and, without --enforce-eager, the CUDA graphs
take a little more; the figures are an upper bound by about a GB.) 16 tokens is
vLLM's block on the GPU; each engine's ``max_num_seqs`` is the profile's (256 and
512) and its token budget vLLM's default on an H200 API server (8,192).
"""

from __future__ import annotations

import msgspec

from tension.core.pipelines.prefix.engine import EngineSpec

__all__ = ["GpuEngine", "H200", "kv_blocks", "PROFILES"]

GPU_GB = 141.0


class GpuEngine(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    utilization: float
    weights_gb: float
    layers: int
    kv_heads: int
    head_dim: int
    max_num_seqs: int
    dtype_bytes: int = 2

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    def spec(self, block_size: int = 16) -> EngineSpec:
        return EngineSpec(block_size=block_size, kv_blocks=kv_blocks(self, block_size),
                          max_num_seqs=self.max_num_seqs, max_batched_tokens=8192)


def kv_blocks(e: GpuEngine, block_size: int = 16, gpu_gb: float = GPU_GB) -> int:
    return int((gpu_gb * e.utilization - e.weights_gb) * 1e9 // (e.bytes_per_token * block_size))


H200 = (GpuEngine(model="Qwen/Qwen3-32B", utilization=0.62, weights_gb=65.5, layers=64, kv_heads=8, head_dim=128,
                  max_num_seqs=256),
        GpuEngine(model="Qwen/Qwen3-8B", utilization=0.30, weights_gb=16.4, layers=36, kv_heads=8, head_dim=128,
                  max_num_seqs=512))
PROFILES = {"h200": H200}  # --gpu-profile NAME: (generation engine, judge engine)
