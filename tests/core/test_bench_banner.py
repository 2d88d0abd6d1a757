"""The banner and flags bench/stability.py and bench/precision.py share
(tension.testing.bench): the server mode needs --base-url, and the banner names the
title, the mode, the machine and the configuration."""

from __future__ import annotations

import argparse

import pytest

from tension.testing.bench import add_server_flags, parse_with_banner


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="b")
    p.add_argument("mode", nargs="?", default="loopback", choices=["loopback", "server"])
    p.add_argument("--endings", type=int, default=20)
    add_server_flags(p)
    return p


def test_the_banner_names_title_mode_machine_and_config(capsys):
    args = parse_with_banner(_parser(), lambda a: f"fixed-{a.endings}", 10, ["--endings", "7"])
    out = capsys.readouterr().out.splitlines()
    assert args.endings == 7 and args.base_url is None
    assert out[0] == "=" * 10 and out[1] == "fixed-7: loopback" and out[2].startswith("cpu: ")
    assert out[3].startswith("config: {") and out[4] == "=" * 10


def test_server_mode_without_a_base_url_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        parse_with_banner(_parser(), "t", 10, ["server"])
    assert e.value.code == 2 and "server: --base-url is needed" in capsys.readouterr().err
    assert parse_with_banner(_parser(), "t", 10, ["server", "--base-url", "http://x"]).base_url == "http://x"
