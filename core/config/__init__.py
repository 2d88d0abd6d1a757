"""Settings: one msgspec Struct per verb that talks to servers, with the paper's
defaults, read from defaults < a TOML --config file < flags. Each field's
metadata is its flag's help and group (cli.flags builds the flags from it).

    settings.py   what they share: flag metadata, load_settings, check, public
    score.py      ScoreConfig (score, estimate, bench)
    generate.py   GenerateConfig
    fairplay.py   FairPlayConfig
"""

from tension.core.config.fairplay import FairPlayConfig, load_fairplay_config
from tension.core.config.generate import GenerateConfig
from tension.core.config.score import ScoreConfig, load_config, make_curve_settings
from tension.core.config.settings import (
                                          API_KEY_ENV,
                                          build_settings,
                                          config_file_keys,
                                          load_settings,
                                          public,
                                          read_config_file,
)

__all__ = ["API_KEY_ENV", "ScoreConfig", "GenerateConfig", "FairPlayConfig", "load_config", "load_fairplay_config",
           "load_settings", "config_file_keys", "make_curve_settings", "read_config_file", "public",
           "build_settings"]
