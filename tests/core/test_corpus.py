"""Reading a corpus: JSON Lines and folders of .txt, errors naming file:line field."""

from __future__ import annotations

import json

import pytest

from tension.core.errors import InputError, TensionError
from tension.core.inputs import corpus as corpus_mod
from tension.core.inputs.corpus import DEFAULT_GROUP, Skipped, read_corpus


def _write(path, lines: list[bytes | str]) -> str:
    data = b"\n".join(l if isinstance(l, bytes) else l.encode() for l in lines) + b"\n"
    path.write_bytes(data)
    return str(path)


def _rec(**kw) -> str:
    return json.dumps(kw, ensure_ascii=False)


def test_all_is_exported():
    for name in corpus_mod.__all__:
        assert hasattr(corpus_mod, name), name


def test_default_group_is_all():
    assert DEFAULT_GROUP == "all"


# ---------------------------------------------------------------------- JSONL


@pytest.fixture
def mixed(tmp_path):
    """Good records interleaved with one of every bad kind; line numbers are fixed."""
    lines: list[bytes | str] = [
        _rec(id="a", text="alpha beta gamma", source="gutenberg", year=1900),  # 1 good
        "{bad json",  # 2
        "[1, 2, 3]",  # 3 not an object
        _rec(text="no id here"),  # 4
        _rec(id="b"),  # 5 no text
        _rec(id=7, text="numeric id"),  # 6
        _rec(id="c", text=["a", "list"]),  # 7
        _rec(id="d", text="   \n "),  # 8 empty text
        _rec(id="a", text="duplicate of line one"),  # 9
        b'{"id": "e", "text": "caf\xe9"}',  # 10 Latin-1 byte
        "",  # 11 blank
        "   \t ",  # 12 blank
        _rec(id="f", text="one two", group="G1"),  # 13 good
        '"just a string"',  # 14 not an object
        _rec(id="g", text="x", group=3),  # 15 group not a string
        _rec(id="h", text=None),  # 16 null text
        _rec(id="i", text="last good one"),  # 17 good
    ]
    return _write(tmp_path / "corpus.jsonl", lines)


def test_good_records_are_kept_in_file_order(mixed):
    c = read_corpus(mixed, min_words=0, max_words=100)
    assert [s.id for s in c.stories] == ["a", "f", "i"]
    assert c.stories[0].text == "alpha beta gamma"
    assert c.skipped == []
    assert c.path == mixed


def test_metadata_and_group(mixed):
    c = read_corpus(mixed, min_words=0, max_words=100)
    a, f, i = c.stories
    assert a.meta == {"source": "gutenberg", "year": 1900}
    assert a.group == "all"
    assert f.group == "G1"
    assert f.meta == {}
    assert i.group == DEFAULT_GROUP
    assert [s.words for s in c.stories] == [3, 2, 3]


def test_every_bad_record_is_an_error_with_file_line_and_field(mixed):
    c = read_corpus(mixed, min_words=0, max_words=100)
    got = {e.line: e for e in c.errors}
    assert sorted(got) == [2, 3, 4, 5, 6, 7, 8, 9, 10, 14, 15, 16]
    p = mixed

    def check(line, field, *parts):
        e = got[line]
        assert isinstance(e, InputError) and isinstance(e, TensionError)
        assert e.path == p and e.line == line and e.field == field
        prefix = f"{p}:{line} field `{field}`: " if field else f"{p}:{line}: "
        assert str(e).startswith(prefix), str(e)
        for part in parts:
            assert part in str(e), (part, str(e))

    check(2, None, "not valid JSON")
    check(3, None, "Expected `object`, got `array`")
    check(4, "id", "missing required field")
    check(5, "text", "missing required field")
    check(6, "id", "expected a string, got a number")
    check(7, "text", "expected a string, got an array")
    check(8, "text", "empty text")
    check(9, "id", "duplicate id 'a'", "first on line 1")
    check(10, None, "not valid UTF-8", "0xe9")
    check(14, None, "Expected `object`, got `str`")
    check(15, "group", "expected a string, got a number")
    check(16, "text", "expected a string, got null")


def test_error_message_exact_forms(mixed):
    c = read_corpus(mixed, min_words=0, max_words=100)
    msgs = {e.line: str(e) for e in c.errors}
    assert msgs[4] == f"{mixed}:4 field `id`: missing required field"
    assert msgs[6] == (f"{mixed}:6 field `id`: expected a string, got a number (7); an id is text: write it as "
                       "\"7\", or make the column text (pandas: df['id'] = df['id'].astype(str))")
    assert msgs[8] == f"{mixed}:8 field `text`: empty text"
    assert msgs[9] == f"{mixed}:9 field `id`: duplicate id 'a' (first on line 1)"
    # the column of the bad byte is 1-based: b'{"id": "e", "text": "caf' is 24 bytes
    assert msgs[10].startswith(f"{mixed}:10: not valid UTF-8 (byte 0xe9 at column 25); the file reads as "
                               "Windows-1252")


def test_blank_lines_are_ignored_not_errors(tmp_path):
    p = _write(tmp_path / "c.jsonl", ["", _rec(id="a", text="x y"), "  ", "", _rec(id="b", text="z")])
    c = read_corpus(p, min_words=0, max_words=10)
    assert [s.id for s in c.stories] == ["a", "b"]
    assert c.errors == []


def test_duplicate_of_a_bad_record_is_not_a_duplicate(tmp_path):
    # the first "a" is an error, so the second is the first valid "a"
    p = _write(tmp_path / "c.jsonl", [_rec(id="a", text=""), _rec(id="a", text="fine text")])
    c = read_corpus(p, min_words=0, max_words=10)
    assert [s.id for s in c.stories] == ["a"]
    assert [(e.line, e.field) for e in c.errors] == [(1, "text")]


def test_blank_id_is_an_error(tmp_path):
    p = _write(tmp_path / "c.jsonl", [_rec(id="  ", text="x")])
    (e,) = read_corpus(p, min_words=0).errors
    assert (e.line, e.field) == (1, "id")
    assert "non-empty" in str(e)


@pytest.mark.parametrize("content", [b"", b"\n\n   \n"])
def test_empty_file_is_an_error(tmp_path, content):
    p = tmp_path / "empty.jsonl"
    p.write_bytes(content)
    c = read_corpus(p)
    assert c.stories == []
    (e,) = c.errors
    assert e.line == 0 and e.field is None
    assert str(e) == f"{p}: no stories (the file is empty)"


def test_file_of_only_bad_records_is_not_reported_empty(tmp_path):
    p = _write(tmp_path / "c.jsonl", ["nope"])
    c = read_corpus(p)
    assert len(c.errors) == 1
    assert "empty" not in str(c.errors[0])


def test_missing_file_raises_input_error(tmp_path):
    p = tmp_path / "nope.jsonl"
    with pytest.raises(InputError) as ei:
        read_corpus(p)
    assert str(p) in str(ei.value)
    assert "cannot open" in str(ei.value)


# ---------------------------------------------------------------- word filter


def _story(n: int) -> str:
    # words separated by assorted whitespace; punctuation does not split words
    return "\n".join(f"w{i}," if i % 3 else f"\tw{i}." for i in range(n))


@pytest.mark.parametrize("given, lo, hi", [({"min_words": 5, "max_words": 8}, 5, 8), ({}, 500, 5000)],
                         ids=["given", "default"])
def test_word_filter_bounds_are_inclusive_with_reasons(tmp_path, given, lo, hi):
    """The bounds given, and the defaults 500 and 5000, keep both ends and say why
    they skip a story."""
    p = _write(tmp_path / "c.jsonl", [_rec(id=f"{n}", text=_story(n)) for n in (lo - 1, lo, hi, hi + 1)])
    c = read_corpus(p, **given)
    assert [s.id for s in c.stories] == [f"{lo}", f"{hi}"]
    assert [s.words for s in c.stories] == [lo, hi]
    assert c.skipped == [
        Skipped(id=f"{lo - 1}", reason=f"{lo - 1} words, fewer than --min-words {lo}"),
        Skipped(id=f"{hi + 1}", reason=f"{hi + 1} words, more than --max-words {hi}"),
    ]
    assert c.errors == []


# --------------------------------------------------------------------- folder


def test_folder_of_txt_files(tmp_path):
    d = tmp_path / "stories"
    d.mkdir()
    (d / "b-story.txt").write_text("Bee text here.", encoding="utf-8")
    (d / "a.story.txt").write_text("Caf\u00e9 au lait.", encoding="utf-8")
    (d / "notes.md").write_text("not a story", encoding="utf-8")
    (d / "sub.txt").mkdir()  # a folder named like a story is not read
    c = read_corpus(d, min_words=0, max_words=10)
    assert [(s.id, s.text, s.group) for s in c.stories] == [
        ("a.story", "Caf\u00e9 au lait.", "all"),
        ("b-story", "Bee text here.", "all"),
    ]
    assert [s.words for s in c.stories] == [3, 3]
    assert c.errors == []


def test_folder_non_utf8_and_empty_files_are_errors(tmp_path):
    d = tmp_path / "stories"
    d.mkdir()
    (d / "good.txt").write_text("fine words", encoding="utf-8")
    (d / "latin.txt").write_bytes(b"abc caf\xe9")
    (d / "blank.txt").write_text("  \n", encoding="utf-8")
    c = read_corpus(d, min_words=0, max_words=10)
    assert [s.id for s in c.stories] == ["good"]
    errs = {e.path: e for e in c.errors}
    latin = errs[str(d / "latin.txt")]
    assert latin.line == 0
    assert str(latin) == f"{d / 'latin.txt'}: not valid UTF-8 (byte offset 7)"
    blank = errs[str(d / "blank.txt")]
    assert blank.field == "text"
    assert str(blank) == f"{d / 'blank.txt'} field `text`: empty text"


def test_empty_folder_is_an_error(tmp_path):
    d = tmp_path / "none"
    d.mkdir()
    (d / "readme.md").write_text("x", encoding="utf-8")
    c = read_corpus(d)
    assert c.stories == []
    (e,) = c.errors
    assert str(e) == f"{d}: no .txt files in this folder"


def test_folder_word_filter(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "short.txt").write_text("one two", encoding="utf-8")
    (d / "ok.txt").write_text("one two three", encoding="utf-8")
    c = read_corpus(d, min_words=3, max_words=3)
    assert [s.id for s in c.stories] == ["ok"]
    assert c.skipped == [Skipped(id="short", reason="2 words, fewer than --min-words 3")]


def test_crlf_line_endings(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_bytes(("\r\n".join([_rec(id="a", text="x y"), "", _rec(id="b", text="z")]) + "\r\n").encode())
    c = read_corpus(p, min_words=0, max_words=10)
    assert [(s.id, s.text) for s in c.stories] == [("a", "x y"), ("b", "z")]
    assert c.errors == []
