"""Settings checked before any work (issue 36, docs/reliability.md "Inputs and
settings"): an API key no HTTP header carries as it is, for every way a key
arrives and every verb that sends one; a config file's wrong type named with its
line, checked though a flag overrides it; one setting spelt twice in a file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fairplay_scripted import story_record, write_jsonl

from tension.core.cli import main
from tension.core.config import load_config
from tension.core.config.settings import checked_key
from tension.core.errors import ConfigError
from tension.testing.corpus import make_corpus

# (the key, what the message says is in it)
BAD_KEYS = [
    ("sk-abc\n", "a newline (its last character of 7)"),  # open("key.txt").read()
    ("sk-a\nbc", "a newline (character 5 of 7)"),
    ("sk-abc\r\n", "a carriage return (character 7 of 8)"),
    (" sk-abc", "a space (its first character of 7)"),
    ("sk-abc ", "a space (its last character of 7)"),
    ("\tsk-abc", "a tab (its first character of 7)"),
    ("sk-a\x00bc", "a control character (U+0000) (character 5 of 7)"),
    ("sk-a\x7fbc", "a control character (U+007F) (character 5 of 7)"),
    ("sk-abç", "a character past ASCII (U+00E7) (its last character of 6)"),
]


@pytest.mark.parametrize(("key", "what"), BAD_KEYS, ids=[repr(k) for k, _ in BAD_KEYS])
def test_a_key_with_a_character_no_header_carries_is_named_without_the_key(key, what):
    with pytest.raises(ConfigError) as ei:
        checked_key(key, "the environment variable OPENAI_API_KEY")
    msg = str(ei.value)
    assert msg == (f"the environment variable OPENAI_API_KEY holds {what}; remove it: an API key is sent as it "
                   "is, in an HTTP header")
    assert "sk-" not in msg


def test_a_plain_key_is_kept_as_it_is():
    assert checked_key("sk-proj_AZaz09-._~+/=", "x") == "sk-proj_AZaz09-._~+/="
    assert checked_key(None, "x") is None and checked_key("", "x") == ""


def _score(server, tmp_path: Path, *extra: str) -> list[str]:
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    return ["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", server.base_url, "--model",
            "test-gen", "--endings", "2", "--cache", str(tmp_path / "cache"), "--no-progress", "--no-report", *extra]


def _generate(server, tmp_path: Path, *extra: str) -> list[str]:
    ideas = tmp_path / "ideas.jsonl"
    ideas.write_text(json.dumps({"id": "lamp", "idea": "A keeper finds a letter."}) + "\n")
    return ["generate", str(ideas), "--out", str(tmp_path / "gen.jsonl"), "--base-url", server.base_url,
            "--model", "test-gen", "--cache", str(tmp_path / "cache"), "--no-progress", *extra]


def _fairplay(server, tmp_path: Path, *extra: str) -> list[str]:
    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record("s1", generator=False)])
    return ["fairplay", str(stories), "--out", str(tmp_path / "out"), "--base-url", server.base_url, "--model",
            "test-judge", "--cache", str(tmp_path / "cache"), "--readers", "gullible", "--no-progress",
            "--resamples", "50", *extra]


def _estimate(server, tmp_path: Path, *extra: str) -> list[str]:
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    return ["estimate", str(corpus), "--base-url", server.base_url, "--model", "test-gen", "--cache",
            str(tmp_path / "cache"), "--no-progress", *extra]


def _bench(server, tmp_path: Path, *extra: str) -> list[str]:
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    return ["bench", "--corpus", str(corpus), "--base-url", server.base_url, "--model", "test-gen", "--cache",
            str(tmp_path / "cache"), "--positions", "1", "--no-progress", *extra]


VERBS = {"score": _score, "estimate": _estimate, "bench": _bench, "generate": _generate, "fairplay": _fairplay}


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_refuses_a_key_with_a_newline_in_the_environment_before_any_request(
        verb, server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-key\n")
    capsys.readouterr()
    rc = main(VERBS[verb](server, tmp_path))
    out, err = capsys.readouterr()
    assert rc == 2, err
    assert ("error: the environment variable OPENAI_API_KEY holds a newline (its last character of 14); remove it"
            in err)
    assert "rerun" not in err and "sk-secret-key" not in out + err
    assert server.requests == []  # before any request, /v1/models included


@pytest.mark.in_process
def test_generate_names_the_variable_api_key_env_names(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MY_KEY", " sk-secret-key")
    rc = main(_generate(server, tmp_path, "--api-key-env", "MY_KEY"))
    err = capsys.readouterr().err
    assert rc == 2
    assert "error: the environment variable MY_KEY holds a space (its first character of 14); remove it" in err
    assert server.requests == []


@pytest.mark.parametrize("verb", ["score", "fairplay"])
def test_a_config_files_key_with_surrounding_spaces_is_refused_though_the_variable_wins(
        verb, server, tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "t.toml"
    cfg.write_text('api_key = "sk-secret-key "\n')
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fine")
    rc = main(VERBS[verb](server, tmp_path, "--config", str(cfg)))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert ("error: the API key (config key `api_key`) holds a space (its last character of 14); remove it"
            in err)
    assert "sk-secret-key" not in err
    assert server.requests == []


@pytest.mark.in_process
def test_the_api_keyword_api_key_is_checked_the_same(server, tmp_path):
    from tension.core.api import score

    with pytest.raises(ConfigError, match=r"config key `api_key`\) holds a newline"):
        score(make_corpus(tmp_path / "c.jsonl", 1), out=tmp_path / "out", base_url=server.base_url,
              model="test-gen", endings=2, cache=str(tmp_path / "cache"), progress=False, api_key="sk-x\n")
    assert server.requests == []


# --- config files -------------------------------------------------------------------------


def _toml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.toml"
    p.write_text(text)
    return p


def test_a_config_type_error_names_its_line(tmp_path):
    p = _toml(tmp_path, 'seed = 1\n\n# the endings\nendings = "4"\n')
    with pytest.raises(ConfigError) as ei:
        load_config(p, {})
    assert str(ei.value) == f"{p}: Expected `int`, got `str` - at `$.endings` (line 4)"


def test_a_config_type_error_in_a_table_names_its_line(tmp_path):
    from tension.core.config import load_fairplay_config

    p = _toml(tmp_path, 'seed = 1\n[fairplay]\nk = "many"\n')
    with pytest.raises(ConfigError) as ei:
        load_fairplay_config(p, {})
    assert str(ei.value) == f"{p}: Expected `int`, got `str` - at `$.k` (line 3)"


@pytest.mark.parametrize(("text", "flag", "key"), [
    ("base_url = 5\n", {"base_url": "http://127.0.0.1:1"}, "base_url"),
    ('endings = "4"\n', {"endings": 4}, "endings"),
    ("judge-model = 3\n", {"judge_model": "m"}, "judge-model"),
])
def test_a_config_key_of_the_wrong_type_is_an_error_though_a_flag_overrides_it(tmp_path, text, flag, key):
    p = _toml(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"^{p}: Expected .* - at `\$\.{key.replace('-', '_')}` \(line 1\)$"):
        load_config(p, flag)


@pytest.mark.in_process
def test_a_config_type_error_on_the_command_line_names_the_line_and_exits_2(server, tmp_path, capsys):
    p = _toml(tmp_path, 'base_url = 5\n')
    rc = main(_score(server, tmp_path, "--config", str(p)))
    assert rc == 2
    assert f"error: {p}: Expected `str | array`, got `int` - at `$.base_url` (line 1)" in capsys.readouterr().err


@pytest.mark.parametrize("text", ['judge-model = "stub"\njudge_model = "other"\n',
                                  'judge_model = "stub"\n"judge-model" = "other"\n'])
def test_one_setting_spelt_both_ways_in_a_file_is_an_error(tmp_path, text):
    p = _toml(tmp_path, text)
    first, second = ("judge-model", "judge_model") if text.startswith("judge-") else ("judge_model", "judge-model")
    with pytest.raises(ConfigError) as ei:
        load_config(p, {})
    assert str(ei.value) == (f"{p}: `{second}` (line 2) sets `{first}` (line 1) again; a setting is given once: "
                             "keep one")
