"""Modules export what their __all__ names, nothing public of theirs is left out, and the names
that moved are still importable where they were."""

from __future__ import annotations

import importlib
import inspect

import pytest


@pytest.mark.parametrize("module", ["tension.core.inputs.ideas", "tension.core.inputs.whodunits",
                                    "tension.core.inputs.readers", "tension.core.inputs.jsonl",
                                    "tension.core.inputs.corpus", "tension.core.formats",
                                    "tension.core.reports.filenames", "tension.core.serving.settings",
                                    "tension.core.serving.install", "tension.core.serving.embedded",
                                    "tension.core.prompts.fill"])
def test_exported_members(module):
    mod = importlib.import_module(module)
    for name in mod.__all__:
        assert hasattr(mod, name), name
    public = {n for n, v in vars(mod).items() if not n.startswith("_") and (inspect.isclass(v) or inspect.isfunction(v))
              and v.__module__ == module}
    assert public <= set(mod.__all__), public - set(mod.__all__)


def test_the_readers_checks_are_importable_from_fairplay_metrics():
    from tension.core.inputs import readers
    from tension.core.reports import fairplay_metrics as fm

    for name in ("ReaderRecord", "ScoredWhodunit", "check_record", "read_readers", "read_actual", "NOT_SURE"):
        assert getattr(fm, name) is getattr(readers, name)


def test_embedded_still_offers_the_install_steps_and_settings():
    from tension.core.serving import embedded, install, settings

    assert embedded.install_command is install.install_command
    assert embedded.ensure_installed is install.ensure_installed
    assert embedded.EmbeddedSettings is settings.EmbeddedSettings and embedded.paths is settings.paths


def test_one_placeholder_filler_under_its_old_names():
    from tension.core.prompts import fill, generate, readers

    assert generate.render_whodunit is fill.render_whodunit and readers.fill is fill.fill
    assert readers.story_join is fill.story_join
