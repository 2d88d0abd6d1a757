"""Settings: one msgspec Struct per verb that talks to servers, with the paper's
defaults, read from defaults < a TOML --config file < flags."""

from tension.core.config.fairplay import FairPlayConfig, load_fairplay_config
from tension.core.config.generate import GenerateConfig
from tension.core.config.score import (API_KEY_ENV, ScoreConfig, config_file_keys, load_config,
                                       make_curve_settings, read_config_file)

__all__ = ["API_KEY_ENV", "ScoreConfig", "GenerateConfig", "FairPlayConfig", "load_config", "load_fairplay_config",
           "config_file_keys", "make_curve_settings", "read_config_file"]
