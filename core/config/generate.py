"""Settings of `generate`: the paper's defaults per mode (000, App. D.2; 003, SI)."""

from __future__ import annotations

import math
import os
from typing import Any

import msgspec

from tension.core.config.score import API_KEY_ENV
from tension.core.errors import ConfigError

__all__ = ["MODES", "GenerateConfig", "PIPELINE_TEMPERATURE", "PIPELINE_MAX_TOKENS", "PIPELINE_MIN_P",
           "WHODUNIT_TEMPERATURE", "WHODUNIT_MAX_TOKENS"]

MODES = ("vanilla", "beats", "full", "whodunit")
PIPELINE_TEMPERATURE = 0.7  # 000, App. D.2 (all pipeline steps)
PIPELINE_MAX_TOKENS = 4000
PIPELINE_MIN_P = 0.1
WHODUNIT_TEMPERATURE = 1.0  # 003: "All generations used temperature = 1"
# 003 assumes ≈ 200 output tokens per paragraph; 1,000 leaves room without letting a
# runaway answer fill the context that the later paragraphs need.
WHODUNIT_MAX_TOKENS = 1000


class GenerateConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    mode: str = "full"
    # servers
    base_url: str = "http://127.0.0.1:8000"
    model: str | None = None  # None: the first model the server lists
    api_key_env: str = API_KEY_ENV  # the key is read from this environment variable
    reasoning_off: bool = True  # chat_template_kwargs {"enable_thinking": false}
    # sampling; None = the mode's paper default (see the constants above)
    temperature: float | None = None
    max_tokens: int | None = None
    min_p: float | None = None  # pipeline default 0.1; whodunits send none
    seed: int = 0
    # pipeline
    titles: str = "paper"  # "paper" (3), "recommended" (20) or a file with one title per line
    reference_stories: list[str] = []  # files: Step 0 in full-text mode, one chosen per story
    beats: int | None = None  # Step 1: "Limit to exactly N beats."
    system: str | None = None  # Step 2 system prompt (the paper's is not printed; none by default)
    min_chars: int = 200  # shorter stories are regenerated
    attempts: int = 5  # tries per story (per paragraph for whodunits), the first included
    # whodunit
    paragraphs: int = 25
    # output
    group: str | None = None  # default: the mode (whodunit: the idea's group, else the model)
    # concurrency and reliability
    concurrency: int = 6  # requests in flight (the paper ran 4-6 threads)
    timeout: float = 600.0
    retries: int = 8
    retry_seconds: float = 1800.0
    cache: str | None = None
    cache_max_gb: float | None = None  # never let the cache grow past this size
    progress: bool = True

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, what: str) -> None:
            if not ok:
                raise ConfigError(f"--{field.replace('_', '-')}: expected {what}, got {getattr(self, field)!r}")

        need(self.mode in MODES, "mode", " or ".join(MODES))
        need(self.base_url.startswith(("http://", "https://")), "base_url", "an http(s) URL")
        need(self.temperature is None or 0 <= self.temperature < math.inf, "temperature", "a finite number >= 0")
        need(self.max_tokens is None or self.max_tokens >= 1, "max_tokens", "an integer >= 1")
        need(self.min_p is None or 0 <= self.min_p <= 1, "min_p", "a number in [0, 1]")
        need(self.beats is None or self.beats >= 1, "beats", "an integer >= 1")
        need(self.min_chars >= 0, "min_chars", "an integer >= 0")
        need(self.attempts >= 1, "attempts", "an integer >= 1")
        need(self.paragraphs >= 1, "paragraphs", "an integer >= 1")
        need(self.concurrency >= 1, "concurrency", "an integer >= 1")
        need(self.timeout > 0, "timeout", "seconds > 0")
        need(self.retries >= 1, "retries", "an integer >= 1")

    @property
    def whodunit(self) -> bool:
        return self.mode == "whodunit"

    def sampling(self) -> tuple[float, int, float | None]:
        """(temperature, max_tokens, min_p) with the mode's defaults filled in."""
        if self.whodunit:
            return (_pick(self.temperature, WHODUNIT_TEMPERATURE), _pick(self.max_tokens, WHODUNIT_MAX_TOKENS),
                    self.min_p or None)
        # min_p 0 samples as no min_p does; it is left out of the request, for
        # hosted APIs that reject the field.
        return (_pick(self.temperature, PIPELINE_TEMPERATURE), _pick(self.max_tokens, PIPELINE_MAX_TOKENS),
                _pick(self.min_p, PIPELINE_MIN_P) or None)

    def public(self) -> dict[str, Any]:
        """The settings as recorded in the run file (the key's value never is)."""
        d = msgspec.to_builtins(self)
        d["api_key"] = "(set)" if os.environ.get(self.api_key_env) else None
        return d


def _pick(value, default):
    return default if value is None else value
