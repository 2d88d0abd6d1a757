"""UTF-16 inputs and what a .txt folder leaves out (issue 36 N9; docs/reliability.md
"Inputs and settings")."""

from __future__ import annotations

import json

import pytest

from tension.core.inputs.corpus import read_corpus

TEXT = "Ünter den Linden stand sie. " * 30


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_a_utf16_txt_file_with_its_byte_order_mark_is_read(tmp_path, encoding, capsys):
    bom = {"utf-16": b"", "utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff"}[encoding]
    (tmp_path / "a.txt").write_bytes(bom + TEXT.encode(encoding))
    c = read_corpus(tmp_path, min_words=0)
    assert [(s.id, s.text) for s in c.stories] == [("a", TEXT)] and not c.errors
    assert capsys.readouterr().err == ""


def test_a_txt_folder_reads_upper_case_names_and_says_what_it_skips(tmp_path, capsys):
    (tmp_path / "G.TXT").write_text(TEXT)
    (tmp_path / "h.txt").write_text(TEXT)
    (tmp_path / "notes.md").write_text("x")
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "i.txt").write_text(TEXT)
    c = read_corpus(tmp_path, min_words=0)
    assert [s.id for s in c.stories] == ["G", "h"]
    assert capsys.readouterr().err == (f"note: {tmp_path}: 2 entries skipped, not .txt files (subfolders are not "
                                       "read): more/, notes.md\n")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_utf16_json_lines_file_is_named_as_utf16(tmp_path, encoding):
    p = tmp_path / "c.jsonl"
    text = json.dumps({"id": "a", "text": TEXT}) + "\n"
    p.write_bytes((b"\xfe\xff" if encoding == "utf-16-be" else b"") + text.encode(encoding))
    c = read_corpus(p, min_words=0)
    assert not c.stories
    assert [str(e) for e in c.errors] == [f"{p}: UTF-16 (its byte-order mark says so); the corpus is read as UTF-8: "
                                          f"convert it (iconv -f UTF-16 -t UTF-8 {p})"]
