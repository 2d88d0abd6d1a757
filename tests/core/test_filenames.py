"""File names from ids: one rule for the report's curves and the fair-play plots."""

from __future__ import annotations

from tension.core.reports.filenames import MAX_NAME, safe_filename


def test_only_safe_characters_are_kept():
    assert safe_filename("story 1/ä.v2") == "story_1_ä.v2"
    assert safe_filename("../etc") == ".._etc"


def test_long_and_empty_names():
    assert safe_filename("x" * 300) == "x" * MAX_NAME
    assert safe_filename("") == "_"
