"""The one JSON Lines loop: blank lines, decoding, duplicate ids, an empty file."""

from __future__ import annotations

import functools

import msgspec
import pytest

from tension.core.errors import InputError
from tension.core.inputs import jsonl
from tension.core.inputs.jsonl import decode_line, read_records, string_field


class Rec(msgspec.Struct):
    id: str
    n: int


def _parse(path: str, lineno: int, obj: dict) -> Rec:
    return Rec(id=string_field(path, lineno, obj, "id"), n=lineno)


def test_all_is_exported():
    for name in jsonl.__all__:
        assert hasattr(jsonl, name), name


def test_records_in_order_with_an_error_per_bad_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_bytes(b'{"id": "a"}\n\n   \n{"id": 3}\n{"id": "b"}\nnot json\n{"id": "a"}\n\xff\n')
    items, errors = read_records(p, _parse)
    assert items == [Rec("a", 1), Rec("b", 5)]
    assert str(errors[0]) == (f"{p}:4 field `id`: expected a string, got a number (3); an id is text: write it as "
                              "\"3\", or make the column text (pandas: df['id'] = df['id'].astype(str))")
    assert str(errors[1]).startswith(f"{p}:6: not valid JSON (")
    assert str(errors[2]) == f"{p}:7 field `id`: duplicate id 'a' (first on line 1)"
    assert str(errors[3]).startswith(f"{p}:8: not valid UTF-8 (byte 0xff at column 1); the file reads as "
                                     "Windows-1252")  # and the way out: core/inputs/tabular.py's table of forms


def test_an_empty_file_is_an_error_only_when_named(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text("\n \n")
    assert read_records(p, _parse) == ([], [])
    items, errors = read_records(p, _parse, empty="stories")
    assert items == [] and [str(e) for e in errors] == [f"{p}: no stories (the file is empty)"]


def test_a_typed_decoder_and_another_id(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"id": "x", "n": 1}\n{"id": "y", "n": "2"}\n{"id": "z", "n": 1}\n')
    decode = functools.partial(decode_line, type=Rec, decoder=msgspec.json.Decoder(Rec))
    items, errors = read_records(p, lambda path, lineno, r: r, decode=decode, id_of=lambda r: str(r.n))
    assert items == [Rec("x", 1)]
    assert [str(e) for e in errors] == [f"{p}:2 field `n`: Expected `int`, got `str`",
                                        f"{p}:3 field `id`: duplicate id '1' (first on line 1)"]


def test_an_unreadable_file_raises(tmp_path):
    with pytest.raises(InputError, match="cannot open"):
        read_records(tmp_path / "missing.jsonl", _parse)


def test_write_together_puts_a_drawn_folder_in_place_whole_and_files_beside_it(tmp_path):
    """A folder drawn aside replaces the folder there whole (an earlier image does not stay);
    a drawn file joins the folder it goes to; nothing hidden is left."""
    from tension.core.inputs.jsonl import folder_aside, write_together

    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "old.png").write_bytes(b"old")
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "other.png").write_bytes(b"other")
    with folder_aside(tmp_path / "figures") as figs, folder_aside(tmp_path / "plots") as plots:
        (figs / "new.png").write_bytes(b"new")
        (plots / "plots" / "stories").mkdir(parents=True)
        (plots / "plots" / "stories" / "s.png").write_bytes(b"s")
        write_together({tmp_path / "report.md": "done\n"},
                       drawn={tmp_path / "figures": figs, tmp_path / "plots" / "stories" / "s.png":
                              plots / "plots" / "stories" / "s.png"})
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "figures", "figures/new.png", "plots", "plots/other.png", "plots/stories", "plots/stories/s.png",
        "report.md"]


def test_a_failed_drawing_names_the_output_not_its_hidden_folder(tmp_path):
    import errno

    from tension.core.inputs.jsonl import folder_aside

    with pytest.raises(OSError) as full, folder_aside(tmp_path / "figures"):
        raise OSError(errno.ENOSPC, "No space left on device")  # a full disk names no file
    assert full.value.filename == str(tmp_path / "figures")
    with pytest.raises(OSError) as missing, folder_aside(tmp_path / "figures") as figs:
        (figs / "curves" / "a.png").write_bytes(b"")
    assert missing.value.filename == str(tmp_path / "figures" / "curves" / "a.png")
    assert list(tmp_path.iterdir()) == []  # the hidden folder is gone
