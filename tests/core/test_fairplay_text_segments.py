"""`fairplay` over `text` records (docs/fairplay.md, "Input"): a text whose paragraphs are one a
line, with no blank line between them (as many exports write them), was read as one or a few long
paragraphs: silently fewer segments than --segments (L = 4 where the story has 25 paragraphs), or
an error that did not say why. Both now say so, with the way out, which is run as printed."""

from __future__ import annotations

import shlex

import pytest
from fairplay_scripted import CULPRIT, SUSPECTS, scene, scripted, write_jsonl  # tests/

from tension.core.cli import main
from tension.core.pipelines.fairplay import load_fairplay_config, read_stories

SCENES = [scene("s", j) + " The rain kept on falling over the town." for j in range(1, 26)]
WAY_OUT = ("paragraphs are separated by blank lines, and its text has {n} single line breaks within them: if they "
           "separate its paragraphs, put a blank line between them (or give --segment-rule sentences)")


def _records() -> list[dict]:
    one_a_line = "\n".join(SCENES)  # 25 paragraphs, one a line: no blank line at all
    some_blank = "\n".join(SCENES[:10]) + "\n\n" + "\n".join(SCENES[10:20]) + "\r\n\r\n" + "\n".join(SCENES[20:])
    blank = "\n\n".join(SCENES)  # as the rule wants: no note
    return [{"id": i, "text": t, "suspects": SUSPECTS, "culprit": CULPRIT}
            for i, t in (("one", one_a_line), ("some", some_blank), ("blank", blank))]


def test_a_text_of_one_paragraph_a_line_is_told_not_read_as_few_paragraphs(tmp_path):
    path = write_jsonl(tmp_path / "stories.jsonl", _records())
    stories, _, errors = read_stories(path, load_fairplay_config(None, {}))
    assert [(s.id, s.L, s.note) for s in stories] == [
        ("some", 3, "its text has 3 paragraphs, fewer than --segments 25: it is read as 3 segments (L = 3); "
                    + WAY_OUT.format(n=22)),
        ("blank", 25, None)]
    assert [str(e) for e in errors] == [f"{path}:1 field `text`: only 1 paragraphs chunk(s); a story needs at least "
                                        f"2; {WAY_OUT.format(n=24)}"]
    # the way out as printed: by sentences, every story has its 25 segments
    stories, _, errors = read_stories(path, load_fairplay_config(None, {"segment_rule": "sentences"}))
    assert ([(s.id, s.L, s.note) for s in stories], errors) == ([("one", 25, None), ("some", 25, None),
                                                                 ("blank", 25, None)], [])


@pytest.mark.in_process
def test_fairplay_warns_of_a_text_read_as_fewer_segments_and_its_advice_runs(server, tmp_path, capsys):
    server.respond(scripted)
    path = write_jsonl(tmp_path / "stories.jsonl", _records())
    argv = ["fairplay", str(path), "--reader-base-url", server.base_url, "--reader-model", "test-judge",
            "--readers", "gullible", "--schedule", "1,2", "--no-progress", "--resamples", "50",
            "--cache", str(tmp_path / "cache")]
    code = main([*argv, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1  # the story of one paragraph a line is a bad record
    assert f"warning: story 'some': its text has 3 paragraphs, fewer than --segments 25: it is read as 3 " \
           f"segments (L = 3); {WAY_OUT.format(n=22)}" in err
    assert f"{path}:1 field `text`: only 1 paragraphs chunk(s)" in err
    flag = shlex.split(err.split("(or give ", 1)[1].split(")", 1)[0])
    assert main([*argv, *flag, "--out", str(tmp_path / "again")]) == 0
    assert "paragraphs" not in capsys.readouterr().err
