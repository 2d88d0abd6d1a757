"""Sentences and positions of a story (docs/metrics.md 1.1; paper 000, App. C.2–C.3).

The paper's splitter ends a sentence at `.`, `!` or `?` (with closing quotes or
parens) followed by whitespace and an ASCII capital or opening punctuation. That
rule is kept exactly for the text it was made for: wherever a story's sentences
begin with `A`–`Z` or `“ " ( [`, the boundaries are the paper's. It is extended
to other scripts (README, "Languages"):

- after the same marks, a sentence may also begin with any uppercase letter
  (Ü, É, Ł, Ж, Σ …) or, in a script without case, any letter (Hebrew, Arabic,
  Devanagari, Hangul, Han, kana, Thai …), or with the opening marks of other
  languages (¿ ¡ « ‹ „ 「 『 …);
- a script's own terminal marks end a sentence the same way: Arabic ؟ and ۔,
  Devanagari । and ॥, Greek ; (U+037E, and `;` after a Greek letter), Armenian ։,
  Ethiopic ።, Hebrew ׃, Khmer ។ ៕, Myanmar ။;
- the ideographic marks 。！？．｡ end a sentence with or without whitespace after
  them (Chinese and Japanese write none), before anything but a closing mark;
- Thai and Lao write no terminal mark: a space between two of their letters ends
  a sentence (their spaces mark sentence and clause ends, not words).

A story read as another language than English (`languages.detect_language`: Russian,
German, French, Spanish, or a script without Latin letters) also gets that language's
rules (`languages.py`): its abbreviations and initials end no sentence (`z. B.`, `M.`,
`Sr.`, `т. е.`), `…` ends one as `...` does, and in Russian, Spanish and French a
sentence ends before a dialogue dash that opens the next turn, not before a narrator's
tag in lower case. A story read as English gets the rules above and nothing more.

Scripts written without spaces get a word count that means something
(`word_count`): a word per 2 Han or kana characters, per 4 Thai, Lao, Khmer or
Myanmar characters; text in other scripts counts whitespace words, as the paper.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence

import msgspec

from tension.core.inputs.languages import (
    DASHES,
    ENGLISH,
    FRENCH,
    GERMAN,
    RUSSIAN,
    SPANISH,
    UNKNOWN_SHARE,
    Language,
    common_share,
    detect_language,
)

__all__ = ["SENTENCE_BOUNDARY", "MIN_SENT_WORDS", "CHARS_PER_WORD", "split_sentences", "word_count",
           "boundary_warning", "Candidate", "candidates", "prefix_text", "story_text", "continuation_text"]

# The paper's splitter, exactly: terminal punctuation, optional closing quotes or
# parens, whitespace, then an uppercase letter or opening punctuation. The seed's
# `[""\u2019)]` is a straight quote plus U+201D flattened by extraction.
SENTENCE_BOUNDARY = re.compile(r"[.!?][\"\u201d\u2019)]*\s+(?=[A-Z\u201c\"(\[])")
MIN_SENT_WORDS = 10

# Terminal marks followed by whitespace, as the paper's `[.!?]`: its own three, then other
# scripts' (Greek question mark, Armenian full stop, Arabic question mark and full stop,
# Devanagari danda and double danda, Ethiopic full stop, Hebrew sof pasuq, Khmer khan and
# bariyoosan, Myanmar section), and `;` only after a Greek letter (Greek's question mark
# as typed: an English `;` is never terminal).
_SPACED_MARK = (r"(?:[.!?\u037e\u0589\u061f\u06d4\u0964\u0965\u1362\u05c3\u17d4\u17d5\u104b]"
                r"|(?<=[\u0370-\u03ff\u1f00-\u1fff]);)")
# The paper's closing marks, German's closing “ and ‘ („…“ ‚…‘), then closing guillemets
# (French writes a space before them).
_CLOSE = r"(?:[\"\u201d\u2019)\u201c\u2018]|[\u00a0\u202f ]?[\u00bb\u203a])"
_SPACED = re.compile(_SPACED_MARK + _CLOSE + r"*\s+(?=\S)")
# The ideographic marks, as a run (！？), then closing brackets and quotes, then any whitespace.
_IDEOGRAPHIC = re.compile(r"[\u3002\uff01\uff1f\uff0e\uff61]+[\u300d\u300f\uff09\u3015\u3011\u3009\u300b"
                          r"\uff63\u201d\u2019\"')\]]*\s*(?=\S)")
_THAI = r"\u0e00-\u0e7f\u0e80-\u0eff"
_THAI_SPACE = re.compile(rf"(?<=[{_THAI}])\s+(?=[{_THAI}])")
_BOUNDARY = re.compile("|".join(f"(?:{p.pattern})" for p in (_SPACED, _IDEOGRAPHIC, _THAI_SPACE)))
# The same with the Unicode ellipsis among the spaced marks, for the languages that take it.
_SPACED_MARK_ELLIPSIS = _SPACED_MARK.replace("[.!?", "[.!?\u2026", 1)
_BOUNDARY_ELLIPSIS = re.compile("|".join(
    f"(?:{p})" for p in (_SPACED_MARK_ELLIPSIS + _CLOSE + r"*\s+(?=\S)", _IDEOGRAPHIC.pattern, _THAI_SPACE.pattern)))
# A sentence may open with these (the paper's “ " ( [, then other languages' quotes and marks).
_OPENING = frozenset("\u201c\"([\u00bf\u00a1\u00ab\u2039\u201e\u201a\u300c\u300e\uff08\u3014\u3010\u300a\u3008\uff62")
_CLOSING = frozenset("\u300d\u300f\uff09\u3015\u3011\u3009\u300b\uff63\u201d\u2019\"')]\u00bb\u203a")
_IDEOGRAPHIC_MARKS = frozenset("\u3002\uff01\uff1f\uff0e\uff61")

# Characters per word in scripts written without spaces (word_count): about 1.5–2.5 Han or kana
# characters make a word of Chinese or Japanese, about 4 characters (vowel and tone marks
# included) a word of Thai, Lao, Khmer or Myanmar.
CHARS_PER_WORD = {"han-kana": 2, "thai-lao-khmer-myanmar": 4}
# (kana letters and marks, not the kana punctuation ・ ゠; the iteration marks 々 〆 〇)
_HAN_KANA = re.compile(r"[\u3005-\u3007\u3041-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff\u3400-\u4dbf"
                       r"\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]")
_SEA = re.compile(r"[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff]")
_SPACELESS = re.compile(_HAN_KANA.pattern + "|" + _SEA.pattern)


def _starts_sentence(c: str) -> bool:
    """Whether a sentence may begin with `c` after a terminal mark: the paper's class
    (`A`–`Z`, opening punctuation), any uppercase letter, or a letter of a script
    without case (a letter that is neither upper nor lower case, past Latin-1: ª is not one)."""
    if "A" <= c <= "Z" or c in _OPENING:
        return True
    if c.isascii():
        return False
    cat = unicodedata.category(c)
    return cat in ("Lu", "Lt") or (cat == "Lo" and c > "\u00ff")


# Punctuation that may come before an abbreviation's first letter: `(z. B.`, `«M.`.
_LEADING = "([{\"'\u201c\u201e\u2018\u201a\u00ab\u2039\u00bf\u00a1" + "".join(DASHES)


def _abbreviation_ends(text: str, i: int, nxt: int, lang: Language) -> bool:
    """Whether the dot at `text[i]`, followed by whitespace and `text[nxt]`, closes one of
    `lang`'s abbreviations (`z.` and `B.` of `z. B.`), an initial (`А.` of `А. С. Пушкин`)
    or a German ordinal before a month (`3.` of `3. Oktober`): then it ends no sentence."""
    if text[i] != "." or not text[i + 1].isspace():
        return False  # a closing mark after the dot: a sentence's end, as the paper's rule
    before = text[max(0, i - 40):i + 1].split()
    last = before[-1].lstrip(_LEADING)
    after = text[nxt:nxt + 40].split(maxsplit=1)
    following = after[0].rstrip(",;:!?)\u201d\u2019\u00bb\"'") if after else ""
    forms = [last, last + " " + following]
    if len(before) > 1:
        forms.append(before[-2].lstrip(_LEADING) + " " + last)
    if any(f in lang.abbreviations for f in forms):
        return True
    if lang.initials and len(last) == 2 and last[0].isupper():
        return True
    return bool(lang.months) and last[:-1].isdigit() and len(last) <= 3 and following.rstrip(".") in lang.months


def _after_dash(text: str, j: int) -> str:
    """The first character after the dash at `text[j]` and the spaces after it."""
    j += 1
    while j < len(text) and text[j] in " \u00a0\u202f\u2009":
        j += 1
    return text[j:j + 1]


def _boundary_ends(text: str, lang: Language = ENGLISH) -> Iterator[tuple[int, int]]:
    """(end of the sentence, start of the next) for each boundary of `text` read as `lang`."""
    for m in (_BOUNDARY_ELLIPSIS if lang.ellipsis else _BOUNDARY).finditer(text):
        nxt = m.end()
        c = text[nxt]
        mark = text[m.start()]
        if mark in _IDEOGRAPHIC_MARKS:
            # In Japanese a quotation may end a sentence's clause and go on: 「…。」と言った.
            if text[m.start():nxt].rstrip()[-1:] in _CLOSING and c == "\u3068":
                continue
            if c in _CLOSING:  # the closing marks end the text: no sentence after them
                continue
        elif not mark.isspace():
            if lang.dash_dialogue and c in DASHES:
                # a dash that opens the next turn (`— Дома`), not a narrator's tag (`— спросила она`)
                if not _starts_sentence(_after_dash(text, nxt) or "a"):
                    continue
            elif not _starts_sentence(c):
                continue
            if lang is not ENGLISH and _abbreviation_ends(text, m.start(), nxt, lang):
                continue
        # The sentence ends after the mark and its closing marks; the whitespace is dropped.
        yield m.start() + len(m.group().rstrip()), nxt


def split_sentences(text: str, language: Language | None = None) -> list[str]:
    """Sentences keep their punctuation; the whitespace between them is dropped. The
    text is read as `language`, by default the one `detect_language` tells from it."""
    out: list[str] = []
    start = 0
    for end, nxt in _boundary_ends(text, language or detect_language(text)):
        piece = text[start:end].strip()
        if piece:
            out.append(piece)
        start = nxt
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def word_count(text: str) -> int:
    """Whitespace words, as the paper counts them; in scripts written without spaces, a
    word per CHARS_PER_WORD characters (rounded up), so `--min-words` and the anchor's
    minimum mean about the same length in every script."""
    if not _SPACELESS.search(text):
        return len(text.split())
    han = len(_HAN_KANA.findall(text))
    sea = len(_SEA.findall(text))
    # the words around them in other scripts (Tokyo, 2024), not the punctuation left alone (。)
    rest = sum(any(c.isalnum() for c in w) for w in _SPACELESS.sub(" ", text).split())
    return rest + -(-han // CHARS_PER_WORD["han-kana"]) + -(-sea // CHARS_PER_WORD["thai-lao-khmer-myanmar"])


# A terminal mark that looks like a sentence end: a spaced mark before whitespace (or the end),
# or an ideographic one with the closing marks after it (as `_boundary_ends` ends a sentence).
_MARKS = re.compile(_SPACED_MARK + _CLOSE + r"*(?:\s|$)|" + _IDEOGRAPHIC.pattern.split(r"\s*")[0])
_MARKS_ELLIPSIS = re.compile(_SPACED_MARK_ELLIPSIS + _CLOSE + r"*(?:\s|$)|" + _IDEOGRAPHIC.pattern.split(r"\s*")[0])
# Fewer boundaries than this share of the marks, once a story has at least MARKS_FOR_WARNING
# of them, means the splitter is not reading its script (or its sentences begin in lower case).
MARKS_FOR_WARNING = 10
BOUNDARY_SHARE_FOR_WARNING = 0.5
# This many boundaries after another language's abbreviation (`z. B.` in a story read as
# English) mean the story's language was not recognised.
DOUBTFUL_FOR_WARNING = 3
# (without those English writes too: `Dr.`, `St.`, `M.`, `Mlle.` …)
_SHARED_WITH_ENGLISH = frozenset({"Dr.", "Prof.", "St.", "M.", "MM.", "Mme.", "Mmes.", "Mlle.", "Mlles.", "D.", "Me.",
                                  "Pr.", "Fr.", "Ste.", "ca.", "Ca.",
                                  "cf.", "Cf.", "av.", "Av.", "Ing."})
_OTHERS_ABBREVIATIONS = tuple((lang, Language(code=lang.code, name=lang.name,
                                              abbreviations=lang.abbreviations - _SHARED_WITH_ENGLISH))
                              for lang in (GERMAN, FRENCH, SPANISH, RUSSIAN))


def _ends_nothing_by_rule(text: str, m: re.Match[str], lang: Language) -> bool:
    """Whether the mark `m` rightly ends no sentence under `lang`'s rules: a Japanese quotation
    going on (「…？」と), a narrator's tag after a dialogue dash (`? — спросила`), an abbreviation."""
    mark = text[m.start()]
    rest = text[m.end():].lstrip()
    if mark in _IDEOGRAPHIC_MARKS:
        return m.group()[-1:] in _CLOSING and rest[:1] == "\u3068"
    if lang is ENGLISH or not rest:
        return False
    nxt = len(text) - len(rest)
    if lang.dash_dialogue and rest[0] in DASHES:
        return not _starts_sentence(_after_dash(text, nxt) or "a")
    return _abbreviation_ends(text, m.start(), nxt, lang)


def _caseless(text: str) -> bool:
    """Whether most of the letters of `text` are of a script without case (Han, kana, Hebrew …)."""
    letters = [c for c in text[:20000] if c.isalpha()]
    return sum(not c.isupper() and not c.islower() for c in letters) * 2 > len(letters)


def boundary_warning(text: str, language: Language | None = None) -> str | None:
    """A sentence for the user when a story's boundaries are doubtful, else None: its
    terminal marks and its boundaries disagree (many marks, few boundaries: its sentences
    begin with what the splitter does not take for a sentence start), or many boundaries
    follow another language's abbreviations (its language was not recognised)."""
    lang = language or detect_language(text)
    bounds = list(_boundary_ends(text, lang))
    ends = {end for end, _ in bounds}
    followers: Counter[str] = Counter()
    marks = 0
    for m in (_MARKS_ELLIPSIS if lang.ellipsis else _MARKS).finditer(text.rstrip()):  # the last mark ends none
        end = m.start() + len(m.group().rstrip())
        if end not in ends:
            if _ends_nothing_by_rule(text, m, lang):
                continue
            rest = text[m.end():].lstrip()
            followers[rest[:1]] += 1
        marks += 1
    boundaries = marks - sum(followers.values())
    if marks >= MARKS_FOR_WARNING and boundaries < BOUNDARY_SHARE_FOR_WARNING * marks:
        c, n = followers.most_common(1)[0]
        starts = ("a letter or an opening mark" if _caseless(text) else
                  "an uppercase letter, a letter of a script without case or an opening mark")
        return (f"{marks} sentence-ending marks but {boundaries} sentence boundaries ({n} of the marks are "
                f"followed by {c!r}): a sentence ends only before {starts}, so its sentences may be merged and "
                "positions missing (README, \"Languages\")")
    doubtful: Counter[str] = Counter()
    for end, nxt in bounds:
        if text[end - 1] != "." or not text[end:end + 1].isspace():
            continue
        for other, forms in _OTHERS_ABBREVIATIONS:
            if other is not lang and _abbreviation_ends(text, end - 1, nxt, forms):
                doubtful[text[:end].split()[-1]] += 1
                break
    if sum(doubtful.values()) >= DOUBTFUL_FOR_WARNING:
        shown = ", ".join(f"{w!r} \u00d7{n}" for w, n in doubtful.most_common(3))
        return (f"{sum(doubtful.values())} of its {len(bounds)} sentence boundaries follow an abbreviation of "
                f"another language ({shown}) and the story was read as {lang.name}: its sentences may be cut "
                "and positions fall mid-sentence (README, \"Languages\")")
    share = common_share(text, lang)
    if share is not None and share < UNKNOWN_SHARE:
        # Italian, Portuguese, Dutch, Polish …: split by a language's rules that are not its own
        return (f"it was read as {lang.name}, but only {share:.0%} of its words are common {lang.name} words "
                f"(under {UNKNOWN_SHARE:.0%}; {lang.name} prose has twice that or more): it is likely in a language "
                f"the splitter does not know, split by the rules of {lang.name} (not its own abbreviations, "
                "\u2026 or dialogue dashes), so positions may fall mid-sentence or sentences be merged "
                "(README, \"Languages\")")
    return None


class Candidate(msgspec.Struct, frozen=True):
    """A position before the pct filter: the reader has seen s[0:k]."""

    k: int
    anchor: str


def candidates(sentences: Sequence[str], min_anchor_words: int = MIN_SENT_WORDS) -> list[Candidate]:
    """Positions 1 ≤ k ≤ N−1 whose anchor s[k−1] has at least `min_anchor_words` words (word_count)."""
    return [Candidate(k, sentences[k - 1]) for k in range(1, len(sentences))
            if word_count(sentences[k - 1]) >= min_anchor_words]


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
