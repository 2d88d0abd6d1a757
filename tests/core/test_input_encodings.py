"""UTF-16 inputs and what a .txt folder leaves out (issue 36 N9; docs/reliability.md
"Inputs and settings")."""

from __future__ import annotations

import json
import shlex
import subprocess

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


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".tsv"])
@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_utf16_file_is_named_as_utf16_and_its_iconv_advice_works_as_printed(tmp_path, encoding, suffix):
    # the advice wrote the JSON Lines file's conversion to the terminal (no `> new file`), and did not
    # quote a path with a space in it
    folder = tmp_path / "my stories"
    folder.mkdir()
    p = folder / f"c{suffix}"
    if suffix == ".jsonl":
        text = json.dumps({"id": "a", "text": TEXT}) + "\n"
    else:
        sep = "\t" if suffix == ".tsv" else ","
        text = f"id{sep}text\r\na{sep}{TEXT}\r\n"
    p.write_bytes((b"\xfe\xff" if encoding == "utf-16-be" else b"") + text.encode(encoding))
    c = read_corpus(p, min_words=0)
    assert not c.stories
    what = "the corpus" if suffix == ".jsonl" else "the file"
    converted = folder / f"c.utf8{suffix}"
    assert [str(e) for e in c.errors] == [f"{p}: UTF-16 (its byte-order mark says so); {what} is read as UTF-8: "
                                          f"convert it to UTF-8 and read the new file: iconv -f UTF-16 -t UTF-8 "
                                          f"{shlex.quote(str(p))} > {shlex.quote(str(converted))}"]
    command = str(c.errors[0]).split("read the new file: ", 1)[1]
    subprocess.run(command, shell=True, check=True, cwd=tmp_path)  # as printed
    again = read_corpus(converted, min_words=0)
    assert ([(s.id, s.text.rstrip()) for s in again.stories], again.errors) == ([("a", TEXT.rstrip())], [])


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16"])
def test_one_txt_file_is_one_story_as_in_a_folder(tmp_path, encoding):
    # a .txt file given as the corpus was read as JSON Lines: one `not valid JSON` error a paragraph
    p = tmp_path / "My Story.TXT"
    p.write_bytes(TEXT.encode(encoding))
    c = read_corpus(p, min_words=0)
    assert ([(s.id, s.text) for s in c.stories], c.errors) == ([("My Story", TEXT)], [])
    (tmp_path / "empty.txt").write_text("\n")
    assert [str(e) for e in read_corpus(tmp_path / "empty.txt", min_words=0).errors] == [
        f"{tmp_path / 'empty.txt'} field `text`: empty text"]


@pytest.mark.in_process
@pytest.mark.parametrize("verb", ["score", "estimate"])
def test_score_and_estimate_read_one_txt_file_as_its_folder(server, tmp_path, capsys, verb):
    from tension.core.cli import main
    from tension.testing.corpus import make_corpus

    story = json.loads(make_corpus(tmp_path / "c.jsonl", 1, seed=5).read_text().splitlines()[0])
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "tale.txt").write_text(story["text"], encoding="utf-8")
    said = {}
    for name, corpus in (("file", folder / "tale.txt"), ("folder", folder)):
        argv = [verb, str(corpus), "--base-url", server.base_url, "--model", "test-gen", "--no-progress",
                "--tokenizer", "words", "--cache", str(tmp_path / "cache")]
        if verb == "score":
            argv += ["--out", str(tmp_path / name), "--endings", "2", "--no-report"]
        capsys.readouterr()
        assert main(argv) == 0, capsys.readouterr().err
        said[name] = capsys.readouterr()
        assert "not valid JSON" not in said[name].err
    if verb == "score":
        assert (tmp_path / "file" / "positions.jsonl").read_bytes() == (tmp_path / "folder" / "positions.jsonl"
                                                                        ).read_bytes()
        assert b'"id":"tale"' in (tmp_path / "file" / "positions.jsonl").read_bytes()
    else:
        def figures(out: str) -> list[str]:  # its time taken ("(0.1 s)") aside
            return [x for x in out.splitlines() if not (x.startswith("(") and x.endswith(" s)"))]

        assert figures(said["file"].out) == figures(said["folder"].out.replace(str(folder), str(folder / "tale.txt")))


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8"])
def test_a_txt_file_that_is_a_table_is_refused_and_its_advice_makes_a_tsv_that_reads(tmp_path, encoding):
    """Excel's "Unicode Text" saves a sheet as a .txt of tab-separated rows (UTF-16): given as
    the corpus, it was read as one story whose text is the table, without a word. A .txt whose
    first line is a header naming `id` and `text` between tabs is refused, with the command that
    makes it a .tsv the corpus reader reads row by row; run as printed, the rows are the stories."""
    from tension.testing.corpus import make_corpus

    stories = [json.loads(x) for x in make_corpus(tmp_path / "c.jsonl", 2, seed=5).read_text().splitlines()]
    table = "id\ttext\tgroup\r\n" + "".join(
        f"{s['id']}\t\"{s['text'].replace(chr(34), chr(34) * 2)}\"\ta\r\n" for s in stories)
    p = tmp_path / "my sheet.txt"
    p.write_bytes(table.encode(encoding))  # Python's utf-16 writes the byte-order mark, as Excel does
    c = read_corpus(p, min_words=0)
    assert c.stories == []
    (err,) = c.errors
    assert str(err).startswith(f"{p}:1: its first line is a header of tab-separated columns (id, text, group)")
    command = str(err).split("make it one: ")[1].split("; then give ")[0]
    subprocess.run(command, shell=True, check=True, cwd=tmp_path)
    tsv = tmp_path / "my sheet.tsv"
    got = read_corpus(tsv, min_words=0)
    assert (got.errors, [(s.id, s.text) for s in got.stories]) == ([], [(s["id"], s["text"]) for s in stories])
    assert f"then give {shlex.quote(str(tsv))}" in str(err)
