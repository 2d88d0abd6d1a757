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
from collections.abc import Sequence

import msgspec
import numpy as np

from tension.kernels.fairplay import ACTUAL, READERS

from tension.core.errors import InputError
from tension.core.formats import DEFAULT_GROUP
from tension.core.inputs.jsonl import decode_line, read_records

__all__ = ["NOT_SURE", "RENORM_TOL", "ReaderRecord", "ScoredWhodunit", "check_record", "read_readers",
           "read_actual"]

NOT_SURE = "not sure"  # an actual reader's guess that names nobody (like an empty one)
RENORM_TOL = 0.01  # every row is divided by its sum; one further than this from 1 is also reported


class ReaderRecord(msgspec.Struct, kw_only=True):
    """One line of READERS.jsonl as decoded (before the checks of ``check_record``)."""

    id: str
    suspects: list[str]
    culprit: str | list[str]
    L: int
    group: str | None = None
    distractor: str | list[str] | None = None
    revelation: int | None = None
    readers: dict[str, list[list[float] | None]] = {}
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


def _check_rows(path, line, reader, rows, L, K) -> tuple[np.ndarray, int]:
    """The reader's (L, K) matrix, NaN rows for nulls, each row divided by its sum;
    and how many rows were off 1 by more than rounding."""
    if len(rows) != L:
        raise InputError(path, line, f"readers.{reader}", f"expected {L} entries (one per paragraph), got {len(rows)}")
    out = np.full((L, K), np.nan)
    idx = [i for i, row in enumerate(rows) if row is not None]
    if not idx:
        return out, 0
    # One numpy pass checks every row; the per-value loop runs only to name a bad one.
    arr = np.array([rows[i] for i in idx], dtype=np.float64) if all(len(rows[i]) == K for i in idx) else None
    if arr is None or not np.isfinite(arr).all() or (arr < 0).any() or (arr.sum(axis=1) <= 0).any():
        _name_bad_row(path, line, reader, rows, K)
    totals = arr.sum(axis=1)
    out[idx] = arr / totals[:, None]
    return out, int((np.abs(totals - 1.0) > RENORM_TOL).sum())


def _name_bad_row(path, line, reader, rows, K) -> None:
    for i, row in enumerate(rows):
        if row is None:
            continue
        field = f"readers.{reader}[{i}]"
        if len(row) != K:
            raise InputError(path, line, field, f"paragraph {i + 1}: expected {K} probabilities (one per suspect), "
                             f"got {len(row)}")
        for y, v in enumerate(row):
            if not math.isfinite(v):
                raise InputError(path, line, f"{field}[{y}]", f"paragraph {i + 1}: expected a finite number, got {v}")
            if v < 0:
                raise InputError(path, line, f"{field}[{y}]", f"paragraph {i + 1}: expected a probability >= 0, got {v}")
        if math.fsum(row) <= 0:
            raise InputError(path, line, field, f"paragraph {i + 1}: the probabilities sum to 0")
    raise AssertionError("a row failed the numpy check but no value is bad")  # pragma: no cover


def check_record(path: str, line: int, r: ReaderRecord) -> ScoredWhodunit:
    """The rules of a READERS.jsonl record beyond its types; raises InputError."""
    if not r.id:
        raise InputError(path, line, "id", "expected a non-empty string")
    K = len(r.suspects)
    if K < 2:
        raise InputError(path, line, "suspects", f"expected at least 2 suspects, got {K}")
    folded = [s.casefold().strip() for s in r.suspects]
    for y, s in enumerate(folded):
        if not s:
            raise InputError(path, line, f"suspects[{y}]", "expected a non-empty name")
        if folded.index(s) != y:
            raise InputError(path, line, f"suspects[{y}]", f"duplicate suspect {r.suspects[y]!r}")
    if r.L < 1:
        raise InputError(path, line, "L", f"expected at least 1 paragraph, got {r.L}")
    culprit = _suspect_index(path, line, "culprit", _one_name(path, line, "culprit", r.culprit), r.suspects)
    distractor = -1
    if r.distractor is not None and r.distractor != []:
        distractor = _suspect_index(path, line, "distractor", _one_name(path, line, "distractor", r.distractor),
                                    r.suspects)
        if distractor == culprit:
            raise InputError(path, line, "distractor", f"the distractor is the culprit ({r.suspects[culprit]!r})")
    if r.revelation is not None and not 1 <= r.revelation <= r.L:
        raise InputError(path, line, "revelation", f"expected a paragraph in 1..{r.L}, got {r.revelation}")
    probs: dict[str, np.ndarray] = {}
    renorm = 0
    for name, rows in r.readers.items():
        if name not in READERS:
            raise InputError(path, line, f"readers.{name}", f"unknown reader; expected one of {list(READERS)}")
        probs[name], n = _check_rows(path, line, name, rows, r.L, K)
        renorm += n
    return ScoredWhodunit(id=r.id, group=r.group if r.group else DEFAULT_GROUP, suspects=list(r.suspects),
                          culprit=culprit, distractor=distractor, revelation=r.revelation, L=r.L, probs=probs,
                          extracted_suspects=r.extracted_suspects, n_failures=len(r.failures),
                          renormalised=renorm, line=line)


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
    return read_records(path, check_record, decode=_decode)


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
