"""The paper's sentence splitter and candidate positions (docs/metrics.md 1.1)."""

from __future__ import annotations

import pytest

from tension.core.inputs import segment
from tension.core.inputs.segment import (
    MIN_SENT_WORDS,
    Candidate,
    candidates,
    continuation_text,
    prefix_text,
    split_sentences,
    story_text,
)


def test_all_is_exported():
    for name in segment.__all__:
        assert hasattr(segment, name), name


def test_min_sent_words_is_the_papers():
    assert MIN_SENT_WORDS == 10


# ----------------------------------------------------------------- split_sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # plain terminal punctuation
        ("It was late. The door opened. Nobody came in.",
         ["It was late.", "The door opened.", "Nobody came in."]),
        # question and exclamation marks, also doubled
        ("Who is there? Nobody! Really?! Yes.", ["Who is there?", "Nobody!", "Really?!", "Yes."]),
        # straight closing double quote stays with its sentence
        ('He said, "Go." Then he left.', ['He said, "Go."', "Then he left."]),
        # curly closing double quote U+201D
        ("He said, \u201cGo.\u201d Then he left.", ["He said, \u201cGo.\u201d", "Then he left."]),
        # curly closing single quote U+2019
        ("She whispered \u2018stay.\u2019 He stayed.", ["She whispered \u2018stay.\u2019", "He stayed."]),
        # closing paren, and several closing marks in a row
        ("He left (for good.) She cried.", ["He left (for good.)", "She cried."]),
        ('"It ended (at last.)" They slept.', ['"It ended (at last.)"', "They slept."]),
        # the next sentence may open with a quote, a paren or a bracket
        ("Stop. \u201cWhy?\u201d he asked.", ["Stop.", "\u201cWhy?\u201d he asked."]),
        ('Stop. "Why?" he asked.', ["Stop.", '"Why?" he asked.']),
        ("Stop. (He did.) Fine.", ["Stop.", "(He did.)", "Fine."]),
        # ... but "]" is not in the closing class, so no boundary after "[Silence.]"
        ("Stop. [Silence.] Fine.", ["Stop.", "[Silence.] Fine."]),
        # the paper's rule splits after an abbreviation followed by a capital: the contract
        ("Mr. Smith went home. He slept.", ["Mr.", "Smith went home.", "He slept."]),
        ("Dr. Watson arrived.", ["Dr.", "Watson arrived."]),
        # no split before a lowercase letter or a digit
        ("It was late. and dark.", ["It was late. and dark."]),
        ("It cost 3 dollars. 4 more later.", ["It cost 3 dollars. 4 more later."]),
        ("e.g. this stays together.", ["e.g. this stays together."]),
        # no split without whitespace after the punctuation
        ("One.Two. Three.", ["One.Two.", "Three."]),
        ("Hi.\u201cQuote\u201d", ["Hi.\u201cQuote\u201d"]),
        # an opening curly quote is not a closing mark
        ("Hi \u201cthere. You", ["Hi \u201cthere.", "You"]),
        # newlines and paragraph breaks are whitespace between sentences
        ("One.\nTwo.\n\nThree.", ["One.", "Two.", "Three."]),
        ("First paragraph ends.\n\n\tSecond one starts.", ["First paragraph ends.", "Second one starts."]),
        # a newline without terminal punctuation is not a boundary
        ("A line\nwith no stop\n\nAnother. Yes.", ["A line\nwith no stop\n\nAnother.", "Yes."]),
        # trailing text without punctuation is the last sentence
        ("It ended. And then", ["It ended.", "And then"]),
        ("no punctuation at all", ["no punctuation at all"]),
        # surrounding whitespace is dropped
        ("   Lead. Trail.   \n", ["Lead.", "Trail."]),
        # a colon or semicolon is not terminal
        ("He said: Go; Now. Done.", ["He said: Go; Now.", "Done."]),
        # ellipsis: the last dot is the boundary
        ("Wait... Then go.", ["Wait...", "Then go."]),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize("text", ["", " ", "\n\n\t  "])
def test_split_empty_or_blank_text(text):
    assert split_sentences(text) == []


def test_whitespace_between_sentences_is_dropped_and_punctuation_kept():
    text = "Alpha one.   \n\n  Beta two!\t\tGamma three?  Delta"
    out = split_sentences(text)
    assert out == ["Alpha one.", "Beta two!", "Gamma three?", "Delta"]
    for s in out:
        assert s == s.strip()
    # nothing but the whitespace between sentences is lost
    assert " ".join(out) == " ".join(text.split())


def test_boundary_regex_is_the_papers():
    pat = segment.SENTENCE_BOUNDARY.pattern
    # closing quotes/parens and the opening class of docs/metrics.md 1.1
    for ch in ('"', "\u201d", "\u2019", ")"):
        assert segment.SENTENCE_BOUNDARY.search(f"a.{ch} B"), ch
    for ch in ("A", "Z", "\u201c", '"', "(", "["):
        assert segment.SENTENCE_BOUNDARY.search(f"a. {ch}"), ch
    for ch in ("a", "1", "\u2018", "'", "{", "-"):
        assert not segment.SENTENCE_BOUNDARY.search(f"a. {ch}"), ch
    assert pat.startswith("[.!?]")


# --------------------------------------------------------------------- positions


def _words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n - 1)) + f" {tag}end."


def test_candidates_skip_short_anchors():
    s = [_words(10, "a"), _words(9, "b"), _words(12, "c"), _words(3, "d")]
    got = candidates(s)
    # k=1: anchor s[0] (10 words) kept; k=2: s[1] (9 words) skipped; k=3: s[2] (12) kept.
    assert got == [Candidate(1, s[0]), Candidate(3, s[2])]
    assert all(c.anchor == s[c.k - 1] for c in got)


def test_candidates_never_include_the_whole_story():
    s = [_words(20, "a"), _words(20, "b")]
    # k ranges over 1 .. N-1: the last sentence is never an anchor
    assert [c.k for c in candidates(s)] == [1]


@pytest.mark.parametrize("s", [[], ["Only one sentence with many many many words in it, more than ten."]])
def test_candidates_of_short_stories(s):
    assert candidates(s) == []


def test_candidates_custom_minimum():
    s = ["one two three.", "four five.", "six."]
    assert [c.k for c in candidates(s, min_anchor_words=2)] == [1, 2]
    assert [c.k for c in candidates(s, min_anchor_words=3)] == [1]
    assert candidates(s) == []


def test_candidate_words_are_whitespace_words():
    # punctuation glued to words does not add words; newlines separate words
    anchor = "a,b c\nd\te f g h i j."  # 9 whitespace words
    assert len(anchor.split()) == 9
    assert candidates([anchor, "Next."]) == []
    assert candidates([anchor + " k", "Next."]) == [Candidate(1, anchor + " k")]


def test_prefix_story_and_continuation_text():
    s = ["A b.", "C d!", "E f?"]
    assert prefix_text(s, 0) == ""
    assert prefix_text(s, 2) == "A b. C d!"
    assert story_text(s) == "A b. C d! E f?"
    assert continuation_text(s, 1) == "C d! E f?"
    assert continuation_text(s, 3) == ""


def test_continuation_not_cut_when_at_most_max_words():
    s = ["one  two\nthree.", "four five."]
    # 5 words, limit 5: returned as the plain join, whitespace untouched
    assert continuation_text(s, 0, max_words=5) == "one  two\nthree. four five."


def test_continuation_cut_to_first_max_words_when_longer():
    s = ["one  two\nthree.", "four five."]
    assert continuation_text(s, 0, max_words=4) == "one two three. four"


def test_continuation_default_limit_is_2000_words():
    sents = [" ".join(f"w{j}" for j in range(i * 10, i * 10 + 10)) + "." for i in range(200)]
    assert len(continuation_text(sents, 0).split()) == 2000
    exact = continuation_text(sents, 0)
    assert exact == " ".join(sents)  # exactly 2000 words: unchanged
    longer = sents + ["extra words here."]
    cut = continuation_text(longer, 0)
    assert cut.split() == " ".join(longer).split()[:2000]
    assert cut.endswith("w1999.")


def test_a_long_storys_prefixes_are_counted_in_batches_of_bounded_size():
    # all of a story's prefixes at once are quadratic in its length: a 300,000-word story's took
    # 12 GB and ended the run with a MemoryError (12-07 inputs review)
    from tension.core.pipelines.score.positions import PREFIX_BYTES, prefix_batches

    sents = [f"Sentence number {i} of the long story goes on and on here." for i in range(2000)]
    cands = candidates(sents, 1)
    batches = list(prefix_batches(sents, cands, 1_000_000, 4))
    assert [t for b in batches for t in b] == [prefix_text(sents, c.k) for c in cands]  # every prefix, in order
    assert len(batches) > 1
    assert max(sum(map(len, b)) for b in batches) <= 1_000_000
    # never fewer prefixes a batch than are counted at once (--tokenize-concurrency)
    assert [len(b) for b in prefix_batches(sents, cands, 10, 64)][:-1] == [64] * (len(cands) // 64)
    # a story of ordinary length is counted in one batch, as before
    assert len(list(prefix_batches(sents[:300], candidates(sents[:300], 1), PREFIX_BYTES, 64))) == 1
