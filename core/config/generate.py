"""Settings of `generate`: the paper's defaults per mode (000, App. D.2; 003, SI).
Each field's metadata is its flag's help and group."""

from __future__ import annotations

import os
from typing import Annotated

from tension.core.config.settings import (
    API_KEY_ENV,
    CONCURRENCY,
    OUTPUTS,
    SERVERS,
    TEMPERATURE,
    TOKENS,
    Bounds,
    CacheMaxGB,
    CachePath,
    Progress,
    ReasoningOff,
    Retries,
    RetrySeconds,
    Settings,
    Timeout,
    checked_key,
    flag,
)

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

# flag groups of --help
PIPELINE = "pipeline (paper 000, App. D)"
WHODUNIT = "whodunit (paper 003)"
SAMPLING = "sampling"


class GenerateConfig(Settings, kw_only=True, forbid_unknown_fields=True):
    flag_prefix = "--"
    path_fields = ("cache", "titles", "reference_stories")

    mode: Annotated[str, flag("vanilla: Step 2 only; beats: Steps 1-2; full: Steps 0-2; whodunit: paragraph by "
                              "paragraph (paper 003)", PIPELINE, choices=MODES)] = "full"
    # servers
    base_url: Annotated[str, flag("server root; any OpenAI-compatible endpoint", SERVERS, metavar="URL",
                                  default="OPENAI_BASE_URL, else the running embedded server, else http://127.0.0.1:8000")
                        ] = "http://127.0.0.1:8000"
    model: Annotated[str | None, flag("model id (default: the first the server lists)", SERVERS)] = None
    api_key_env: Annotated[str, flag("environment variable holding the API key", SERVERS,
                                     metavar="VAR")] = API_KEY_ENV
    reasoning_off: ReasoningOff = True
    # sampling; None = the mode's paper default (see the constants above)
    temperature: Annotated[float | None, flag(
        f"sampling temperature (default: {PIPELINE_TEMPERATURE}; whodunit {WHODUNIT_TEMPERATURE})",
        SAMPLING, bounds=TEMPERATURE)] = None
    max_tokens: Annotated[int | None, flag(
        f"longest answer, per request (default: {PIPELINE_MAX_TOKENS}; whodunit {WHODUNIT_MAX_TOKENS})",
        SAMPLING, bounds=TOKENS)] = None
    min_p: Annotated[float | None, flag(
        f"min_p sampling (default: {PIPELINE_MIN_P}; whodunit: not sent); 0 sends none, for APIs that reject it",
        SAMPLING, bounds=Bounds(ge=0, le=1))] = None
    seed: Annotated[int, flag("run seed: reference choice and request seeds derive from it and the idea id",
                              SAMPLING, bounds=Bounds(ge=0))] = 0
    # pipeline
    titles: Annotated[str, flag("Step 0 title pool: the paper's 3, its recommended 20, or a file, one per line",
                                PIPELINE, metavar="paper|recommended|FILE")] = "paper"
    reference_stories: Annotated[list[str], flag(
        "Step 0 in full-text mode: a reference story file (repeat for a pool; one drawn per story)", PIPELINE,
        flag="reference-story", metavar="FILE")] = []
    beats: Annotated[int | None, flag('Step 1 adds "Limit to exactly N beats." (default: no limit)', PIPELINE,
                                      metavar="N", bounds=Bounds(ge=1))] = None
    system: Annotated[str | None, flag("Step 2 system prompt (default: none)", PIPELINE, metavar="TEXT")] = None
    min_chars: Annotated[int, flag("regenerate stories shorter than this", PIPELINE, bounds=Bounds(ge=0))] = 200
    attempts: Annotated[int, flag("tries per story, or per whodunit paragraph, before it fails",
                                  PIPELINE, bounds=Bounds(ge=1))] = 5
    # whodunit
    paragraphs: Annotated[int, flag("paragraphs per story", WHODUNIT, metavar="L", bounds=Bounds(ge=1, le=10_000))] = 25
    # output
    group: Annotated[str | None, flag(
        "group of every output story (default: the mode; whodunit: the idea's group, else the model)",
        OUTPUTS)] = None
    # concurrency and reliability
    concurrency: Annotated[int, flag("requests in flight (the paper ran 4-6 threads; lower it for a hosted "
                                     "API's rate limit)", CONCURRENCY, bounds=Bounds(ge=1))] = 6
    timeout: Timeout = 600.0
    retries: Retries = 8
    retry_seconds: RetrySeconds = 1800.0
    cache: CachePath = None
    progress: Progress = True
    cache_max_gb: CacheMaxGB = None  # added last, so the record's keys keep their order
    refresh: Annotated[str | None, flag(
        "ask again the generation answers that the cache already holds, and write the new ones over them "
        "(generation, or all: the same here); for a setup fixed after it answered badly. Records this run "
        "writes are not asked again", OUTPUTS, choices=("generation", "all"))] = None  # last, as cache_max_gb

    def __post_init__(self) -> None:
        self.check_declared()  # every numeric field within its declared Bounds
        self.expand_paths()
        check = self.check
        check(self.mode in MODES, "mode", " or ".join(MODES))
        check(self.refresh in (None, "generation", "all"), "refresh", "generation or all")
        check(self.base_url.startswith(("http://", "https://")), "base_url", "an http(s) URL")

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

    def resolved_api_key(self) -> str | None:
        """The key is read from the environment variable `api_key_env` names, only
        (a key no HTTP header carries as it is: a ConfigError, `checked_key`)."""
        return checked_key(os.environ.get(self.api_key_env), f"the environment variable {self.api_key_env}")


def _pick(value, default):
    return default if value is None else value
