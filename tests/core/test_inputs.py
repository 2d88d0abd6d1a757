"""The input readers' modules export what they name, and nothing public of theirs is left out."""

from __future__ import annotations

import importlib
import inspect

import pytest


@pytest.mark.parametrize("module", ["tension.core.inputs.ideas", "tension.core.inputs.whodunits",
                                    "tension.core.inputs.readers", "tension.core.inputs.jsonl",
                                    "tension.core.inputs.corpus", "tension.core.formats"])
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
