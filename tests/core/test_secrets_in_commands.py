"""Secrets in the command line and in transformed echoes (review 2026-12-01, 10b and
10c; issue 25 finding 6).

- A password in a base URL reached run.json `argv` and the Ctrl-C "Resume with the
  same command" line verbatim: every verb's run record, every output and the cache,
  and the resume line, are checked for it.
- A key a server echoes changed (lower-cased, JSON-escaped `\\u002f`, URL-encoded)
  was stored as it came in the cache and texts.jsonl.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sigterm import run_until_sigterm

from tension.core.cli import main
from tension.core.redact import redact_argv
from tension.testing.corpus import make_corpus

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "PW-URLSECRET-77"


def _url(server) -> str:
    return server.base_url.replace("http://", f"http://alice:{PASSWORD}@")


def _bytes_under(*folders: Path) -> bytes:
    return b"".join(p.read_bytes() for f in folders if f.exists() for p in sorted(f.rglob("*")) if p.is_file())


def _invocations(server, tmp: Path) -> dict[str, list[str]]:
    url, cache = _url(server), str(tmp / "cache")
    corpus = make_corpus(tmp / "c.jsonl", 1, seed=4)
    who = tmp / "who.jsonl"
    segs = [f"Paragraph {i}: Ada, Bo and Cy wait by the lamp." for i in range(1, 5)]
    who.write_text(json.dumps({"id": "w1", "segments": segs, "suspects": ["Ada", "Bo", "Cy"], "culprit": "Bo"})
                   + "\n")
    return {
        "score": ["score", str(corpus), "--out", str(tmp / "out" / "score"), "--base-url", url, "--model", "test-gen",
                  "--endings", "2", "--cache", cache, "--no-progress", "--save-texts"],
        "estimate": ["estimate", str(corpus), "--base-url", url, "--model", "test-gen", "--endings", "2", "--cache",
                     cache, "--json", str(tmp / "out" / "estimate.json")],
        "bench": ["bench", "--base-url", url, "--model", "test-gen", "--endings", "2", "--positions", "1",
                  "--no-variants", "--no-progress", "--save", str(tmp / "out" / "bench.json")],
        "generate": ["generate", str(ROOT / "examples" / "ideas.jsonl"), "--out", str(tmp / "out" / "s.jsonl"),
                     "--base-url", url, "--model", "test-gen", "--mode", "vanilla", "--cache", cache,
                     "--no-progress", "--min-chars", "0"],
        "fairplay": ["fairplay", str(who), "--out", str(tmp / "out" / "fp"), "--base-url", url, "--model",
                     "test-judge", "--k", "1", "--schedule", "2", "--readers", "gullible", "--cache", cache,
                     "--no-progress", "--max-plots", "0", "--resamples", "20"],
    }


@pytest.mark.parametrize("verb", ["score", "estimate", "bench", "generate", "fairplay"])
def test_a_url_password_reaches_no_run_record_output_or_cache_of_any_verb(server, tmp_path, capsys, monkeypatch,
                                                                          verb):
    argv = _invocations(server, tmp_path)[verb]
    monkeypatch.setattr(sys, "argv", ["tension-run", *argv])  # what the run record stores
    capsys.readouterr()
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc in (0, 1), err
    assert server.requests, "the server was asked"
    stored = _bytes_under(tmp_path / "out", tmp_path / "cache")
    assert stored, "the verb wrote its record"
    for where, text in (("stdout", out.encode()), ("stderr", err.encode()), ("files", stored)):
        assert PASSWORD.encode() not in text, where
    assert b"alice:***@" in stored  # the record still says which server


def test_the_resume_line_after_a_stop_hides_the_url_password(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=12)
    server.delay = 0.02
    rc, err = run_until_sigterm(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", _url(server),
                                 "--model", "test-gen", "--endings", "2", "--cache", str(tmp_path / "cache"),
                                 "--no-progress"], lambda: server.count(kind="judge") >= 4)
    assert rc == 130, err
    assert "Resume with the same command" in err and "alice:***@" in err and "shown as ***" in err
    assert PASSWORD not in err
    record = (tmp_path / "out" / "run.json").read_text()
    assert PASSWORD not in record and json.loads(record)["status"] == "interrupted"


def test_a_secret_option_value_is_masked_in_a_stored_command():
    assert redact_argv(["tension-run", "x", "--api-key", "sk-1234", "--token=abcd", "--api-key-env", "VAR",
                        "http://u:p4ss@h/"]) == ["tension-run", "x", "--api-key", "***", "--token=***",
                                                 "--api-key-env", "VAR", "http://u:***@h/"]


KEY = "sk-LEAK/Canary+9f8e7d=="


def _variants(key: str) -> list[str]:
    return [key.lower(), key.upper(), key.replace("/", "\\u002f").replace("+", "\\u002b"),
            key.replace("/", "\\/"), key.replace("/", "%2F").replace("+", "%2B").replace("=", "%3D")]


def test_transformed_echoes_of_the_key_reach_neither_the_cache_nor_texts_jsonl(server, tmp_path, capsys,
                                                                              monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    forms = _variants(KEY)
    # every ending and every verdict echoes the key in one of its transformed forms
    server.respond(lambda msgs, n, seed: [f"The sign read {forms[(i + (seed or 0)) % len(forms)]}." for i in range(n)])
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    capsys.readouterr()
    rc = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", server.base_url, "--model",
               "test-gen", "--endings", "3", "--cache", str(tmp_path / "cache"), "--no-progress", "--save-texts",
               "--keep-going"])
    _, err = capsys.readouterr()
    assert rc in (0, 1), err
    texts = (tmp_path / "out" / "texts.jsonl").read_text()
    assert "The sign read ***." in texts  # the answers were stored, the key masked
    stored = _bytes_under(tmp_path / "out", tmp_path / "cache")
    for form in [KEY, *forms]:
        assert form.encode() not in stored, form
        assert json.dumps(form)[1:-1].encode() not in stored, form  # nor JSON-encoded in texts.jsonl
