"""What a fake server says about itself rather than answers, in its dialect
(`ServerInfo`, mixed into `AnswerModel`): /v1/models, llama.cpp's /props, and the
/metrics counters, with the prefix cache whose hits they count (`cached_tokens` in
an answer's usage, as vLLM's prefix cache reports it)."""

from __future__ import annotations

import time
from typing import Any

BLOCK_SIZE = 16  # cached_tokens are whole blocks of this many tokens, like vLLM's
PREFIX_CHARS = 256  # the prefix cache compares prompts in blocks of this many characters
COUNTERS = ("prefix_cache_queries", "prefix_cache_hits", "request_success", "prompt_tokens", "generation_tokens")


class ServerInfo:
    """The info routes' makers, the counters and the prefix cache of a door; the
    door's `AnswerModel` holds the settings they read."""

    models: tuple[str, ...]
    model: str
    dialect: str
    batching: bool
    max_model_len: int
    slots: int
    owned_by: str | None
    prefix_cache_blocks: int

    def _init_counters(self) -> None:
        """An empty prefix cache, every counter at 0."""
        self._blocks: set[int] = set()
        self._counters = dict.fromkeys(COUNTERS, 0)

    def _models_payload(self) -> dict:
        """The /v1/models answer, in the server's dialect."""
        created = int(time.time())
        data: list[dict[str, Any]]
        if self.dialect == "llamacpp_python":  # owned_by "me", no context, no meta (its app.py)
            data = [{"id": m, "object": "model", "owned_by": self.owned_by or "me", "permissions": []}
                    for m in self.models]
            return {"object": "list", "data": data}
        if self.dialect == "llamacpp":
            data = [{"id": m, "object": "model", "created": created, "owned_by": self.owned_by or "llamacpp",
                     "meta": {"vocab_type": 2, "n_ctx_train": 8192, "n_ctx": self.max_model_len}}
                    for m in self.models]
            return {"object": "list", "data": data, "models": [{"name": m} for m in self.models]}
        data = [
            {"id": m, "object": "model", "created": created,
             "owned_by": self.owned_by or ("vllm" if self.batching else "test"),
             "root": m, "max_model_len": self.max_model_len}
            for m in self.models
        ]
        return {"object": "list", "data": data}

    def _props_payload(self) -> dict:
        """llama.cpp's /props answer."""
        return {"total_slots": self.slots, "model_path": f"/models/{self.model}.gguf",
                "default_generation_settings": {"n_ctx": self.max_model_len}}

    # ----------------------------------------------------- counters, prefix cache

    def metrics(self) -> dict[str, int]:
        """Counter values as /metrics shows them (without the `vllm:` / `_total`)."""
        return dict(self._counters)

    def _metrics_text(self) -> str:
        """The /metrics answer (Prometheus text) from the counters, in the server's dialect."""
        c = self._counters
        if self.dialect == "llamacpp":  # llama-server --metrics: its own names, no prefix-cache counter
            lines = []
            for name, key in (("llamacpp:prompt_tokens_total", "prompt_tokens"),
                              ("llamacpp:tokens_predicted_total", "generation_tokens")):
                lines += [f"# TYPE {name} counter", f"{name} {float(c[key])}"]
            return "\n".join(lines) + "\n"
        label = f'model_name="{self.model}"'
        lines = []
        for name, key, help_, extra in (
            ("vllm:prefix_cache_queries_total", "prefix_cache_queries",
             "Prefix cache queries, in terms of number of queried tokens.", ""),
            ("vllm:prefix_cache_hits_total", "prefix_cache_hits",
             "Prefix cache hits, in terms of number of cached tokens.", ""),
            ("vllm:request_success_total", "request_success",
             "Count of successfully processed requests.", 'finished_reason="stop",'),
            ("vllm:prompt_tokens_total", "prompt_tokens", "Number of prefill tokens processed.", ""),
            ("vllm:generation_tokens_total", "generation_tokens",
             "Number of generation tokens processed.", ""),
        ):
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} counter")
            lines.append(f'{name}{{engine="0",{extra}{label}}} {float(c[key])}')
        return "\n".join(lines) + "\n"

    def _counted(self, prompt_tokens: int, cached: int, completion_tokens: int) -> None:
        """A chat answer served: its tokens added to the counters."""
        c = self._counters
        c["prefix_cache_queries"] += prompt_tokens
        c["prefix_cache_hits"] += cached
        c["request_success"] += 1
        c["prompt_tokens"] += prompt_tokens
        c["generation_tokens"] += completion_tokens

    def _cached_tokens(self, text: str, prompt_tokens: int) -> int:
        """Approximate cached tokens of a prompt (`text` = its message contents joined).

        The longest prefix shared with an earlier prompt is found in whole blocks of
        `PREFIX_CHARS` characters (chained hashes; this prompt's blocks are remembered),
        converted to tokens in proportion (prompt_tokens * chars / len(text)) and
        rounded down to whole `BLOCK_SIZE` blocks. Cheap: no second tokenizer pass.
        """
        seen = self._blocks
        if len(seen) > self.prefix_cache_blocks:
            seen.clear()
        h = 0
        matched = 0
        hit = True
        for start in range(0, len(text) - PREFIX_CHARS + 1, PREFIX_CHARS):
            h = hash((h, text[start : start + PREFIX_CHARS]))
            if hit and h in seen:
                matched += PREFIX_CHARS
            else:
                hit = False
                seen.add(h)
        if not matched:
            return 0
        return prompt_tokens * matched // len(text) // BLOCK_SIZE * BLOCK_SIZE
