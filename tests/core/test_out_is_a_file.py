"""--out (view's --export) that is a file: one usage error in every verb that writes a
folder (issue 36 N15; docs/reliability.md "Inputs and settings")."""

from __future__ import annotations

import pytest
from conftest import make_corpus

from tension.core.cli import main


def _argv(verb: str, tmp_path, afile: str) -> list[str]:
    corpus = str(make_corpus(tmp_path / "c.jsonl", 1))
    run = tmp_path / "run"
    run.mkdir()
    return {
        "score": ["score", corpus, "--out", afile, "--base-url", "http://127.0.0.1:1", "--no-progress"],
        "metrics": ["metrics", corpus, "--out", afile],
        "compare": ["compare", str(run), str(run), "--out", afile],
        "fairplay": ["fairplay", corpus, "--out", afile, "--base-url", "http://127.0.0.1:1", "--no-progress"],
        "fairplay-metrics": ["fairplay-metrics", corpus, "--out", afile],
        "view --export": ["view", str(run), "--export", afile],
        "demo": ["demo", "--out", afile],
    }[verb]


@pytest.mark.parametrize("verb", ["score", "metrics", "compare", "fairplay", "fairplay-metrics", "view --export",
                                  "demo"])
def test_an_out_folder_that_is_a_file_is_the_same_usage_error_in_every_verb(verb, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("keep me\n")
    flag = "--export" if verb == "view --export" else "--out"
    rc = main(_argv(verb, tmp_path, str(afile)))
    err = capsys.readouterr().err
    assert rc == 2
    assert err == f"error: {flag} {afile}: exists and is not a folder\n"
    assert afile.read_text() == "keep me\n"
