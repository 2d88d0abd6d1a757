"""Settings of `score` (also read by `estimate` and `bench`): defaults are the
paper's (docs/metrics.md 1.1–1.4); a TOML file (`--config`) overrides them; flags
override the file. Each field's metadata is its flag's help and group."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

from tension.core.config.settings import (
    API_KEY_ENV,
    CONCURRENCY,
    EXTRA_BODY_HELP,
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
    build_settings,
    config_file_keys,
    extra_body,
    flag,
    load_settings,
    read_config_file,
    refresh_roles,
)
from tension.core.errors import ConfigError
from tension.kernels.settings import (
    CurveSettings,
    IntervalResamples,
    IntervalSeed,
    LateThreshold,
    RetentionWindow,
    Thresholds,
    Window,
)

__all__ = ["ScoreConfig", "load_config", "config_file_keys", "make_curve_settings", "read_config_file", "API_KEY_ENV",
           "SERVERS", "ENDINGS", "JUDGING", "CORPUS", "CONCURRENCY", "OUTPUTS", "MOST_ENDINGS", "SEED_SCHEMES",
           "RECORDED_BEFORE"]

# flag groups of --help
ENDINGS = "endings (paper 000, App. C.4)"
JUDGING = "judging (paper 000, App. C.5)"
CORPUS = "corpus and positions (paper 000, App. C.2-C.3)"
CHECKS = "answer checks (docs/reliability.md, Degenerate answers)"

# A URL, several comma-separated, or (config file) a list of URLs or of {url, weight}
# tables: replicas of one role (core/llm/replicas.py)
URLs = str | list[str | dict[str, Any]]
_CURVE = CurveSettings()
REFRESH = ("generation", "judge", "all")  # --refresh: the roles whose cached answers are asked again
SHARE = Bounds(ge=0, le=1, noun="a share")
# The most endings one generation request asks (--endings, --round-endings, --max-endings):
# a position's seed leaves room for seed + i of every choice i below it in a signed
# int32 (core/pipelines/score/requests.py `position_seed`)
MOST_ENDINGS = 10_000
ENDINGS_COUNT = Bounds(ge=1, le=MOST_ENDINGS)
# --seed-scheme: "position", each position's request seeded from the run's seed and its
# prefix; "run", every position's with the run's seed, as releases before 2026-12-07 did
SEED_SCHEMES = ("position", "run")
# Settings added after run records were first written, with the value a run.json
# written without them was made with: such a run is read as it was made (its cache
# keys for the view and `cache drop --run`, another run or the same for a folder).
RECORDED_BEFORE = {"seed_scheme": "run"}


class ScoreConfig(Settings, kw_only=True, forbid_unknown_fields=True):
    path_fields = ("cache", "tokenizer")
    # servers
    base_url: Annotated[URLs, flag(
        "generation server root, e.g. http://127.0.0.1:8000; several comma-separated are replicas behind "
        "vllm-router (a story's requests stay on one; each must answer GET /health, as vLLM does; one that "
        "answers unreadably is taken out; docs/scale-out.md)", SERVERS, metavar="URL",
        default="OPENAI_BASE_URL, else the running embedded server, else http://127.0.0.1:8000")] = "http://127.0.0.1:8000"
    model: Annotated[str | None, flag(
        "generation model id (default: the first the server lists; giving it lets a fully cached rerun send "
        "nothing)", SERVERS)] = None
    judge_base_url: Annotated[URLs | None, flag(
        "judge server root(s), comma-separated (default: the generation servers)", SERVERS,
        metavar="URL")] = None
    judge_model: Annotated[str | None, flag("judge model id (default: the generation model)", SERVERS)] = None
    api_key: ApiKey = None
    reasoning_off: ReasoningOff = True
    # ending generation (000, App. C.4)
    endings: Annotated[int, flag("endings per position (n)", ENDINGS, bounds=ENDINGS_COUNT)] = 100
    temperature: Annotated[float, flag("sampling temperature of the endings", ENDINGS, bounds=TEMPERATURE)] = 1.2
    top_p: Annotated[float, flag("nucleus sampling of the endings", ENDINGS, bounds=Bounds(gt=0, le=1))] = 0.95
    max_tokens: Annotated[int, flag("longest ending, in tokens", ENDINGS, bounds=TOKENS)] = 150
    extra_body: Annotated[str | None, flag(EXTRA_BODY_HELP.format(what="generation"), ENDINGS,
                                           metavar="JSON")] = None
    # adaptive endings (docs/metrics.md 1.7): on with --target-half-width
    target_half_width: Annotated[float | None, flag(
        "adaptive endings: draw a position's endings in rounds of --round-endings until the 95% (Wilson) "
        "interval of its no-rate is at most this half-width, or --max-endings are drawn; needs --seed. 0.04 "
        "keeps every story statistic inside its fixed-100 interval in >= 95% of simulated stories; looser "
        "targets save more and bias the mean NR up; not with --endings (default: off, --endings exactly; "
        "docs/metrics.md 1.7)", ENDINGS,
        bounds=Bounds(gt=0, lt=0.5))] = None
    round_endings: Annotated[int, flag("adaptive endings: endings per round, the first included (not given: "
                                       "--max-endings if that is smaller; ignored, and said, without a target)",
                                       ENDINGS, bounds=ENDINGS_COUNT)] = 20
    max_endings: Annotated[int, flag("adaptive endings: most endings a position gets (the paper's n; "
                                     "ignored, and said, without a target)",
                                     ENDINGS, bounds=ENDINGS_COUNT)] = 100
    seed: Annotated[int | None, flag(
        "sampling seed of the generation requests (each position's is derived from it: --seed-scheme). Give "
        "it for reproducible runs: seeded, a run through faults, retries, kills and resumes is byte-identical "
        "to a clean one; unseeded, vLLM samples a retried request anew (default: none)", ENDINGS,
        bounds=Bounds(ge=0))] = None
    seed_scheme: Annotated[str, flag(
        "position: each position's generation request is seeded from --seed and the story text it is asked "
        "to continue, so neighbouring positions draw independent endings (docs/metrics.md 1.2-1.3); run: "
        "every position's request is seeded with --seed itself, as releases before 2026-12-07 did, so their "
        "ending i shared a random stream: give it to reuse the cached endings of a seeded run those releases "
        "made (unseeded runs are the same either way)", ENDINGS, choices=SEED_SCHEMES)] = "position"
    # judging (000, App. C.5)
    judge_temperature: Annotated[float, flag("judge temperature", JUDGING, bounds=TEMPERATURE)] = 0.0
    judge_max_tokens: Annotated[int, flag("longest verdict, in tokens", JUDGING, bounds=TOKENS)] = 10
    judge_extra_body: Annotated[str | None, flag(EXTRA_BODY_HELP.format(what="judge"), JUDGING,
                                                 metavar="JSON")] = None
    judge_constraint: Annotated[str, flag(
        "none: free answers, as in the paper; choice: the judge may only answer Y or N (vLLM structured "
        "outputs; a server that refuses them gets free answers, said and recorded); logprobs: Y or N by the "
        "first token's Y-vs-N probability (for weak judges)", JUDGING,
        metavar="none|choice|logprobs")] = "none"
    continuation_words: Annotated[int, flag("the continuation shown to the judge is cut to this many words",
                                            JUDGING, bounds=Bounds(ge=1))] = 2000
    judge_batch: Annotated[str, flag(
        "auto: send a position's judge prompts as one /v1/completions request when the judge server renders "
        "its chat template for us and the prompts' token ids equal the chat endpoint's (vLLM; checked at the "
        "start), else one chat request per ending; on: require it; off: one chat request per ending. Same "
        "verdicts, cache keys and records either way (docs/cost.md)", JUDGING, metavar="auto|on|off")] = "auto"
    # corpus and positions (000, App. C.2–C.3)
    min_words: Annotated[int, flag("skip stories with fewer words", CORPUS, bounds=Bounds(ge=0))] = 500
    max_words: Annotated[int, flag("skip stories with more words", CORPUS, bounds=Bounds(ge=0))] = 5000
    min_anchor_words: Annotated[int, flag("skip positions whose last sentence has fewer words", CORPUS,
                                          bounds=Bounds(ge=0))] = 10
    pct_min: Annotated[float, flag("keep positions with at least this share of the story's tokens revealed",
                                   CORPUS, bounds=Bounds(ge=0, le=1))] = 0.10
    pct_max: Annotated[float, flag("… and at most this share", CORPUS, bounds=Bounds(ge=0, le=1))] = 0.99
    tokenizer: Annotated[str, flag(
        "token counts for pct: 'server' (its /tokenize), 'words', or a tokenizer.json path", CORPUS)] = "server"
    max_model_len: Annotated[int | None, flag(
        "generation context, in tokens: positions whose prompt cannot fit are skipped (default: as the server "
        "reports it: vLLM's /tokenize, llama.cpp's /v1/models meta.n_ctx)", SERVERS, bounds=Bounds(ge=1))] = None
    # concurrency: requests in flight per lane (the paper's batch sizes)
    gen_concurrency: Annotated[int, flag("generation requests in flight (per replica)", CONCURRENCY,
                                          bounds=Bounds(ge=1))] = 64
    judge_concurrency: Annotated[int, flag("judge requests in flight (per replica)", CONCURRENCY,
                                            bounds=Bounds(ge=1))] = 512
    tokenize_concurrency: Annotated[int, flag("tokenize requests in flight (per replica)", CONCURRENCY,
                                               bounds=Bounds(ge=1))] = 64
    warm_judge: Annotated[bool, flag("send one judge request per position first to warm the prefix cache",
                                     CONCURRENCY)] = True
    shard: Annotated[str | None, flag(
        "I/N: score only shard I (0-based) of N of the stories; N processes sharing one --cache (on one "
        "machine; several machines: a local cache each, then `cache merge`) split a corpus, then a run without "
        "--shard writes the full outputs from the cache", CONCURRENCY)] = None
    # answer checks: when the models are not doing the task (core/pipelines/score/watch.py)
    keep_going: Annotated[bool, flag(
        "score on when the first verdicts show that the judge is not answering Y or N (see --stop-after)",
        CHECKS)] = False
    stop_after: Annotated[int, flag(
        "the early stop decides once this many verdicts are in, and again at every position after", CHECKS,
        bounds=Bounds(ge=1))] = 200
    stop_malformed_share: Annotated[float, flag(
        "stop early when at least this share of the verdicts so far is neither Y nor N", CHECKS, bounds=SHARE)] = 0.8
    warn_malformed_share: Annotated[float, flag(
        "warn at the end when more than this share of the verdicts is malformed or empty, of the endings is "
        "empty, or looks like a reasoning trace", CHECKS, bounds=SHARE)] = 0.05
    warn_constant_share: Annotated[float, flag(
        "warn when the judge gives one letter to at least this share of the run's verdicts, or of a story's",
        CHECKS, bounds=SHARE)] = 0.98
    warn_cut_share: Annotated[float, flag("warn when more than this share of the endings is cut at --max-tokens",
                                          CHECKS, bounds=SHARE)] = 0.5
    warn_identical_share: Annotated[float, flag(
        "warn when more than this share of the positions has n identical endings (temperature or seed not "
        "honoured)", CHECKS, bounds=SHARE)] = 0.1
    # reliability
    timeout: Timeout = 600.0
    retries: Retries = 8
    retry_seconds: RetrySeconds = 1800.0
    # storage and outputs
    cache: CachePath = None
    cache_max_gb: CacheMaxGB = None
    save_texts: Annotated[bool, flag("also write texts.jsonl with every ending and verdict", OUTPUTS)] = False
    progress: Progress = True
    # M4 of ../shared/reviews/external-servers-2026-12-02.md: a slow server's hour, said at its start
    long_run_seconds: Annotated[float, flag(
        "with the progress bar: a run expected to take longer than this many seconds is told, once its first "
        "answers are in, what to lower (0: never)", OUTPUTS, bounds=Bounds(ge=0))] = 3600.0
    report: Annotated[bool, flag("write report.md, tables and figures at the end", OUTPUTS)] = True
    gpu_hour_usd: Annotated[float | None, flag("price of a GPU-hour, for the report's cost line",
                                               OUTPUTS, bounds=Bounds(ge=0))] = None
    # a hosted API bills tokens, not GPU-hours (estimate's money where no GPU-hour price applies)
    input_usd_per_mtok: Annotated[float | None, flag(
        "price of a million prompt tokens sent, for estimate's cost of a hosted API", OUTPUTS,
        bounds=Bounds(ge=0))] = None
    output_usd_per_mtok: Annotated[float | None, flag(
        "price of a million generated tokens, for estimate's cost of a hosted API", OUTPUTS,
        bounds=Bounds(ge=0))] = None
    refresh: Annotated[str | None, flag(
        "ask again the answers of a role that the cache already holds, and write the new ones over them: "
        "generation (the endings), judge (the verdicts) or all; for a setup fixed after it answered badly "
        "(every cached answer is otherwise replayed as it is). Records this run writes are not asked again",
        OUTPUTS, choices=REFRESH)] = None
    # curve statistics (docs/metrics.md 1.4): help and defaults are CurveSettings'
    window: Window = _CURVE.window
    thresholds: Thresholds = _CURVE.thresholds
    late_threshold: LateThreshold = _CURVE.late_threshold
    retention_window: RetentionWindow = _CURVE.retention_window
    interval_resamples: IntervalResamples = _CURVE.interval_resamples
    interval_seed: IntervalSeed = _CURVE.interval_seed

    @classmethod
    def complete(cls, data: dict[str, Any], given: set[str]) -> None:
        """Adaptive endings' settings given together (docs/metrics.md 1.7, docs/reliability.md
        "Inputs and settings"): --endings with a target would be ignored, so it is refused;
        a round or maximum without a target is ignored, and said; without --round-endings the
        round is at most --max-endings; a target no position can meet before --max-endings
        is said (every position gets the maximum, as a fixed run)."""
        adaptive = data.get("target_half_width") is not None
        if adaptive and "endings" in given:
            raise ConfigError("endings: not with --target-half-width, which draws each position's endings in "
                              "rounds of --round-endings (default 20) up to --max-endings (default 100): give "
                              "--max-endings for the most a position gets, or --endings alone for exactly N")
        if not adaptive:
            ignored = [f"--{n.replace('_', '-')}" for n in ("round_endings", "max_endings") if n in given]
            if ignored:
                _say(f"{' and '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} ignored without "
                     "--target-half-width (adaptive endings); each position gets --endings "
                     f"({data.get('endings', 100)}) endings")
            return
        default_round = cls.__struct_defaults__[cls.__struct_fields__.index("round_endings")]
        if "round_endings" not in given and isinstance(m := data.get("max_endings"), int) and 1 <= m < default_round:
            data["round_endings"] = m  # the default round, 20, is at most the maximum given
        _check_target_reachable(data, default_round)

    def __post_init__(self) -> None:
        self.check_declared()  # every numeric field within its declared Bounds
        self.expand_paths()
        check = self.check
        check(self.judge_batch in ("auto", "on", "off"), "judge_batch", "auto, on or off")
        check(self.seed_scheme in SEED_SCHEMES, "seed_scheme", " or ".join(SEED_SCHEMES))
        check(self.refresh in (None, *REFRESH), "refresh", " or ".join(REFRESH))
        check(self.min_words <= self.max_words, "min_words", f"0 <= min-words <= max-words ({self.max_words})")
        check(self.pct_min <= self.pct_max, "pct_min", "0 <= pct-min <= pct-max <= 1")
        check(self.judge_constraint in ("none", "choice", "logprobs"), "judge_constraint",
              "'none', 'choice' or 'logprobs'")
        extra_body(self.extra_body, f"{self.flag_prefix}extra-body")  # a ConfigError naming it, before any request
        extra_body(self.judge_extra_body, f"{self.flag_prefix}judge-extra-body")
        if self.target_half_width is not None:
            check(self.round_endings <= self.max_endings, "round_endings",
                  f"at most --max-endings ({self.max_endings})")
            # unseeded, every round would be the same request (the same cache key): the
            # rounds are told apart by their seeds (core/llm/choices.py `chunk`)
            check(self.seed is not None, "seed", "a seed with --target-half-width (each round is seeded "
                  "with the position's seed + r * round-endings)")
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

    def refresh_roles(self) -> tuple[str, ...]:
        """The engine roles --refresh asks again."""
        return refresh_roles(self.refresh, ("generation", "judge"))

    @property
    def adaptive(self) -> bool:
        """Adaptive endings (docs/metrics.md 1.7): rounds until a target, not --endings exactly."""
        return self.target_half_width is not None

    def endings_per_request(self) -> int:
        """The n of a generation request: --endings, or a round's with adaptive endings."""
        return self.round_endings if self.adaptive else self.endings

    def curve_settings(self):
        return make_curve_settings(self.window, self.thresholds, self.late_threshold, self.retention_window,
                                   interval_resamples=self.interval_resamples, interval_seed=self.interval_seed)


def _say(message: str) -> None:
    """A warning about the settings, on stderr as the run's warnings are."""
    print(f"warning: {message}", file=sys.stderr)


def _check_target_reachable(data: dict[str, Any], default_round: int) -> None:
    """A warning when no position can stop before --max-endings: the narrowest 95 %
    (Wilson) interval after any round short of the maximum (all endings no's, or none)
    is wider than the target, so every position gets --max-endings, as --endings would."""
    from tension.kernels.stopping import round_ends, wilson_half_width

    w, r, m = data.get("target_half_width"), data.get("round_endings", default_round), data.get("max_endings", 100)
    if not (isinstance(w, (int, float)) and isinstance(r, int) and isinstance(m, int)) or not 0 < w < 0.5 \
            or not 1 <= r <= m:
        return  # a bad value is __post_init__'s to name
    if any(float(wilson_half_width(n, 0)) <= w + 1e-12 for n in round_ends(r, m)[:-1]):
        return
    need = next(n for n in range(1, 10**6) if float(wilson_half_width(n, 0)) <= w + 1e-12)
    _say(f"--target-half-width {w:g} cannot be met before --max-endings ({m}): a 95% interval is that narrow "
         f"only from {need} endings on, at the end of a round before the last (rounds of {r}), so every "
         f"position gets {m} endings, as --endings {m} gives; for a target that stops positions early, "
         f"--max-endings must exceed both {need} and --round-endings ({r})")


def make_curve_settings(window, thresholds, late_threshold, retention_window, flag_prefix: str = "", *,
                        interval_resamples: int = _CURVE.interval_resamples,
                        interval_seed: int = _CURVE.interval_seed):
    """CurveSettings, with a bad value reported as a ConfigError naming the setting
    (``flag_prefix="--"`` names it as a flag)."""
    return build_settings(CurveSettings, flag_prefix, window=window, thresholds=tuple(thresholds),
                          late_threshold=late_threshold, retention_window=retention_window,
                          interval_resamples=interval_resamples, interval_seed=interval_seed)


def load_config(path: str | os.PathLike | None, overrides: dict[str, Any],
                fallback: dict[str, Any] | None = None) -> ScoreConfig:
    """Defaults ← ``fallback`` (e.g. a profile, or the running embedded server) ←
    TOML file ← flags (``overrides``: flags the user gave, not None)."""
    return load_settings(ScoreConfig, path, overrides, fallback)
