"""Settings: paper defaults < TOML file < flags (docs/metrics.md 1.1-1.3) for `score`, and
the parts every settings Struct shares (the loader, the value check, the public record)."""

from __future__ import annotations

import pytest

import tension.core.config as config_pkg
from tension.core.config import (
    API_KEY_ENV,
    FairPlayConfig,
    GenerateConfig,
    ScoreConfig,
    build_settings,
    load_config,
    load_fairplay_config,
    load_settings,
    public,
)
from tension.core.config import score as config_mod
from tension.core.config import settings as settings_mod
from tension.core.errors import ConfigError, TensionError
from tension.kernels.settings import CurveSettings, FairPlaySettings


@pytest.fixture(autouse=True)
def _no_key_in_env(monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)


def _toml(tmp_path, text: str):
    p = tmp_path / "tension.toml"
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.parametrize("module", [config_mod, config_pkg, settings_mod], ids=lambda m: m.__name__)
def test_all_is_exported(module):
    for name in module.__all__:
        assert hasattr(module, name), name


def test_api_key_env_name():
    assert API_KEY_ENV == "OPENAI_API_KEY"


@pytest.mark.parametrize("cfg", [ScoreConfig(), load_config(None, {})], ids=["struct", "load_config"])
def test_defaults_are_the_papers(cfg):
    # 000, App. C.4: ending generation
    assert cfg.endings == 100
    assert cfg.temperature == 1.2
    assert cfg.top_p == 0.95
    assert cfg.max_tokens == 150
    assert cfg.reasoning_off is True
    # 000, App. C.5: judging
    assert cfg.judge_temperature == 0.0
    assert cfg.judge_max_tokens == 10
    assert cfg.continuation_words == 2000
    # 000, App. C.2-C.3: corpus and positions
    assert cfg.min_words == 500
    assert cfg.max_words == 5000
    assert cfg.min_anchor_words == 10
    assert cfg.pct_min == 0.10
    assert cfg.pct_max == 0.99
    # the paper's batch sizes
    assert cfg.gen_concurrency == 64
    assert cfg.judge_concurrency == 512
    # docs/metrics.md 1.4
    assert cfg.window == 5
    assert tuple(cfg.thresholds) == (30.0, 60.0, 120.0)
    assert cfg.late_threshold == 0.80
    assert cfg.retention_window == 10
    assert cfg.seed is None and cfg.api_key is None


def test_toml_overrides_defaults(tmp_path):
    p = _toml(tmp_path, 'endings = 20\ntemperature = 0.7\nmodel = "qwen"\nthresholds = [45.0]\n')
    cfg = load_config(p, {})
    assert cfg.endings == 20
    assert cfg.temperature == 0.7
    assert cfg.model == "qwen"
    assert tuple(cfg.thresholds) == (45.0,)
    # untouched keys keep the defaults
    assert cfg.top_p == 0.95 and cfg.max_tokens == 150


def test_overrides_beat_toml_and_none_means_not_given(tmp_path):
    p = _toml(tmp_path, "endings = 20\ntop_p = 0.5\nmax_tokens = 99\n")
    cfg = load_config(p, {"endings": 7, "top_p": None, "judge_max_tokens": 3})
    assert cfg.endings == 7  # flag beats file
    assert cfg.top_p == 0.5  # None: the flag was not given, the file stands
    assert cfg.max_tokens == 99
    assert cfg.judge_max_tokens == 3  # flag beats default


def test_overrides_without_file():
    cfg = load_config(None, {"endings": 3, "seed": 42, "model": None})
    assert (cfg.endings, cfg.seed, cfg.model) == (3, 42, None)


def test_dashed_keys_in_toml(tmp_path):
    p = _toml(tmp_path, "min-words = 100\nmax-words = 900\njudge-max-tokens = 5\npct-min = 0.2\n")
    cfg = load_config(p, {"max_words": 1000})
    assert (cfg.min_words, cfg.max_words, cfg.judge_max_tokens, cfg.pct_min) == (100, 1000, 5, 0.2)


def test_integer_in_toml_for_a_float_setting(tmp_path):
    cfg = load_config(_toml(tmp_path, "temperature = 1\n"), {})
    assert cfg.temperature == 1.0


@pytest.mark.parametrize("key", ["endigns", "not-a-key"])
def test_unknown_key_names_file_and_key(tmp_path, key):
    p = _toml(tmp_path, f"{key} = 3\n")
    with pytest.raises(ConfigError) as ei:
        load_config(p, {})
    msg = str(ei.value)
    assert str(p) in msg
    assert f"unknown key `{key.replace('-', '_')}`" in msg
    assert "endings" in msg  # the known keys are listed


def test_unknown_table_is_an_unknown_key(tmp_path):
    p = _toml(tmp_path, "[server]\nurl = 'x'\n")
    with pytest.raises(ConfigError, match="unknown key `server`"):
        load_config(p, {})


def test_unknown_override_is_a_config_error():
    with pytest.raises(ConfigError, match="nope"):
        load_config(None, {"nope": 1})


@pytest.mark.parametrize(
    ("key", "value", "flag"),
    [
        ("endings", 0, "endings"),
        ("top_p", 2, "top-p"),
        ("top_p", 0, "top-p"),
        ("temperature", -0.1, "temperature"),
        ("max_tokens", 0, "max-tokens"),
        ("judge_max_tokens", 0, "judge-max-tokens"),
        ("continuation_words", 0, "continuation-words"),
        ("min_words", 6000, "min-words"),  # above max-words
        ("pct_min", 0.995, "pct-min"),  # above pct-max
        ("judge_concurrency", 0, "judge-concurrency"),
        ("timeout", 0, "timeout"),
        ("retries", 0, "retries"),
        ("base_url", "localhost:8000", "base-url"),
        ("judge_base_url", "ftp://x", "judge-base-url"),
    ],
)
def test_bad_value_names_the_flag(tmp_path, key, value, flag):
    with pytest.raises(ConfigError) as ei:
        load_config(None, {key: value})
    msg = str(ei.value)
    assert msg.startswith(f"{flag}: expected"), msg
    assert repr(value) in msg
    # the same from the file
    p = _toml(tmp_path, f"{key} = {value!r}\n".replace("'", '"'))
    with pytest.raises(ConfigError) as ei2:
        load_config(p, {})
    assert f"{flag}: expected" in str(ei2.value)


def test_bad_value_in_struct_directly():
    with pytest.raises(ConfigError, match=r"^endings: expected an integer >= 1, got 0$"):
        ScoreConfig(endings=0)
    with pytest.raises(ConfigError, match=r"^top-p: expected a number in \(0, 1\], got 2$"):
        ScoreConfig(top_p=2)


def test_wrong_type_in_toml_names_file_and_field(tmp_path):
    p = _toml(tmp_path, 'endings = "many"\n')
    with pytest.raises(ConfigError) as ei:
        load_config(p, {})
    msg = str(ei.value)
    assert msg.startswith(f"{p}: ")
    assert "endings" in msg and "int" in msg


def test_invalid_toml_and_missing_file(tmp_path):
    p = _toml(tmp_path, "endings = = 3\n")
    with pytest.raises(ConfigError, match="not valid TOML") as ei:
        load_config(p, {})
    assert str(p) in str(ei.value)
    missing = tmp_path / "missing.toml"
    with pytest.raises(ConfigError, match="cannot read") as ei:
        load_config(missing, {})
    assert str(missing) in str(ei.value)
    assert issubclass(ConfigError, TensionError)


# ------------------------------------------------------------------- API key


def test_api_key_from_env_wins(tmp_path, monkeypatch):
    p = _toml(tmp_path, 'api_key = "sk-from-file"\n')
    cfg = load_config(p, {})
    assert cfg.resolved_api_key() == "sk-from-file"
    monkeypatch.setenv(API_KEY_ENV, "sk-from-env")
    assert cfg.resolved_api_key() == "sk-from-env"
    assert load_config(None, {"api_key": "sk-flag"}).resolved_api_key() == "sk-from-env"


def test_no_api_key_anywhere():
    cfg = ScoreConfig()
    assert cfg.resolved_api_key() is None
    assert cfg.public()["api_key"] is None


@pytest.mark.parametrize("where", ["config", "env", "both"])
def test_public_never_contains_the_key(monkeypatch, where):
    cfg = ScoreConfig(api_key="sk-config-secret" if where != "env" else None)
    if where != "config":
        monkeypatch.setenv(API_KEY_ENV, "sk-env-secret")
    pub = cfg.public()
    assert pub["api_key"] == "(set)"
    flat = repr(pub)
    assert "secret" not in flat
    # everything else is there, as plain data
    assert pub["endings"] == 100 and pub["model"] is None
    assert set(pub) == set(ScoreConfig.__struct_fields__)
    # public() does not change the config itself
    if where != "env":
        assert cfg.api_key == "sk-config-secret"


@pytest.mark.parametrize(
    ("key", "value", "flag"),
    [
        ("window", 4, "window"),  # docs/metrics.md 1.4: an odd window >= 1
        ("window", 0, "window"),
        ("retention_window", 0, "retention-window"),
        ("thresholds", [200.0], "thresholds"),
        ("judge_temperature", -0.5, "judge-temperature"),
    ],
)
def test_bad_curve_and_judge_values_are_config_errors(key, value, flag):
    with pytest.raises(ConfigError) as ei:
        load_config(None, {key: value})
    assert flag in str(ei.value)


# ------------------------------------------------------------------- shared parts


@pytest.mark.parametrize(("make", "message"), [
    (lambda: ScoreConfig(endings=0), "endings: expected an integer >= 1, got 0"),  # score: the key's name
    (lambda: GenerateConfig(beats=0), "--beats: expected an integer >= 1, got 0"),  # generate: the flag's
    (lambda: FairPlayConfig(k=0), "k: expected an integer >= 1, got 0"),
    (lambda: FairPlayConfig(max_suspects=1), "max-suspects: expected an integer >= 2, got 1"),
    (lambda: GenerateConfig(base_url="gpu:1"), "--base-url: expected an http(s) URL, got 'gpu:1'"),
])
def test_each_struct_names_a_bad_value_as_it_always_has(make, message):
    with pytest.raises(ConfigError) as ei:
        make()
    assert str(ei.value) == message


def test_generate_config_file_takes_the_fields_as_keys(tmp_path):
    p = _toml(tmp_path, 'mode = "vanilla"\nmax-tokens = 200\nseed = 3\n')
    cfg = load_settings(GenerateConfig, p, {"seed": 4, "model": None}, fallback={"model": "m", "mode": "beats"})
    assert (cfg.mode, cfg.max_tokens, cfg.seed, cfg.model) == ("vanilla", 200, 4, "m")  # fallback < file < flags
    with pytest.raises(ConfigError, match=r"unknown key `endings` \(known: .*paragraphs"):
        load_settings(GenerateConfig, _toml(tmp_path, "endings = 5\n"), {})


def test_a_table_reads_another_verbs_file(tmp_path):
    p = _toml(tmp_path, 'base_url = "http://h:1"\nendings = 5\n[fairplay]\nk = 3\nreader-max-tokens = 9\n')
    cfg = load_fairplay_config(p, {"k": None})
    assert (cfg.base_url, cfg.k, cfg.reader_max_tokens) == ("http://h:1", 3, 9)  # endings: not fairplay's, ignored
    with pytest.raises(ConfigError, match=r"unknown key `kk` in \[fairplay\]"):
        load_settings(FairPlayConfig, _toml(tmp_path, "[fairplay]\nkk = 3\n"), {}, table="fairplay")
    with pytest.raises(ConfigError, match=r"\[fairplay\] must be a table"):
        load_fairplay_config(_toml(tmp_path, "fairplay = 3\n"), {})


@pytest.mark.parametrize("cfg", [ScoreConfig(api_key="sk-secret"), FairPlayConfig(api_key="sk-secret"),
                                 GenerateConfig(api_key_env="MY_KEY")], ids=lambda c: type(c).__name__)
def test_public_records_whether_a_key_is_set_never_the_key(cfg, monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-secret")
    pub = public(cfg)
    assert pub["api_key"] == "(set)" and "sk-secret" not in repr(pub)
    assert set(pub) == set(type(cfg).__struct_fields__) | {"api_key"}
    assert cfg.public() == pub


def test_generate_reads_its_key_only_from_the_named_variable(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "sk-default")
    assert GenerateConfig(api_key_env="MY_KEY").resolved_api_key() is None
    assert public(GenerateConfig(api_key_env="MY_KEY"))["api_key"] is None
    assert GenerateConfig().resolved_api_key() == "sk-default"


@pytest.mark.parametrize(("struct", "values", "message"), [
    (CurveSettings, {"window": 4}, "--window: expected an odd integer >= 1, got 4"),
    (FairPlaySettings, {"early_steps": (0,)}, "--early-steps: expected paragraph numbers >= 1, got (0,)"),
])
def test_build_settings_names_the_bad_setting_as_a_flag(struct, values, message):
    with pytest.raises(ConfigError) as ei:
        build_settings(struct, "--", **values)
    assert str(ei.value) == message
    assert build_settings(struct).__class__ is struct


def test_kernel_settings_are_the_kernels_own():
    from tension.kernels import curves, fairplay

    assert curves.CurveSettings is CurveSettings and fairplay.FairPlaySettings is FairPlaySettings


def test_score_curve_keys_default_to_the_curve_settings():
    d, c = ScoreConfig(), CurveSettings()
    assert (d.window, d.thresholds, d.late_threshold, d.retention_window) == (
        c.window, c.thresholds, c.late_threshold, c.retention_window)
