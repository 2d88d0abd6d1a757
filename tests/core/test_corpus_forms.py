"""One reader contract for every corpus form (issue 58, item 1; C3–C16 and C24 of
../shared/reviews/newuser-2026-12-07.md): JSON Lines, CSV, TSV, Parquet, a pandas
DataFrame and a datasets.Dataset get the same checks, the same skip-and-go-on and
the same messages. One table of bad inputs is run against every form: each case
puts its bad row between two good stories, scores the corpus (files by the CLI,
rows in memory by the API, against the in-process server) and asserts the message
(file, the line where the row begins, the field), the exit status and that both
good stories are scored. Delimited files have cases of their own (cells, the
delimiter, the encoding); advice a message gives is followed as printed."""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tension
from tension.testing.corpus import make_corpus

pytestmark = pytest.mark.in_process

FORMS = ("jsonl", "csv", "tsv", "parquet", "dataframe", "dataset")
FILES = ("jsonl", "csv", "tsv", "parquet")
GOOD = ("story-000", "story-001")
LONG = "word " * 28_000  # 140,000 characters: over the csv module's 131,072 field limit, and over --max-words


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> list[dict]:
    """Two valid stories of several paragraphs (a CSV row of each spans lines)."""
    src = make_corpus(tmp_path_factory.mktemp("good") / "g.jsonl", 2, seed=3)
    return [json.loads(line) for line in src.read_text().splitlines()]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One cache for the module: the good stories' answers are asked once."""
    return tmp_path_factory.mktemp("cache")


# --- writing the same rows in every form ----------------------------------------------


@dataclass
class Given:
    value: Any  # what is scored: a path, a DataFrame, a Dataset
    where: str  # the file messages name
    lines: list[int]  # the line (row number) messages give each row, in order


def _cell(v: Any) -> str:
    return "" if v is None else str(v)


def write(form: str, tmp: Path, rows: list[dict], out: Path, header: list[str] | None = None) -> Given:
    """`rows` as a corpus of `form`; `header` names the columns (default: the rows' keys)."""
    names = header or list(dict.fromkeys(k for r in rows for k in r))
    if form == "jsonl":
        p = tmp / "c.jsonl"
        # a missing value is a field left out, as a CSV's empty cell and a frame's NaN are
        p.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in rows))
        return Given(p, str(p), list(range(1, len(rows) + 1)))
    if form in ("csv", "tsv"):
        p = tmp / f"c.{form}"
        return Given(p, str(p), write_delimited(p, names, [[_cell(r.get(n)) for n in names] for r in rows],
                                                "," if form == "csv" else "\t"))
    if form == "parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        p = tmp / "c.parquet"
        pq.write_table(pa.table({n: [r.get(n) for r in rows] for n in names}), p)
        return Given(p, str(p), list(range(1, len(rows) + 1)))
    lines = list(range(1, len(rows) + 1))
    where = str(out / "corpus.jsonl")
    if form == "dataframe":
        pd = pytest.importorskip("pandas")
        return Given(pd.DataFrame([{n: r.get(n) for n in names} for r in rows], columns=names), where, lines)
    datasets = pytest.importorskip("datasets")
    return Given(datasets.Dataset.from_dict({n: [r.get(n) for r in rows] for n in names}), where, lines)


def write_delimited(p: Path, header: list[str], rows: list[list[str]], delimiter: str = ",",
                    encoding: str = "utf-8") -> list[int]:
    """A delimited file (quoted where needed); the line each row begins on."""
    def render(cells: list[str]) -> str:
        buf = io.StringIO()
        csv.writer(buf, delimiter=delimiter, lineterminator="\n").writerow(cells)
        return buf.getvalue()

    text, starts, line = render(header), [], 2
    for r in rows:
        starts.append(line)
        one = render(r)
        text += one
        line += one.count("\n")
    p.write_bytes(text.encode(encoding))
    return starts


# --- scoring a corpus, as a user would ----------------------------------------------


@dataclass
class Outcome:
    rc: int
    errors: list[str]  # each error as the user sees it (the CLI's "error: " left off)
    said: str  # everything the command printed, or the result's repr
    scored: list[str]  # ids positions.jsonl holds


def score(server, given: Given, out: Path, cache: Path, tension_run, **api: Any) -> Outcome:
    """Files by the CLI, rows in memory by the API (the way each is given)."""
    settings = {"base-url": server.base_url, "model": "test-gen", "endings": "3", "seed": "1",
                "cache": str(cache), "out": str(out)}
    if isinstance(given.value, Path):
        p = tension_run("score", given.value, *(x for k, v in settings.items() for x in (f"--{k}", v)),
                        "--no-progress", "--no-report")
        errors = [line[len("error: "):] for line in p.stderr.splitlines() if line.startswith("error: ")]
        rc, said = p.returncode, p.stdout + p.stderr
    else:
        r = tension.score(given.value, out=out, base_url=server.base_url, model="test-gen", endings=3, seed=1,
                          cache=str(cache), progress=False, report=False, **api)
        rc, errors, said = r.exit_status, list(r.errors), r._repr_html_()
        assert r.status in ("complete", "failed")
        if errors:  # the result says what is missing, in its repr too (C24)
            assert "exit status 1" in said and errors[0].replace("'", "&#x27;").replace("`", "`") in said
    positions = out / "positions.jsonl"
    scored = [json.loads(x)["id"] for x in positions.read_text().splitlines()] if positions.exists() else []
    return Outcome(rc, errors, said, list(dict.fromkeys(scored)))


# --- the table of bad rows ---------------------------------------------------------


@dataclass
class Bad:
    row: Callable[[list[dict]], dict]  # the bad row, put between the two good stories
    field: str | None
    message: str  # after "FILE:LINE field `F`: "; {first} is the line of the first good story
    rc: int = 1


BAD = {
    "duplicate id": Bad(lambda g: {"id": "story-000", "text": g[1]["text"], "group": "a"}, "id",
                        "duplicate id 'story-000' (first on line {first})"),
    "missing text": Bad(lambda g: {"id": "b", "text": None, "group": "a"}, "text", "missing required field"),
    "blank id": Bad(lambda g: {"id": "  ", "text": g[0]["text"], "group": "a"}, "id", "expected a non-empty string"),
    # not an error: the word filter skips it, in every form (C11: the csv module's limit rejected the file)
    "text over the csv field limit": Bad(lambda g: {"id": "long", "text": LONG, "group": "a"}, None, "", rc=0),
}


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("form", FORMS)
def test_a_bad_row_in_any_corpus_form_is_named_and_the_other_stories_are_scored(server, tmp_path, good, cache,
                                                                                tension_run, form, case):
    bad = BAD[case]
    rows = [good[0], bad.row(good), good[1]]
    out = tmp_path / "out"
    given = write(form, tmp_path, [{k: r.get(k) for k in ("id", "text", "group")} for r in rows], out)
    got = score(server, given, out, cache, tension_run)
    assert got.rc == bad.rc, got.said
    assert got.scored == list(GOOD), got.said
    if bad.rc == 0:
        assert got.errors == [], got.errors
        assert "skipped" in got.said or form in ("dataframe", "dataset")
        return
    where = f"{given.where}:{given.lines[1]}" + (f" field `{bad.field}`" if bad.field else "")
    assert got.errors == [f"{where}: {bad.message.format(first=given.lines[0])}"]


# --- names of columns (C13, C15) ------------------------------------------------------

COLUMNS = {"story_id, body": {"id": "story_id", "text": "body"}, "ID, Text": {"id": "ID", "text": "Text"}}


@pytest.mark.parametrize("named", list(COLUMNS))
@pytest.mark.parametrize("form", FORMS)
def test_columns_named_otherwise_are_listed_with_the_mapping_and_the_advice_works(server, tmp_path, good, cache,
                                                                                  tension_run, form, named):
    mapping = COLUMNS[named]
    rows = [{mapping["id"]: r["id"], mapping["text"]: r["text"], "group": r["group"]} for r in good]
    out = tmp_path / "out"
    given = write(form, tmp_path, rows, out)
    got = score(server, given, out, cache, tension_run)
    assert got.rc == 1 and got.scored == [], got.said
    listed = f"`{mapping['id']}`, `{mapping['text']}`, `group`"
    cased = ("; names are case-sensitive: `ID` is `id` in another case, `Text` is `text` in another case"
             if named == "ID, Text" else "")
    advice = repr(mapping).replace('"', "'")
    if form in ("csv", "tsv", "parquet"):  # the header, once
        line = 0 if form == "parquet" else 1
        assert got.errors == [f"{given.where}{':1' if line else ''}: no column `id` and `text` (the header's "
                              f"columns: {listed}){cased}; name the columns `id` and `text` in the header (line 1), "
                              f"or read the file into a DataFrame and give it with columns={advice} (Python: "
                              "tension.score(frame, columns=…))"]
        if form == "parquet":
            return
        # the advice, as printed: name the columns in line 1
        text = given.value.read_text()
        head, rest = text.split("\n", 1)
        given.value.write_text(head.replace(mapping["id"], "id", 1).replace(mapping["text"], "text", 1)
                               + "\n" + rest)
    else:  # every record says it: JSON Lines has no header
        assert got.errors == [f"{given.where}:{n} field `id`: no field `id` and `text` (the record's fields: "
                              f"{listed}){cased}; rows in memory (a DataFrame, a Dataset) are renamed by "
                              f"columns={advice}" for n in given.lines]
        if form == "jsonl":
            return
    # the advice, as printed: columns=… for rows in memory
    printed = re.search(r"columns=(\{[^}]*\})", got.errors[0])
    assert printed is not None
    again = tmp_path / "again"
    extra = {} if isinstance(given.value, Path) else {"columns": eval(printed.group(1))}  # noqa: S307 (our own text)
    done = score(server, given, again, cache, tension_run, **extra)
    assert (done.rc, done.errors, done.scored) == (0, [], list(GOOD)), done.said


# --- delimited files: cells, delimiter, encoding ---------------------------------------------


@pytest.mark.parametrize("form", ["csv", "tsv"])
@pytest.mark.parametrize("case", ["too few cells", "too many cells"])
def test_a_row_of_too_few_or_too_many_cells_is_skipped_with_its_line(server, tmp_path, good, cache, tension_run,
                                                                    form, case):
    d = "," if form == "csv" else "\t"
    p = tmp_path / f"c.{form}"
    bad = ["b"] if case == "too few cells" else ["b", "some text", "a", "extra"]
    lines = write_delimited(p, ["id", "text", "group"], [[good[0]["id"], good[0]["text"], "a"], bad,
                                                         [good[1]["id"], good[1]["text"], "b"]], d)
    got = score(server, Given(p, str(p), lines), tmp_path / "out", cache, tension_run)
    assert (got.rc, got.scored) == (1, list(GOOD)), got.said
    if case == "too few cells":
        want = (f"{p}:{lines[1]} field `text`: missing: the row has 1 cells where the header has 3 columns "
                "(id, text, group)")
    else:
        shown = "','" if form == "csv" else "tab"
        want = (f"{p}:{lines[1]}: 4 cells where the header has 3 columns (id, text, group); a cell that holds "
                f"the delimiter ({shown}) must be quoted (\"…\")")
    assert got.errors == [want]
    assert "1 stories failed (see above); the others were scored" in got.said


@pytest.mark.parametrize(("name", "delimiter"), [("semi.csv", ";"), ("tab.csv", "\t"), ("pipe.csv", "|"),
                                                 ("comma.tsv", ",")])
def test_the_delimiter_is_read_off_the_header(server, tmp_path, good, cache, tension_run, name, delimiter):
    """C3, C16: a `;` or tab delimited .csv (and a comma-separated .tsv) reads as its header is written."""
    p = tmp_path / name
    lines = write_delimited(p, ["id", "text", "group"], [[r["id"], r["text"], r["group"]] for r in good], delimiter)
    got = score(server, Given(p, str(p), lines), tmp_path / "out", cache, tension_run)
    assert (got.rc, got.errors, got.scored) == (0, [], list(GOOD)), got.said


def test_a_tsv_file_is_read_as_tab_separated_not_as_json_lines(tmp_path, good):
    from tension.core.inputs.corpus import read_corpus

    p = tmp_path / "c.tsv"
    write_delimited(p, ["id", "text", "group"], [[r["id"], r["text"], r["group"]] for r in good], "\t")
    c = read_corpus(p, 0, 10**9)
    assert ([s.id for s in c.stories], c.errors) == (list(GOOD), [])
    assert [s.text for s in c.stories] == [r["text"] for r in good]


def test_a_cp1252_export_names_line_field_and_byte_and_its_iconv_advice_works(server, tmp_path, good, cache,
                                                                            tension_run):
    """C4: an Excel (cp1252) export: each row with a byte that is not UTF-8 is its own error (the line
    the row begins on, the line and column of the byte, the field), the others are read; the iconv
    command the message gives, run as printed, makes a file that scores."""
    p = tmp_path / "excel.csv"
    plain = [r["text"].replace("\u201c", '"').replace("\u201d", '"') for r in good]  # ASCII: UTF-8 as well
    text = plain[1].replace("keeper", "keeper\u2019s", 1)
    lines = write_delimited(p, ["id", "text", "group"], [[good[0]["id"], plain[0], "a"], ["quoted", text, "b"],
                                                         [good[1]["id"], plain[1], "b"]], encoding="cp1252")
    got = score(server, Given(p, str(p), lines), tmp_path / "out", cache, tension_run)
    assert (got.rc, got.scored) == (1, list(GOOD)), got.said
    (err,) = got.errors
    head = f"{p}:{lines[1]} field `text`: not valid UTF-8 (byte 0x92 at "
    assert err.startswith(head), err
    raw = p.read_bytes().split(b"\n")
    at = next(i for i, line in enumerate(raw, 1) if b"\x92" in line)
    column = raw[at - 1].index(b"\x92") + 1
    where = f"column {column}" if at == lines[1] else f"line {at}, column {column}"
    converted = tmp_path / "excel.utf8.csv"
    assert err == (f"{head[:-len('at ')]}at {where}); the file reads as Windows-1252 (cp1252, as Excel and older "
                   f"Windows tools save text; the byte is '\u2019' there): convert it to UTF-8 and read the new "
                   f"file: iconv -f CP1252 -t UTF-8 {p} > {converted}")
    command = err.split("read the new file: ", 1)[1]
    subprocess.run(command, shell=True, check=True, cwd=tmp_path)  # as printed
    done = score(server, Given(converted, str(converted), lines), tmp_path / "again", cache, tension_run)
    assert (done.rc, done.errors, done.scored) == (0, [], [GOOD[0], "quoted", GOOD[1]]), done.said


def test_a_cp1252_json_lines_file_gets_the_same_advice(tmp_path, good):
    from tension.core.inputs.corpus import read_corpus

    p = tmp_path / "c.jsonl"
    p.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in good)
                  + b'{"id": "q", "text": "It\x92s late."}\n')
    c = read_corpus(p, 0, 10**9)
    assert [s.id for s in c.stories] == list(GOOD)
    assert [str(e) for e in c.errors] == [
        f"{p}:3: not valid UTF-8 (byte 0x92 at column 24); the file reads as Windows-1252 (cp1252, as Excel "
        f"and older Windows tools save text; the byte is '\u2019' there): convert it to UTF-8 and read the new "
        f"file: iconv -f CP1252 -t UTF-8 {shlex.quote(str(p))} > {shlex.quote(str(tmp_path / 'c.utf8.jsonl'))}"]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_file_of_mixed_encodings_is_not_told_to_convert_whole(tmp_path, good, suffix):
    """One Windows-1252 record among UTF-8 ones (curly quotes): converting the whole file, as the
    advice for a cp1252 file says, would garble the UTF-8 stories (“ becomes â€œ) or stop iconv
    half-way on a byte cp1252 lacks (” is e2 80 9d): the error says the file mixes encodings and
    names a UTF-8 line; the UTF-8 stories are read as written."""
    from tension.core.inputs.corpus import read_corpus

    assert all("\u201c" in r["text"] for r in good)  # UTF-8 beyond ASCII in every good story
    p = tmp_path / f"c{suffix}"
    bad = "Caf\u00e9 au lait, said the keeper.".encode("cp1252")
    if suffix == ".csv":
        write_delimited(p, ["id", "text"], [[r["id"], r["text"]] for r in good])
        p.write_bytes(p.read_bytes() + b'q,"' + bad + b'"\n')
        line, field, column = p.read_bytes().count(b"\n"), "text", 7
    else:
        p.write_bytes(b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in good)
                      + b'{"id": "q", "text": "' + bad + b'"}\n')
        line, field, column = 3, None, 25
    utf8 = next(n for n, raw in enumerate(p.read_bytes().split(b"\n"), 1) if not raw.isascii())  # the first
    c = read_corpus(p, 0, 10**9)
    assert [(s.id, s.text) for s in c.stories] == [(r["id"], r["text"]) for r in good]
    (err,) = c.errors
    assert (err.line, err.field) == (line, field)
    assert err.message == (f"not valid UTF-8 (byte 0xe9 at column {column}); the file mixes encodings: line {utf8} is "
                           "UTF-8 beyond ASCII, which converting the whole file (iconv) would garble: save this "
                           "record's text as UTF-8 (it reads as Windows-1252, where the byte is 'é') and read the "
                           "file again")
    assert "iconv -f" not in str(err)


def test_a_quoted_multi_line_row_is_named_by_the_line_it_begins_on(tmp_path, good):
    """C14: the error's line is where the row begins, not where its quoted text ends."""
    from tension.core.inputs.corpus import read_corpus

    p = tmp_path / "c.csv"
    lines = write_delimited(p, ["story", "text"], [["x", good[0]["text"]]])
    assert lines == [2] and good[0]["text"].count("\n") > 0
    p2 = tmp_path / "d.csv"
    starts = write_delimited(p2, ["id", "text"], [[good[0]["id"], good[0]["text"]], [" ", good[1]["text"]]])
    c = read_corpus(p2, 0, 10**9)
    assert [(e.line, e.field) for e in c.errors] == [(starts[1], "id")]
    assert starts[1] > 3  # the first row spans lines


def test_duplicate_ids_in_a_csv_are_refused_as_in_json_lines(tmp_path, good):
    """C7 (the same in Parquet: the table above): lookalike ids too."""
    from tension.core.inputs.corpus import read_corpus

    p = tmp_path / "c.csv"
    starts = write_delimited(p, ["id", "text"], [["caf\u00e9", good[0]["text"]], ["cafe\u0301", good[1]["text"]]])
    c = read_corpus(p, 0, 10**9)
    assert [str(e) for e in c.errors] == [
        f"{p}:{starts[1]} field `id`: duplicate id 'cafe\u0301' (first on line {starts[0]} as 'caf\u00e9': the same "
        "id after Unicode normalisation (NFC) and trimming)"]


@pytest.mark.parametrize("form", ("csv", "tsv", "parquet", "dataframe"))
def test_a_column_named_twice_is_refused_not_read_as_one_of_them(tmp_path, good, form):
    """A header naming `text` twice (a spreadsheet's copied column, a join's) was read as one
    of them without a word: the later cell where it held anything, else the earlier, so a
    story could be another column's text. Which one is meant the file does not say: it is one
    error for the file, naming the column and where it stands, in every form that can hold
    it (a Dataset cannot). Columns without a name (a spreadsheet's trailing empty ones) are
    not columns the reader reads, and are left alone."""
    from tension.core.errors import ConfigError
    from tension.core.inputs.corpus import read_corpus

    rows = [{"id": g["id"], "text": g["text"], "text2": "a caption, not the story"} for g in good]
    header = ["id", "text", "text"]
    if form in ("csv", "tsv"):
        p = tmp_path / f"c.{form}"
        write_delimited(p, header, [[r["id"], r["text"], r["text2"]] for r in rows], "," if form == "csv" else "\t")
    elif form == "parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        p = tmp_path / "c.parquet"
        arrays = [pa.array([r[k] for r in rows]) for k in ("id", "text", "text2")]
        pq.write_table(pa.Table.from_arrays(arrays, names=header), p)
    if form == "dataframe":
        pd = pytest.importorskip("pandas")
        frame = pd.DataFrame([[r["id"], r["text"], r["text2"]] for r in rows], columns=header)
        with pytest.raises(ConfigError, match=r"the column 'text' is named twice \(columns 2 and 3\)"):
            tension.score(frame, out=tmp_path / "out", base_url="http://127.0.0.1:9", model="m", progress=False)
        return
    c = read_corpus(p, 0, 10**9)
    assert c.stories == []
    assert [str(e) for e in c.errors] == [
        f"{p}{'' if form == 'parquet' else ':1'}: the column 'text' is named twice (columns 2 and 3): which one is "
        "meant the file does not say; rename or remove one and read the file again"]


def test_columns_without_a_name_are_left_alone(tmp_path, good):
    """A spreadsheet's export with empty trailing columns (`id,text,,`): read as before."""
    from tension.core.inputs.corpus import read_corpus

    p = tmp_path / "c.csv"
    write_delimited(p, ["id", "text", "", ""], [[g["id"], g["text"], "", ""] for g in good])
    c = read_corpus(p, 0, 10**9)
    assert (c.errors, [s.id for s in c.stories]) == ([], [g["id"] for g in good])


def test_a_label_csv_naming_a_column_twice_is_refused_as_a_corpus_is(tmp_path):
    """The audit's label import reads through the same reader: a sheet with `label` twice (the
    judge's copied beside a person's) would count one of them as the person's answer."""
    from tension.core.inputs.labels import read_label_csv

    p = tmp_path / "labels.csv"
    write_delimited(p, ["key", "label", "label"], [["k1", "matches", "does-not-match"]])
    got = read_label_csv(p, ["k1"], annotator="ann")
    assert got.labels == []
    assert [str(e) for e in got.errors] == [
        f"{p}:1: the column 'label' is named twice (columns 2 and 3): which one is meant the file does not say; "
        "rename or remove one and read the file again"]
