"""What the sentence splitter knows of each language beyond the paper's rule
(`segment.py`; README, "Languages"; docs/metrics.md 1.1).

A story's language is told from its own words (`detect_language`): a story in Cyrillic
is read as Russian, a story in another script without Latin letters as that script
(`OTHER`), and a story in Latin letters as German, French or Spanish only when that
language's common words clearly outnumber English ones; everything else, English
prose first of all, is `ENGLISH`, which adds nothing to the paper's rule.

What a language adds:

- abbreviations after which a sentence never ends, even before a capital (German
  `z. B.`, French `M.`, Spanish `Sr.`, Russian `т. е.` …): the ones that often close a
  sentence (`usw.`, `etc.`, `и т. д.`) are not among them and end one before a capital;
- initials: a lone capital and its dot (`А. С. Пушкин`, `J. M. Barrie`) end no sentence;
- German dates: `am 3. Oktober` ends none;
- the Unicode ellipsis `…` ends a sentence as `...` does (the paper's rule has `.` only);
- dialogue dashes (Russian, Spanish, French): a sentence ends before a dash that opens the next
  turn (`… она. — Дома`, `… ella. —En casa`), and not before the dash of a narrator's
  tag in lower case (`— Где ты был? — спросила она.`).
"""

from __future__ import annotations

import re
from collections import Counter

import msgspec

__all__ = ["Language", "ENGLISH", "GERMAN", "FRENCH", "SPANISH", "RUSSIAN", "OTHER", "LANGUAGES",
           "DASHES", "detect_language", "UNKNOWN_SHARE", "UNKNOWN_MIN_WORDS", "common_share"]


class Language(msgspec.Struct, frozen=True, kw_only=True):
    """A language's additions to the paper's rule (module docstring)."""

    code: str
    name: str
    # abbreviations (their last word's dot included) after which no sentence ends
    abbreviations: frozenset[str] = frozenset()
    initials: bool = False
    ellipsis: bool = False
    dash_dialogue: bool = False
    # month names after which an ordinal's dot ends no sentence (German `3. Oktober`)
    months: frozenset[str] = frozenset()
    # common words that tell the language from English (detect_language)
    words: frozenset[str] = frozenset()


def _abbreviations(*forms: str) -> frozenset[str]:
    """The forms as written, their spaced and unspaced spellings (`z. B.`, `z.B.`), and the
    same with a capital first letter (a sentence may begin with `Z. B.`)."""
    out: set[str] = set()
    for f in forms:
        for g in (f, f.replace(". ", ".")):
            out.add(g)
            out.add(g[:1].upper() + g[1:])
    return frozenset(out)


ENGLISH = Language(code="en", name="English", words=frozenset(
    "the and of to was he she it that his her with you for had is not but they at be this have from which were "
    "said".split()))

GERMAN = Language(
    code="de", name="German", initials=True, ellipsis=True,
    abbreviations=_abbreviations(
        "z. B.", "d. h.", "u. a.", "z. T.", "u. U.", "o. Ä.", "u. Ä.", "s. o.", "s. u.", "bzw.", "vgl.", "ca.",
        "evtl.", "ggf.", "sog.", "inkl.", "zzgl.", "Nr.", "Dr.", "Prof.", "Hr.", "Hrn.", "Fr.", "St.", "Str."),
    months=frozenset("Januar Jänner Februar März April Mai Juni Juli August September Oktober November "
                     "Dezember".split()),
    words=frozenset("der die das und ist nicht ich sie ein eine zu mit sich auf dem den des er es auch aber noch "
                    "wie nach dann wenn aus wir kein keine doch schon ihm ihr sein seine".split()))

FRENCH = Language(
    code="fr", name="French", initials=True, ellipsis=True, dash_dialogue=True,
    abbreviations=_abbreviations("M.", "MM.", "Mme.", "Mmes.", "Mlle.", "Mlles.", "Dr.", "Pr.", "Me.", "St.", "Ste.",
                                 "cf.", "p. ex.", "env.", "av.", "apr."),
    words=frozenset("le les et est une des du que qui dans pas ne il elle je nous vous sur pour avec mais ce "
                    "cette au aux était tout puis lui sa ses leur".split()))

SPANISH = Language(
    code="es", name="Spanish", initials=True, ellipsis=True, dash_dialogue=True,
    abbreviations=_abbreviations("Sr.", "Sra.", "Srta.", "Sres.", "Sras.", "Dr.", "Dra.", "D.", "Dña.", "Ud.",
                                 "Uds.", "Vd.", "Vds.", "Lic.", "Ing.", "Prof.", "p. ej.", "pág.", "núm.", "Avda."),
    words=frozenset("el los las y que es una del por con para pero su se lo como más muy ella él estaba fue "
                    "dónde qué".split()))

RUSSIAN = Language(
    code="ru", name="Russian", initials=True, ellipsis=True, dash_dialogue=True,
    abbreviations=_abbreviations("т. е.", "т. к.", "т. н.", "т. ч.", "напр.", "им.", "ул.",
                                 "проф.", "акад.", "тов.", "св.", "гр.", "см.", "ср."))

# Greek, Hebrew, Arabic, Devanagari, Chinese, Japanese …: only the ellipsis is added.
OTHER = Language(code="other", name="other scripts", ellipsis=True)

LANGUAGES = (ENGLISH, GERMAN, FRENCH, SPANISH, RUSSIAN, OTHER)
_BY_WORDS = (GERMAN, FRENCH, SPANISH)

# Dashes that open a dialogue turn: em dash, en dash, horizontal bar, and a typed hyphen.
DASHES = frozenset("\u2014\u2013\u2015-")

_LETTERS = re.compile(r"[^\W\d_]+")
# A non-English language is taken when at least this many of its common words appear and
# they outnumber the English ones this many times over.
_MIN_WORDS = 3
_OVER_ENGLISH = 2


def _script(c: str) -> str:
    if c.isascii() or "\u00c0" <= c <= "\u024f" or "\u1e00" <= c <= "\u1eff":
        return "latin"
    if "\u0400" <= c <= "\u052f":
        return "cyrillic"
    return "other"


def detect_language(text: str) -> Language:
    """The language whose rules split `text` (module docstring); ENGLISH unless the
    evidence for another is clear."""
    words = _LETTERS.findall(text)
    if not words:
        return ENGLISH
    scripts: Counter[str] = Counter()
    for w in words:
        scripts[_script(w[0])] += len(w)
    script = scripts.most_common(1)[0][0]
    if script == "cyrillic":
        return RUSSIAN
    if script == "other":
        return OTHER
    counts = Counter(w.lower() for w in words)
    english = sum(counts[w] for w in ENGLISH.words)
    best, n = ENGLISH, 0
    for lang in _BY_WORDS:
        m = sum(counts[w] for w in lang.words)
        if m > n:
            best, n = lang, m
    if n >= _MIN_WORDS and n > _OVER_ENGLISH * english:
        return best
    return ENGLISH


# A story in Latin letters is read as English, German, French or Spanish by its common words.
# Prose in one of them has many of that language's (every English story of ../shared/data:
# >= 21 % of its words; the German, French and Spanish samples of the tests: >= 25 %); a story
# with fewer than this share is in a language the splitter does not know (Italian read as
# Spanish: 8 %; Portuguese, Dutch, Polish, Swedish read as English: <= 4 %), and is told so.
UNKNOWN_SHARE = 0.1
UNKNOWN_MIN_WORDS = 100  # fewer words tell too little


def common_share(text: str, lang: Language) -> float | None:
    """The share of `text`'s words that are `lang`'s common words, when `lang` is a language
    told by them (English, German, French, Spanish) and the text has UNKNOWN_MIN_WORDS words."""
    if lang not in (ENGLISH, *_BY_WORDS):
        return None
    words = [w.lower() for w in _LETTERS.findall(text)]
    if len(words) < UNKNOWN_MIN_WORDS:
        return None
    return sum(1 for w in words if w in lang.words) / len(words)
