"""--out (view's --export) that is a file: one usage error in every verb that writes a
folder (issue 36 N15; docs/reliability.md "Inputs and settings")."""

from __future__ import annotations

import pytest

from tension.core.cli import main
from tension.testing.corpus import make_corpus


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


@pytest.mark.parametrize("how", ["equal", "inside", "config file", "default cache"])
def test_an_out_folder_on_the_cache_folder_is_refused(how, tmp_path, capsys, monkeypatch):
    from tension.cache.store import default_path

    corpus = str(make_corpus(tmp_path / "c.jsonl", 1))
    cache = tmp_path / "cache"
    argv = ["score", corpus, "--base-url", "http://127.0.0.1:1", "--no-progress"]
    if how == "equal":
        out, argv = cache, [*argv, "--cache", str(cache)]
    elif how == "inside":
        out, argv = cache / "run", [*argv, "--cache", str(cache)]
    elif how == "config file":
        (tmp_path / "t.toml").write_text(f'cache = "{cache}"\n')
        out, argv = cache, [*argv, "--config", str(tmp_path / "t.toml")]
    else:
        out = cache = default_path()
    rc = main([*argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    where = "is" if how != "inside" else "is inside"
    assert err.startswith(f"error: --out {out}: {where} the cache folder {cache}: the outputs would lie among")
    assert not (out / "run.json").exists()
