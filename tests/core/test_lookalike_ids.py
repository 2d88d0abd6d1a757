"""Ids that look the same in every table are one id (issue 36 N2; docs/reliability.md
"Inputs and settings"): equal after Unicode normalisation (NFC/NFD) or trimming,
they are a duplicate-id error naming both lines, in every input read by line."""

from __future__ import annotations

import json
import unicodedata

import pytest

from tension.core.inputs.corpus import read_corpus

TEXT = "One sentence here. " * 30

PAIRS = [
    (unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café"), True),
    (unicodedata.normalize("NFD", "café"), unicodedata.normalize("NFC", "café"), True),
    ("a", "a ", True),
    (" a", "a", True),
    ("a", "a", False),  # the plain duplicate, said as before
]


@pytest.mark.parametrize(("first", "second", "lookalike"), PAIRS, ids=[repr(p[:2]) for p in PAIRS])
def test_ids_equal_after_normalisation_or_trimming_are_a_duplicate_naming_both_lines(tmp_path, first, second,
                                                                                    lookalike):
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"id": i, "text": TEXT}) + "\n" for i in (first, "other", second)),
                 encoding="utf-8")
    c = read_corpus(p, min_words=0)
    assert [s.id for s in c.stories] == [first, "other"]
    assert len(c.errors) == 1
    want = f"{p}:3 field `id`: duplicate id {second!r} (first on line 1"
    if lookalike:
        want += f" as {first!r}: the same id after Unicode normalisation (NFC) and trimming)"
    else:
        want += ")"
    assert str(c.errors[0]) == want


def test_ideas_with_lookalike_ids_are_a_duplicate_too(tmp_path):
    from tension.core.inputs.ideas import read_ideas

    p = tmp_path / "ideas.jsonl"
    p.write_text("".join(json.dumps({"id": i, "idea": "A keeper finds a letter."}) + "\n" for i in ("lamp", "lamp ")))
    ideas, errors = read_ideas(p)
    assert len(ideas) == 1
    assert [str(e) for e in errors] == [f"{p}:2 field `id`: duplicate id 'lamp ' (first on line 1 as 'lamp': the "
                                        "same id after Unicode normalisation (NFC) and trimming)"]
