"""Reading a corpus: JSON Lines (`id`, `text`, optional `group`, any other fields
kept as metadata), a CSV, TSV or Parquet file with those columns, or rows in memory
written as JSON Lines (core/inputs/tabular.py: one contract for every form, the same
checks, errors and skip-and-go-on), or a folder of `.txt` files (id = file stem), or one
`.txt` file, a story read as in a folder."""

from __future__ import annotations

import codecs
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import msgspec

from tension.core.errors import InputError
from tension.core.formats import DEFAULT_GROUP
from tension.core.inputs.jsonl import FileError, check_label, read_records, string_field
from tension.core.inputs.segment import word_count
from tension.core.inputs.tabular import guess_columns, is_tabular, missing_columns, read_tabular

__all__ = ["Story", "Skipped", "Corpus", "read_corpus", "DEFAULT_GROUP"]

class Story(msgspec.Struct, kw_only=True):
    id: str
    text: str
    group: str = DEFAULT_GROUP
    meta: dict[str, Any] = {}
    words: int = 0


class Skipped(msgspec.Struct, kw_only=True):
    id: str
    reason: str


class Corpus(msgspec.Struct, kw_only=True):
    path: str
    stories: list[Story]  # kept, in file order
    skipped: list[Skipped]  # filtered out by a rule (not an error)
    errors: list[InputError]  # bad records


def read_corpus(path: str | os.PathLike, min_words: int = 500, max_words: int = 5000) -> Corpus:
    """Every valid story, the ones the word filter left out, and an error per bad record."""
    p = Path(path)
    if p.is_dir():
        records, errors = _read_folder(p)
    elif p.suffix.lower() == ".txt":  # one story, as in a folder of them (not JSON Lines: a line an error)
        story = _read_txt(p)
        records, errors = ([story], []) if isinstance(story, Story) else ([], [story])
    elif is_tabular(p):  # .csv, .tsv, .parquet: a row a record, the header's names the fields
        records, errors = read_tabular(p, _story, id_of=lambda s: s.id, required=REQUIRED, empty="stories")
    else:
        records, errors = read_records(p, _story, empty="stories", what="the corpus")
    stories: list[Story] = []
    skipped: list[Skipped] = []
    for s in records:
        s.words = word_count(s.text)  # whitespace words; in Chinese, Japanese, Thai … characters per word
        if s.words < min_words:
            skipped.append(Skipped(id=s.id, reason=f"{s.words} words, fewer than --min-words {min_words}"))
        elif s.words > max_words:
            skipped.append(Skipped(id=s.id, reason=f"{s.words} words, more than --max-words {max_words}"))
        else:
            stories.append(s)
    return Corpus(path=str(p), stories=stories, skipped=skipped, errors=errors)


REQUIRED = ("id", "text")  # a story's fields that every record must have


def _story(path: str, lineno: int, obj: dict[str, Any]) -> Story:
    absent = [f for f in REQUIRED if f not in obj]
    if absent and guess_columns(absent, list(obj)):  # a field named otherwise (`ID`, `story_id`): say the names
        raise InputError(path, lineno, absent[0], missing_columns(absent, list(obj), "record"))
    sid = string_field(path, lineno, obj, "id")
    text = string_field(path, lineno, obj, "text")
    group = string_field(path, lineno, obj, "group", required=False)
    if not sid.strip():
        raise InputError(path, lineno, "id", "expected a non-empty string")
    check_label(path, lineno, "id", sid)
    check_label(path, lineno, "group", group)
    if not text.strip():
        raise InputError(path, lineno, "text", "empty text")
    meta = {k: v for k, v in obj.items() if k not in ("id", "text", "group")}
    return Story(id=sid, text=text, group=group or DEFAULT_GROUP, meta=meta)


def _read_folder(p: Path) -> tuple[list[Story], list[InputError]]:
    stories: list[Story] = []
    errors: list[InputError] = []
    entries = sorted(p.iterdir())
    # .txt in any case (G.TXT from another system); what else the folder holds is said, not silently left out
    files = [f for f in entries if f.suffix.lower() == ".txt" and f.is_file()]
    others = [f.name + ("/" if f.is_dir() else "") for f in entries if f not in files and not f.name.startswith(".")]
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        print(f"note: {p}: {len(others)} entries skipped, not .txt files (subfolders are not read): {shown}",
              file=sys.stderr)
    if not files:
        errors.append(FileError(str(p), 0, None, "no .txt files in this folder"))
    for f in files:
        story = _read_txt(f)
        if isinstance(story, Story):
            stories.append(story)
        else:
            errors.append(story)
    return stories, errors


def _a_table(f: Path, text: str, utf16: bool) -> InputError | None:
    """The error for a .txt file that is a table, not a story: its first line a header naming
    `id` and `text` between tabs, as Excel's "Unicode Text" saves a sheet (UTF-16). Read as a
    story, its text was the table. The way out makes it a .tsv, which is read row by row."""
    cells = [c.strip().strip('"') for c in text.split("\n", 1)[0].split("\t")]
    if len(cells) < 2 or not {"id", "text"} <= {c.lower() for c in cells}:
        return None
    src, dst = shlex.quote(str(f)), shlex.quote(str(f.with_suffix(".tsv")))
    make = f"iconv -f UTF-16 -t UTF-8 {src} > {dst}" if utf16 else f"cp {src} {dst}"
    return InputError(str(f), 1, None, f"its first line is a header of tab-separated columns ({', '.join(cells)}): "
                                       "a table, as Excel's \"Unicode Text\" saves one, not a story; a .tsv file is "
                                       f"read a row a story, so make it one: {make}; then give {dst}")


def _read_txt(f: Path) -> Story | InputError:
    """A .txt file as one story (id = file stem), or the error that makes it unreadable."""
    try:
        data = f.read_bytes()
        if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            text = data.decode("utf-16")  # its byte order mark says so (Windows' "Unicode")
        else:
            text = data.decode("utf-8-sig")  # a byte order mark is no part of the text
    except UnicodeDecodeError as e:
        if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            return InputError(str(f), 0, None, f"not valid UTF-16 (byte offset {e.start}), though its "
                                               "byte-order mark says UTF-16")
        return InputError(str(f), 0, None, f"not valid UTF-8 (byte offset {e.start})")
    except OSError as e:
        return InputError(str(f), 0, None, f"cannot read: {e.strerror or e}")
    if not text.strip():
        return InputError(str(f), 0, "text", "empty text")
    if (table := _a_table(f, text, utf16=data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)))) is not None:
        return table
    try:
        check_label(str(f), 0, "id", f.stem)  # the file name is the id
    except InputError as e:
        return e
    return Story(id=f.stem, text=text)
