"""An audit's files in a score run's folder (issue 60; docs/metrics.md 1.10):

    audit/sample.json    the sample of the run's verdicts people label, drawn once (seeded) by
                         `tension-run audit sample` (core/pipelines/audit_sample.py): each item
                         with what a person needs (the story up to the anchor, the continuation
                         the judge saw, the predicted ending) and the judge's answer, which the
                         labelling page never shows
    audit/labels.jsonl   the labels, one JSON line each: the verdict's cache key, the annotator,
                         the time, the label (matches / does-not-match / cant-tell); appended,
                         never rewritten, by the view's labelling page and `audit import`

Appending is safe with several writers (two annotators, two views, an import): each append
takes an exclusive flock on the file and writes its lines with one write of an O_APPEND
descriptor, then fsyncs; a line cut by a crash is ended by the next append and read back
as a bad line (file, line), the others kept. An annotator's latest label of an item is the
one that counts (`latest`); the earlier ones stay in the file.

The sample as CSV for a spreadsheet or an annotation tool (`sample_csv`), and labels read
back from such a file (`read_label_csv`): every bad row an InputError naming the file, the
line and the column, the good rows kept.
"""

from __future__ import annotations

import csv
import fcntl
import io
import os
import re
import shlex
import time
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from tension.core.errors import InputError
from tension.core.inputs.jsonl import atomic_write, decode_line, iter_lines
from tension.core.inputs.tabular import read_tabular

__all__ = ["AUDIT_DIR", "SAMPLE_FILE", "LABELS_FILE", "LABELS", "LABEL_KEYS", "SampleItem", "Sample", "Count",
           "Label", "sample_path", "labels_path", "read_sample", "write_sample", "append_labels", "read_labels",
           "latest", "check_annotator",
           "person", "names_of", "check_label_value", "now", "sample_csv", "CSV_COLUMNS", "read_label_csv",
           "CsvLabels", "MAX_ANNOTATOR"]

AUDIT_DIR = "audit"
SAMPLE_FILE = "sample.json"
LABELS_FILE = "labels.jsonl"
LABELS = ("matches", "does-not-match", "cant-tell")
# what a person may type for each (the page's keys y / n / s; a spreadsheet's yes / no)
# and the page's own words for them (its buttons: "does not match", "can't tell"), as people write them
LABEL_KEYS = {"y": "matches", "yes": "matches", "match": "matches",
              "n": "does-not-match", "no": "does-not-match", "does not match": "does-not-match",
              "doesn't match": "does-not-match", "no match": "does-not-match",
              "s": "cant-tell", "can't-tell": "cant-tell", "can't tell": "cant-tell", "cant tell": "cant-tell",
              "cannot tell": "cant-tell"}
MAX_ANNOTATOR = 40
_ANNOTATOR = re.compile(r"^\w[\w.\-' \u2019]*$")


class SampleItem(msgspec.Struct, kw_only=True, frozen=True):
    """One verdict of the run, as a person labels it. `judge` (match / no match, what the
    no-rate counted: a malformed answer is a no match) is never shown on the page."""

    key: str  # the verdict's cache key (hex): its judge request's
    story: str
    group: str
    k: int
    pct: float
    part: str  # early / middle / late: pct < 1/3, < 2/3, else
    ending: int  # the ending's place among the position's endings (0-based)
    judge: str  # "match" or "no match"
    judge_raw: str | None = None
    shared: bool = False  # shown to every annotator (agreement between people)
    prefix: str = ""  # the story up to and with the anchor, s[0:k]
    continuation: str = ""  # what the judge saw as the true continuation: anchor + " " + s[k:] (cut)
    predicted: str = ""  # what the judge saw as the predicted ending: anchor + " " + ending


class Count(msgspec.Struct, kw_only=True, frozen=True):
    """The run's judged verdicts of one group and part, by the judge's answer: the
    population the sample stands for (each answer's items are weighted to its count)."""

    group: str
    part: str
    no: int
    yes: int


class Sample(msgspec.Struct, kw_only=True):
    """audit/sample.json: drawn once; `items` in the order people are shown them."""

    version: int = 1
    run: str
    seed: int
    size: int  # asked for
    shared: int  # items shown to every annotator
    drawn: str  # when (UTC, ISO 8601)
    judge_model: str = ""
    generation_model: str = ""
    counts: list[Count] = []
    items: list[SampleItem] = []
    notes: list[str] = []

    def population(self, group: str | None = None, part: str | None = None) -> tuple[int, int]:
        """(judge-no, judge-yes) verdicts of the run, of one group and/or part when given."""
        cs = [c for c in self.counts if (group is None or c.group == group) and (part is None or c.part == part)]
        return sum(c.no for c in cs), sum(c.yes for c in cs)


class Label(msgspec.Struct, kw_only=True, frozen=True):
    """One line of audit/labels.jsonl."""

    key: str
    annotator: str
    label: str
    time: str  # UTC, ISO 8601
    source: str = "view"  # "view", or "csv:FILE" for `audit import`


def sample_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / AUDIT_DIR / SAMPLE_FILE


def labels_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / AUDIT_DIR / LABELS_FILE


def now() -> str:
    """The time a label is given, UTC, to the millisecond."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def check_annotator(path: str, line: int, name: Any, field: str = "annotator") -> str:
    """An annotator's name: letters, digits, `_ . -`, apostrophes (O'Brien) and spaces inside, at
    most 40 characters; trimmed, its letters composed (NFC: a "ë" typed as e + ¨ is the same name)."""
    if not isinstance(name, str):
        raise InputError(path, line, field, f"expected a name, got {type(name).__name__}")
    shown = unicodedata.normalize("NFC", name.strip())
    if not shown or len(shown) > MAX_ANNOTATOR or not _ANNOTATOR.match(shown):
        raise InputError(path, line, field, f"expected a name of 1 to {MAX_ANNOTATOR} letters, digits, `_`, `.`, "
                                            f"`-`, `'` or spaces (not first), got {name!r}")
    return shown


def person(name: str, known: dict[str, str]) -> str:
    """The name a person goes by in the audit: the first spelling of it given (`known`: its
    casefold -> that spelling, updated), so "Anna" on the page and "anna" in a spreadsheet are
    one annotator, not two who always agree."""
    return known.setdefault(name.casefold(), name)


def names_of(labels: Iterable[Label]) -> dict[str, str]:
    """casefold -> the annotator's name as the labels give it (read_labels' are each person's first)."""
    return {lab.annotator.casefold(): lab.annotator for lab in labels}


def check_label_value(path: str, line: int, value: Any, field: str = "label") -> str:
    """A label: matches / does-not-match / cant-tell (y / n / s, yes / no and the page's words
    are read as those; case, runs of spaces, `_` for `-` and a typographic apostrophe, as a
    spreadsheet's autocorrect leaves them, do not matter)."""
    text = " ".join(value.lower().replace("\u2019", "'").replace("_", "-").split()) if isinstance(value, str) \
        else value
    if text in LABELS:
        return str(text)
    if isinstance(text, str) and text in LABEL_KEYS:
        return LABEL_KEYS[text]
    raise InputError(path, line, field, f"expected one of {', '.join(LABELS)} (or y, n, s; yes, no; does not "
                                        f"match, can't tell), got {value!r}")


# -- the sample -------------------------------------------------------------------------------

_sample_decoder = msgspec.json.Decoder(Sample)


def read_sample(run_dir: str | os.PathLike) -> Sample:
    """The run's audit/sample.json; InputError naming it when it is missing or not a sample."""
    p = sample_path(run_dir)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        if not (Path(run_dir) / "run.json").is_file():  # the advice below would only say so, one command later
            raise InputError(str(run_dir), 0, None, "not a score run folder (no run.json in it): the audit is of a "
                                                    "finished score run (its --out folder)") from None
        raise InputError(str(run_dir), 0, None, f"no audit sample here ({AUDIT_DIR}/{SAMPLE_FILE}): draw one with "
                                                f"`tension-run audit sample {shlex.quote(str(run_dir))}`") from None
    except OSError as e:
        raise InputError(str(p), 0, None, f"cannot be read: {e.strerror or e}") from None
    return decode_line(str(p), 0, raw, Sample, _sample_decoder)


def write_sample(run_dir: str | os.PathLike, sample: Sample) -> Path:
    """Write audit/sample.json whole (atomically)."""
    p = sample_path(run_dir)
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(p, msgspec.json.format(msgspec.json.encode(sample), indent=1) + b"\n")
    return p


# -- the labels -------------------------------------------------------------------------------

_label_encoder = msgspec.json.Encoder()
_label_decoder = msgspec.json.Decoder(Label)


def append_labels(run_dir: str | os.PathLike, labels: Sequence[Label]) -> Path:
    """Append `labels` to audit/labels.jsonl: under an exclusive flock, in one write of an
    O_APPEND descriptor, then fsync (the module's docstring). A last line a crash left
    without its newline is ended first, so it stays one bad line, not two."""
    p = labels_path(run_dir)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(_label_encoder.encode(x) + b"\n" for x in labels)
    if not data:
        return p
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size:
            with open(p, "rb") as f:  # the file's last byte (O_APPEND's descriptor cannot read)
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    data = b"\n" + data
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(p)) from e
    finally:
        os.close(fd)  # releases the lock
    return p


def read_labels(run_dir: str | os.PathLike, keys: Iterable[str] | None = None) -> tuple[list[Label], list[InputError]]:
    """Every label of audit/labels.jsonl in file order, and an InputError per bad line (not
    JSON, a cut line, an unknown label, a key not in the sample when `keys` is given). Each
    label as it is counted: a spelling the check accepts ("no", "Yes", "s") is the label it
    stands for, so the audit never counts a "no" as a match; a name is trimmed and is its
    person's first spelling in the file (`person`: "anna" after "Anna" is Anna)."""
    p = labels_path(run_dir)
    if not p.is_file():
        return [], []
    known = set(keys) if keys is not None else None
    out: list[Label] = []
    errors: list[InputError] = []
    names: dict[str, str] = {}
    for lineno, raw in iter_lines(p):
        try:
            lab = decode_line(str(p), lineno, raw, Label, _label_decoder)
            label = check_label_value(str(p), lineno, lab.label)
            who = person(check_annotator(str(p), lineno, lab.annotator), names)
            if (label, who) != (lab.label, lab.annotator):  # a spelling the check reads ("no", "Anna "): what it means
                lab = msgspec.structs.replace(lab, label=label, annotator=who)
            if known is not None and lab.key not in known:
                raise InputError(str(p), lineno, "key", f"{lab.key!r} is no verdict of the audit sample")
        except InputError as e:
            errors.append(e)
            continue
        out.append(lab)
    return out, errors


def latest(labels: Iterable[Label]) -> dict[str, dict[str, Label]]:
    """key -> annotator -> that annotator's latest label of the item (file order)."""
    out: dict[str, dict[str, Label]] = {}
    for lab in labels:
        out.setdefault(lab.key, {})[lab.annotator] = lab
    return out


# -- CSV --------------------------------------------------------------------------------------

CSV_COLUMNS = ("key", "story", "group", "k", "pct", "part", "shared", "prefix", "continuation", "predicted",
               "annotator", "label")


def sample_csv(sample: Sample, annotator: str | None = None, labels: Iterable[Label] = ()) -> str:
    """The sample as CSV for a spreadsheet or an annotation tool: one row per item, without
    the judge's answer; `annotator` and `label` to fill in (with `annotator` given, that
    person's labels so far are filled in and the shared items come first)."""
    have = latest(labels)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for it in sample.items:
        mine = have.get(it.key, {}).get(annotator) if annotator else None
        w.writerow([it.key, _as_text(it.story), _as_text(it.group), it.k, f"{it.pct:.4f}", it.part,
                    "yes" if it.shared else "no", _as_text(it.prefix), _as_text(it.continuation),
                    _as_text(it.predicted), annotator or "", mine.label if mine else ""])
    return buf.getvalue()


# A spreadsheet reads a cell that begins with one of these as a formula, evaluated on opening
# (`=HYPERLINK(…)` in an LLM's ending; a dialogue line "-Where…"): OWASP's "CSV injection".
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _as_text(cell: str) -> str:
    """A text cell of the export as a spreadsheet shows it: with the apostrophe it takes as
    "this is text" (and does not show) where it would read a formula. Only columns nobody
    reads back get it: key, label and annotator are imported as they are."""
    return "'" + cell if cell.startswith(_FORMULA_START) else cell


class CsvLabels(msgspec.Struct, kw_only=True):
    """What a labels CSV holds: its labels (checked), the rows left blank, and its errors."""

    labels: list[Label]
    blank: int  # rows with no label (not labelled yet)
    errors: list[InputError]


def read_label_csv(path: str | os.PathLike, keys: Iterable[str], annotator: str | None = None,
                   people: dict[str, str] | None = None) -> CsvLabels:
    """Labels from a CSV (or TSV) file with the columns `key`, `label` and `annotator`
    (`annotator` may be left out when given here). A row naming a key the sample does not
    hold, a label of another value, no annotator, or the same key and annotator as an
    earlier row is an InputError naming the file, the line and the column; a row with an
    empty label is not labelled yet (counted); the good rows are kept. A name is its person's
    (`people`: the names labels.jsonl holds; `person`), whatever its case in the file."""
    known = set(keys)
    name = str(path)
    stamp = now()
    seen: dict[tuple[str, str], int] = {}
    names: dict[str, str] = dict(people or {})
    blank = 0
    default = person(check_annotator(name, 0, annotator, "--annotator"), names) if annotator is not None else None

    def parse(file: str, line: int, row: dict[str, Any]) -> Label | None:
        nonlocal blank
        key = (row.get("key") or "").strip()
        if not key:
            raise InputError(file, line, "key", "missing: every row names the verdict's key (the column `key` of "
                                                "`tension-run audit export`)")
        if key not in known:
            raise InputError(file, line, "key", f"{key!r} is no verdict of the audit sample (was the sample drawn "
                                                "again since the export?)")
        if not (row.get("label") or "").strip():
            blank += 1
            return None
        label = check_label_value(file, line, row["label"])
        given = row.get("annotator")
        if given is None or not str(given).strip():
            if default is None:
                raise InputError(file, line, "annotator", "missing: name who labelled the row (or give "
                                                          "--annotator NAME for the whole file)")
            who = default
        else:
            who = check_annotator(file, line, given)
        who = person(who, names)
        if (key, who) in seen:
            raise InputError(file, line, "key", f"a second label of {key!r} by {who!r} (the first on line "
                                                f"{seen[key, who]}): keep one")
        seen[key, who] = line
        return Label(key=key, annotator=who, label=label, time=stamp, source=f"csv:{Path(name).name}")

    rows, errors = read_tabular(path, parse, required=("key", "label"), empty="labels")
    return CsvLabels(labels=[r for r in rows if r is not None], blank=blank, errors=errors)
