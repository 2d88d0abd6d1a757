"""File names from ids: one rule for the report's curves and the fair-play plots."""

from __future__ import annotations

from tension.core.reports.filenames import MAX_NAME, safe_filename


def test_a_safe_id_is_its_own_file_name():
    assert safe_filename("story-001_v2.b") == "story-001_v2.b"


def test_only_safe_characters_are_kept_and_a_cleaned_name_gets_a_hash():
    name = safe_filename("story 1/ä.v2")
    assert name.startswith("story_1__.v2-") and len(name) == len("story_1__.v2-") + 8
    assert safe_filename("../etc").startswith("_etc-")  # never a hidden file, never a path


def test_long_and_empty_names():
    assert len(safe_filename("x" * 300)) == MAX_NAME
    assert safe_filename("x" * 300) != safe_filename("x" * 301)
    assert safe_filename("") != ""


def test_ids_that_clean_alike_get_different_files():
    # the user's path: report.md showed one image for three stories
    from tension.core.reports.filenames import unique_filenames  # new with issue 16

    ids = ["a/b", "a_b", "a:b", "a b", "A_B", "a\\b", "a_b-" + safe_filename("a/b")[4:]]
    names = unique_filenames(ids)
    assert len({n.casefold() for n in names}) == len(ids)
    assert unique_filenames(["story-1", "story-2"]) == ["story-1", "story-2"]
