"""Reading `fairplay-metrics`' inputs: READERS.jsonl (what `tension-run fairplay`
writes: per story the suspects, culprit, distractor and each reader's distribution
per paragraph) and a CSV of human guesses (``id, reader, paragraph, guess``) for the
actual reader. Every record is checked before anything is computed; a bad line is
an InputError naming its file, line and field."""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Sequence
from typing import NoReturn

import msgspec
import numpy as np

from tension.core.errors import InputError
from tension.core.formats import DEFAULT_GROUP
from tension.core.inputs.jsonl import check_label, decode_line, read_records
from tension.kernels.fairplay import ACTUAL, READERS

__all__ = ["NOT_SURE", "RENORM_TOL", "EXPERIENCED_SETTING", "ReaderRecord", "ScoredWhodunit", "check_record",
           "reader_names", "reader_schedule", "read_readers", "read_actual", "SOURCES", "read_source",
           "row_warnings"]

NOT_SURE = "not sure"  # an actual reader's guess that names nobody (like an empty one)
RENORM_TOL = 0.01  # every row is divided by its sum; one further than this from 1 is also reported
# More experienced readers, one per setting: "experienced_3" (3 previous stories),
# "experienced_0alt", … beside the plain "experienced".
EXPERIENCED_SETTING = re.compile(r"experienced_[A-Za-z0-9.-]+")


class ReaderRecord(msgspec.Struct, kw_only=True):
    """One line of READERS.jsonl as decoded (before the checks of ``check_record``)."""

    id: str
    suspects: list[str]
    culprit: str | list[str]
    L: int | None = None  # default: the length of the readers' lists
    group: str | None = None
    distractor: str | list[str] | None = None
    revelation: int | None = None
    readers: dict[str, list[list[float] | None]] = {}  # [] or null: no value
    extracted_suspects: bool = False
    failures: list[dict] = []


class ScoredWhodunit(msgspec.Struct, kw_only=True):
    """A checked story: distributions normalised, NaN rows where a reader has no value."""

    id: str
    group: str
    suspects: list[str]
    culprit: int
    distractor: int  # -1: none
    revelation: int | None
    L: int
    probs: dict[str, np.ndarray]  # reader -> (L, K)
    extracted_suspects: bool = False
    n_failures: int = 0
    renormalised: int = 0  # rows whose sum was not 1
    empty_rows: int = 0  # [] entries: missing values, like null
    zero_rows: int = 0  # all-zero entries: a tie of every suspect (uniform)
    line: int = 0


_decoder = msgspec.json.Decoder(ReaderRecord)


def _one_name(path, line, field, value) -> str:
    if isinstance(value, list):
        if len(value) != 1:
            raise InputError(path, line, field, f"expected a name or a one-element list, got {len(value)} names")
        return value[0]
    return value


def _suspect_index(path, line, field, name: str, suspects: list[str]) -> int:
    if name in suspects:
        return suspects.index(name)
    folded = [s.casefold().strip() for s in suspects]
    key = name.casefold().strip()
    if folded.count(key) == 1:
        return folded.index(key)
    raise InputError(path, line, field, f"expected one of the suspects {suspects}, got {name!r}")


class _Rows(msgspec.Struct):
    probs: np.ndarray  # (L, K)
    renormalised: int
    empty: int
    zero: int


def _check_rows(path, line, reader, rows, L, K) -> _Rows:
    """The reader's (L, K) matrix: NaN rows for null or empty entries (missing),
    uniform rows for all-zero ones (a tie of every suspect, as in the authors'
    analysis), every other row divided by its sum; with the counts of each kind."""
    if len(rows) != L:
        raise InputError(path, line, f"readers.{reader}", f"expected {L} entries (one per paragraph), got {len(rows)}")
    out = np.full((L, K), np.nan)
    idx = [i for i, row in enumerate(rows) if row]
    empty = sum(1 for row in rows if row is not None and not row)
    if not idx:
        return _Rows(out, 0, empty, 0)
    # One numpy pass checks every row; the per-value loop runs only to name a bad one.
    arr = np.array([rows[i] for i in idx], dtype=np.float64) if all(len(rows[i]) == K for i in idx) else None
    if arr is None or not np.isfinite(arr).all() or (arr < 0).any():
        _name_bad_row(path, line, reader, rows, K)
    totals = arr.sum(axis=1)
    zero = totals == 0
    out[idx] = np.where(zero[:, None], 1.0 / K, arr / np.where(zero, 1.0, totals)[:, None])
    return _Rows(out, int((~zero & (np.abs(totals - 1.0) > RENORM_TOL)).sum()), empty, int(zero.sum()))


def _name_bad_row(path, line, reader, rows, K) -> NoReturn:
    for i, row in enumerate(rows):
        if not row:
            continue
        field = f"readers.{reader}[{i}]"
        if len(row) != K:
            raise InputError(path, line, field, f"paragraph {i + 1}: expected {K} probabilities (one per suspect), "
                             f"got {len(row)}")
        for y, v in enumerate(row):
            if not math.isfinite(v):
                raise InputError(path, line, f"{field}[{y}]", f"paragraph {i + 1}: expected a finite number, got {v}")
            if v < 0:
                raise InputError(path, line, f"{field}[{y}]",
                                 f"paragraph {i + 1}: expected a probability >= 0, got {v}")
    raise AssertionError("a row failed the numpy check but no value is bad")  # pragma: no cover


def check_record(path: str, line: int, r: ReaderRecord) -> ScoredWhodunit:
    """The rules of a READERS.jsonl record beyond its types; raises InputError."""
    if not r.id:
        raise InputError(path, line, "id", "expected a non-empty string")
    check_label(path, line, "id", r.id)
    check_label(path, line, "group", r.group)
    K = len(r.suspects)
    if K < 2:
        raise InputError(path, line, "suspects", f"expected at least 2 suspects, got {K}")
    folded = [s.casefold().strip() for s in r.suspects]
    for y, s in enumerate(folded):
        if not s:
            raise InputError(path, line, f"suspects[{y}]", "expected a non-empty name")
        if folded.index(s) != y:
            raise InputError(path, line, f"suspects[{y}]", f"duplicate suspect {r.suspects[y]!r}")
    L = _length(path, line, r)
    culprit = _suspect_index(path, line, "culprit", _one_name(path, line, "culprit", r.culprit), r.suspects)
    distractor = -1
    if r.distractor is not None and r.distractor != []:
        distractor = _suspect_index(path, line, "distractor", _one_name(path, line, "distractor", r.distractor),
                                    r.suspects)
        if distractor == culprit:
            raise InputError(path, line, "distractor", f"the distractor is the culprit ({r.suspects[culprit]!r})")
    if r.revelation is not None and not 1 <= r.revelation <= L:
        raise InputError(path, line, "revelation", f"expected a paragraph in 1..{L}, got {r.revelation}")
    probs: dict[str, np.ndarray] = {}
    counts = [0, 0, 0]
    for name, rows in r.readers.items():
        if name not in READERS and not EXPERIENCED_SETTING.fullmatch(name):
            raise InputError(path, line, f"readers.{name}", f"unknown reader; expected one of {list(READERS)} or "
                                                            f"experienced_SETTING (letters, digits, '.', '-')")
        checked = _check_rows(path, line, name, rows, L, K)
        probs[name] = checked.probs
        counts = [counts[0] + checked.renormalised, counts[1] + checked.empty, counts[2] + checked.zero]
    return ScoredWhodunit(id=r.id, group=r.group if r.group else DEFAULT_GROUP, suspects=list(r.suspects),
                          culprit=culprit, distractor=distractor, revelation=r.revelation, L=L, probs=probs,
                          extracted_suspects=r.extracted_suspects, n_failures=len(r.failures),
                          renormalised=counts[0], empty_rows=counts[1], zero_rows=counts[2], line=line)


def _length(path, line, r: ReaderRecord) -> int:
    """L as given, or the length of the readers' lists (which must agree)."""
    if r.L is not None:
        if r.L < 1:
            raise InputError(path, line, "L", f"expected at least 1 paragraph, got {r.L}")
        return r.L
    lengths = {name: len(rows) for name, rows in r.readers.items()}
    if not lengths:
        raise InputError(path, line, "L", "expected L, or readers whose lists give it")
    L = next(iter(lengths.values()))
    for name, n in lengths.items():
        if n != L:
            raise InputError(path, line, f"readers.{name}", f"expected {L} entries like the first reader (no L "
                                                            f"given), got {n}")
    if L < 1:
        raise InputError(path, line, "L", "expected at least 1 paragraph; the readers' lists are empty")
    return L


def reader_names(stories: Sequence[ScoredWhodunit]) -> list[str]:
    """The readers of a batch in kernel row order: the four of READERS, then every
    further experienced reader in order of first appearance."""
    extra = dict.fromkeys(name for s in stories for name in s.probs if name not in READERS)
    return [*READERS, *extra]


def reader_schedule(spec: str, L: int) -> list[int]:
    """The paragraphs (1-based) every reader is asked at. ``authors``: the rule of
    the fair-play authors' code (crime_fiction.py), which for L = 25 gives the
    paper's 19 steps 1, 3, 5, 7, 9, 11, 13 … 25: every paragraph when L < 25;
    every other paragraph of the first half and every paragraph of the second
    when 25 <= L < 50; every third of the first half and every other of the
    second when L >= 50. ``all``: 1 … L. Or paragraphs as "1,5,9" (those > L dropped)."""
    if spec == "all":
        return list(range(1, L + 1))
    if spec != "authors":
        return sorted({int(p) for p in spec.split(",") if p.strip() and 1 <= int(p) <= L})
    half = L // 2
    if L < 25:
        zero_based = list(range(L))
    elif L < 50:
        zero_based = [*range(0, half, 2), *range(half, L)]
    else:
        zero_based = [*range(0, half, 3), *range(half, L, 2)]
    return [i + 1 for i in zero_based]


def _non_finite_path(value, path="") -> str | None:
    """Where Python's json found NaN/Infinity (which msgspec refuses as JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    if isinstance(value, dict):
        items = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for p, v in items:
        found = _non_finite_path(v, p)
        if found is not None:
            return found
    return None


def _decode(path: str, line: int, raw: bytes) -> ReaderRecord:
    try:
        return decode_line(path, line, raw, ReaderRecord, _decoder)
    except InputError as e:
        # NaN and Infinity are not JSON, but Python writes them: name the field.
        try:
            where = _non_finite_path(json.loads(raw))
        except ValueError:
            where = None
        if where is not None:
            raise InputError(path, line, where, "expected a finite number, got NaN or Infinity") from e
        raise


def read_readers(path: str | os.PathLike) -> tuple[list[ScoredWhodunit], list[InputError]]:
    """Every valid story of the file, and an error for each bad line."""
    return read_records(path, check_record, decode=_decode, empty="stories")  # empty: an error, not exit 0


def read_actual(path: str | os.PathLike, stories: Sequence[ScoredWhodunit]) -> tuple[int, list[InputError]]:
    """Set each story's actual reader from human guesses in a CSV with columns
    ``id, reader, paragraph, guess``. Per paragraph, M(i) = the share of readers
    naming each suspect among those who named one; an empty guess or "not sure"
    names nobody and is left out (so is a paragraph where nobody named anyone:
    null). Returns (stories given an actual reader, errors of bad rows)."""
    path = str(path)
    by_id = {s.id: s for s in stories}
    errors: list[InputError] = []
    counts: dict[str, np.ndarray] = {}
    seen: dict[tuple[str, str, int], int] = {}
    try:
        f = open(path, newline="", encoding="utf-8")
    except OSError as e:
        raise InputError(path, 0, None, f"cannot open: {e.strerror or e}") from e
    with f:
        rows = csv.DictReader(f)
        missing = [c for c in ("id", "reader", "paragraph", "guess") if c not in (rows.fieldnames or [])]
        if missing:
            raise InputError(path, 1, missing[0], f"missing column; expected columns id, reader, paragraph, guess, "
                                                  f"got {rows.fieldnames}")
        try:
            for row in rows:
                line = rows.line_num
                try:
                    _count_guess(path, line, row, by_id, counts, seen)
                except InputError as e:
                    errors.append(e)
        except (csv.Error, UnicodeDecodeError) as e:
            errors.append(InputError(path, rows.line_num, None, f"unreadable CSV ({e}); rows after it were skipped"))
    for sid, c in counts.items():
        st = by_id[sid]
        totals = c.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            st.probs[READERS[ACTUAL]] = np.where(totals > 0, c / totals, np.nan)
    return len(counts), errors


def _count_guess(path, line, row, by_id, counts, seen) -> None:
    sid = (row["id"] or "").strip()
    st = by_id.get(sid)
    if st is None:
        raise InputError(path, line, "id", f"no story {sid!r} in the readers file (or its line failed)")
    try:
        i = int((row["paragraph"] or "").strip())
    except ValueError:
        raise InputError(path, line, "paragraph", f"expected a paragraph number, got {row['paragraph']!r}") from None
    if not 1 <= i <= st.L:
        raise InputError(path, line, "paragraph", f"expected a paragraph in 1..{st.L}, got {i}")
    reader = (row["reader"] or "").strip()
    key = (sid, reader, i)
    if key in seen:
        raise InputError(path, line, "reader", f"reader {reader!r} already guessed paragraph {i} of {sid!r} "
                                                f"(line {seen[key]})")
    seen[key] = line
    guess = (row["guess"] or "").strip()
    c = counts.setdefault(sid, np.zeros((st.L, len(st.suspects))))
    if not guess or guess.casefold() == NOT_SURE:
        return
    folded = [s.casefold().strip() for s in st.suspects]
    if guess.casefold() not in folded:
        raise InputError(path, line, "guess", f"expected one of the suspects {st.suspects}, empty or "
                                              f"{NOT_SURE!r}, got {guess!r}")
    c[i - 1, folded.index(guess.casefold())] += 1


SOURCES = ("readers", "authors")  # READERS.jsonl (or a fairplay run folder); the authors' result files


def read_source(path: str | os.PathLike, source: str
                ) -> tuple[str, list[ScoredWhodunit], list[InputError], list[str]]:
    """The stories of `fairplay-metrics`' input: READERS.jsonl (or the --out folder
    of a `fairplay` run), or with ``source="authors"`` a folder of the fair-play
    authors' result files. Returns the path read, the stories, the errors and
    notes on what was left out."""
    if source == "authors":
        # imported here: inputs/authors.py builds on this module's records
        from tension.core.inputs.authors import read_authors

        try:
            got = read_authors(path)
        except InputError as e:
            return str(path), [], [e], []
        return str(path), got.stories, got.errors, got.notes
    if os.path.isdir(path):
        path = os.path.join(path, "readers.jsonl")
    stories, errors = read_readers(path)
    return str(path), stories, errors, []


def row_warnings(stories: Sequence[ScoredWhodunit]) -> list[str]:
    """What was done to the stories' rows: renormalised, empty, all-zero."""
    out = []
    for s in stories:
        if s.renormalised:
            out.append(f"{s.id}: {s.renormalised} distribution(s) did not sum to 1 and were renormalised")
        if s.empty_rows:
            out.append(f"{s.id}: {s.empty_rows} empty reader value(s) ([]), counted as missing")
        if s.zero_rows:
            out.append(f"{s.id}: {s.zero_rows} all-zero reader value(s), read as a tie of every suspect")
    return out
