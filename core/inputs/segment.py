"""Sentences and positions of a story (docs/metrics.md 1.1; paper 000, App. C.2–C.3)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

__all__ = ["SENTENCE_BOUNDARY", "MIN_SENT_WORDS", "split_sentences", "Candidate", "candidates",
           "prefix_text", "story_text", "continuation_text"]

# The paper's splitter, exactly: terminal punctuation, optional closing quotes or
# parens, whitespace, then an uppercase letter or opening punctuation. The seed's
# `[""\u2019)]` is a straight quote plus U+201D flattened by extraction.
SENTENCE_BOUNDARY = re.compile(r"[.!?][\"\u201d\u2019)]*\s+(?=[A-Z\u201c\"(\[])")
MIN_SENT_WORDS = 10


def split_sentences(text: str) -> list[str]:
    """Sentences keep their punctuation; the whitespace between them is dropped."""
    out: list[str] = []
    start = 0
    for m in SENTENCE_BOUNDARY.finditer(text):
        # The boundary match is punctuation + closing marks + whitespace; the
        # sentence ends after the punctuation and closing marks.
        end = m.start() + len(m.group().rstrip())
        piece = text[start:end].strip()
        if piece:
            out.append(piece)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


class Candidate(msgspec.Struct, frozen=True):
    """A position before the pct filter: the reader has seen s[0:k]."""

    k: int
    anchor: str


def candidates(sentences: Sequence[str], min_anchor_words: int = MIN_SENT_WORDS) -> list[Candidate]:
    """Positions 1 ≤ k ≤ N−1 whose anchor s[k−1] has at least `min_anchor_words` words."""
    return [Candidate(k, sentences[k - 1]) for k in range(1, len(sentences))
            if len(sentences[k - 1].split()) >= min_anchor_words]


def prefix_text(sentences: Sequence[str], k: int) -> str:
    return " ".join(sentences[:k])


def story_text(sentences: Sequence[str]) -> str:
    return " ".join(sentences)


def continuation_text(sentences: Sequence[str], k: int, max_words: int = 2000) -> str:
    """`" ".join(s[k:])`, cut to its first `max_words` whitespace words when longer
    (only then is its whitespace normalised)."""
    text = " ".join(sentences[k:])
    # Splitting at most max_words times gives the same first words without
    # cutting the rest of a long story into a list (a cached rerun does this per position).
    words = text.split(maxsplit=max_words)
    return text if len(words) <= max_words else " ".join(words[:max_words])
