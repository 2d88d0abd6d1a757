"""Settings of `score`: defaults are the paper's (METRICS.md 1.1–1.4); a TOML file
(`--config`) overrides them; flags override the file."""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from tension.core.errors import ConfigError

__all__ = ["ScoreConfig", "load_config", "config_file_keys", "make_curve_settings", "read_config_file", "API_KEY_ENV"]

API_KEY_ENV = "OPENAI_API_KEY"


class ScoreConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # servers
    # A URL, several comma-separated, or (config file) a list of URLs or of
    # {url, weight} tables: replicas of one role (core/replicas.py)
    base_url: str | list[str | dict[str, Any]] = "http://127.0.0.1:8000"
    model: str | None = None  # None: the first model the server lists
    judge_base_url: str | list[str | dict[str, Any]] | None = None  # None: the generation servers
    judge_model: str | None = None  # None: the generation model (on the same server)
    api_key: str | None = None  # prefer the OPENAI_API_KEY environment variable
    reasoning_off: bool = True  # send chat_template_kwargs {"enable_thinking": false}
    # ending generation (000, App. C.4)
    endings: int = 100
    temperature: float = 1.2
    top_p: float = 0.95
    max_tokens: int = 150
    seed: int | None = None
    # judging (000, App. C.5)
    judge_temperature: float = 0.0
    judge_max_tokens: int = 10
    # "choice": the judge may only answer Y or N (vLLM structured outputs);
    # "logprobs": Y or N by the first token's Y-vs-N probability (for weak judges)
    judge_constraint: str = "none"
    continuation_words: int = 2000
    # corpus and positions (000, App. C.2–C.3)
    min_words: int = 500
    max_words: int = 5000
    min_anchor_words: int = 10
    pct_min: float = 0.10
    pct_max: float = 0.99
    tokenizer: str = "server"  # "server" (/tokenize), "words", or a tokenizer.json path
    max_model_len: int | None = None  # generation context; None: as the server's /tokenize reports it
    # concurrency: requests in flight per lane (the paper's batch sizes)
    gen_concurrency: int = 64
    judge_concurrency: int = 512
    tokenize_concurrency: int = 64
    warm_judge: bool = True  # one judge request per position first, to fill the prefix cache
    shard: str | None = None  # "I/N": score only the stories of shard I (0-based) of N (core/replicas.py)
    # reliability
    timeout: float = 600.0
    retries: int = 8
    retry_seconds: float = 1800.0
    # storage and outputs
    cache: str | None = None  # None: ~/.cache/tension-run/llm.lmdb
    cache_max_gb: float | None = None  # the cache never grows past this (None: the disk is the limit)
    save_texts: bool = False
    progress: bool = True
    report: bool = True  # write report.md, tables and figures at the end
    gpu_hour_usd: float | None = None  # price for the cost line of the report
    # curve statistics (METRICS 1.4)
    window: int = 5
    thresholds: tuple[float, ...] = (30.0, 60.0, 120.0)
    late_threshold: float = 0.80
    retention_window: int = 10

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, what: str, value: Any) -> None:
            if not ok:
                raise ConfigError(f"{field.replace('_', '-')}: expected {what}, got {value!r}")

        for name in ("temperature", "top_p", "judge_temperature", "pct_min", "pct_max", "timeout", "retry_seconds",
                     "late_threshold"):
            # inf and nan would pass the range checks below (or reach the server as JSON null)
            need(math.isfinite(getattr(self, name)), name, "a finite number", getattr(self, name))
        need(self.min_anchor_words >= 0, "min_anchor_words", "an integer >= 0", self.min_anchor_words)
        need(self.endings >= 1, "endings", "an integer >= 1", self.endings)
        need(self.temperature >= 0, "temperature", "a number >= 0", self.temperature)
        need(0 < self.top_p <= 1, "top_p", "a number in (0, 1]", self.top_p)
        need(self.max_tokens >= 1, "max_tokens", "an integer >= 1", self.max_tokens)
        need(self.judge_max_tokens >= 1, "judge_max_tokens", "an integer >= 1", self.judge_max_tokens)
        need(self.continuation_words >= 1, "continuation_words", "an integer >= 1", self.continuation_words)
        need(0 <= self.min_words <= self.max_words, "min_words", f"0 <= min-words <= max-words ({self.max_words})",
             self.min_words)
        need(0.0 <= self.pct_min <= self.pct_max <= 1.0, "pct_min", "0 <= pct-min <= pct-max <= 1", self.pct_min)
        for lane in ("gen_concurrency", "judge_concurrency", "tokenize_concurrency"):
            need(getattr(self, lane) >= 1, lane, "an integer >= 1", getattr(self, lane))
        need(self.timeout > 0, "timeout", "seconds > 0", self.timeout)
        need(self.retries >= 1, "retries", "an integer >= 1", self.retries)
        need(self.judge_constraint in ("none", "choice", "logprobs"), "judge_constraint",
             "'none', 'choice' or 'logprobs'",
             self.judge_constraint)
        need(self.judge_temperature >= 0, "judge_temperature", "a number >= 0", self.judge_temperature)
        self.generation_replicas()  # each raises a ConfigError naming the bad entry
        self.shard_spec()
        self.judge_replicas()

        self.curve_settings()  # check them now, not after hours of scoring

    def shard_spec(self) -> tuple[int, int] | None:
        """(I, N) of `shard`, or None to score every story."""
        if self.shard is None:
            return None
        i, sep, n = self.shard.partition("/")
        if not (sep and i.strip().isdigit() and n.strip().isdigit() and int(i) < int(n)):
            raise ConfigError(f"shard: expected I/N with 0 <= I < N (e.g. 0/4), got {self.shard!r}")
        return int(i), int(n)

    def generation_replicas(self):
        from tension.core.llm.replicas import parse_replicas

        return parse_replicas(self.base_url, "base_url")

    def judge_replicas(self):
        """The judge servers; the generation servers when none are given."""
        from tension.core.llm.replicas import parse_replicas

        if self.judge_base_url is None:
            return self.generation_replicas()
        return parse_replicas(self.judge_base_url, "judge_base_url")

    def curve_settings(self):
        return make_curve_settings(self.window, self.thresholds, self.late_threshold, self.retention_window)

    def resolved_api_key(self) -> str | None:
        return os.environ.get(API_KEY_ENV) or self.api_key

    def public(self) -> dict[str, Any]:
        """The settings as recorded in run.json: never the API key."""
        d = msgspec.to_builtins(self)
        d["api_key"] = "(set)" if self.resolved_api_key() else None
        return d


def make_curve_settings(window, thresholds, late_threshold, retention_window, flag_prefix: str = ""):
    """CurveSettings, with a bad value reported as a ConfigError naming the setting
    (``flag_prefix="--"`` names it as a flag)."""
    from tension.kernels.curves import CurveSettings

    try:
        return CurveSettings(window=window, thresholds=tuple(thresholds), late_threshold=late_threshold,
                             retention_window=retention_window)
    except ValueError as e:
        field, _, rest = str(e).partition(": ")
        raise ConfigError(f"{flag_prefix}{field.replace('_', '-')}: {rest}") from e


def config_file_keys(path: str | os.PathLike | None) -> set[str]:
    """The keys a config file sets (normalised to underscores); empty without a file."""
    if path is None:
        return set()
    try:
        return {k.replace("-", "_") for k in tomllib.loads(Path(path).read_text(encoding="utf-8"))}
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return set()  # load_config reports the problem with the file


def load_config(path: str | os.PathLike | None, overrides: dict[str, Any],
                fallback: dict[str, Any] | None = None) -> ScoreConfig:
    """Defaults ← ``fallback`` (e.g. a profile, or the running embedded server) ←
    TOML file ← flags (``overrides``: flags the user gave, not None)."""
    data: dict[str, Any] = dict(fallback or {})
    if path is not None:
        p = Path(path)
        file_data = {k.replace("-", "_"): v for k, v in read_config_file(p).items()}
        known = set(ScoreConfig.__struct_fields__)
        for k in file_data:
            if k not in known:
                raise ConfigError(f"{p}: unknown key `{k}` (known: {', '.join(sorted(known))})")
        data.update(file_data)
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return msgspec.convert(data, ScoreConfig)
    except msgspec.ValidationError as e:
        where = f"{path}: " if path else ""
        raise ConfigError(f"{where}{e}") from e


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The TOML document of a --config file; an unreadable or invalid file is a
    ConfigError naming it. (Shared by the commands that take --config.)"""
    p = Path(path)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{p}: cannot read the config file: {e.strerror or e}") from e
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from e
