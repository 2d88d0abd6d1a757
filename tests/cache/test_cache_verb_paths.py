"""The cache verbs' paths (issue 36): the advice the run prints to drop a broken
setup's records is a command that works pasted, and drops them (O7); `cache drop
--run DIR` uses the cache the run's run.json names; every verb that opens one cache
takes it as PATH or as --cache (O2).

Every command runs in this process (`tension_run`, the test's folder as the working
folder where a path is relative): the subject is what the commands print, write and
drop, not the process, nor the wire: the runs' servers are in-process ones (the loopback
server's answers, no socket). The advice is run as its own words, `tension-run` and all."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tension.cache.store import Store
from tension.core.cli import main
from tension.testing.cache_records import cache_with, key, verdict
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer


def _score(run, url: str, corpus: Path, out: Path, cache: Path | None, *flags: str) -> subprocess.CompletedProcess:
    """`score` by `run` (the test's `tension_run`)."""
    argv = ["score", str(corpus), "--out", str(out), "--base-url", url, "--model", "test-gen",
            "--endings", "4", "--seed", "1", "--no-progress", "--no-report", *flags]  # the report is not the subject
    if cache is not None:
        argv += ["--cache", str(cache)]
    return run(*argv)


def _advised_drop(err: str, role: str) -> list[str]:
    """The advised command's arguments after `tension-run`, word for word."""
    m = re.search(r"`(tension-run cache drop [^`]*)`", err)
    assert m, err
    argv = shlex.split(m.group(1))
    assert argv[argv.index("--role") + 1] == role
    assert argv[0] == "tension-run"
    return argv[1:]


def _entries(cache: Path, db: str) -> int:
    with Store(cache, readonly=True) as store:
        return store.stats()[db]["entries"]


@pytest.mark.parametrize("relative", [False, True])
def test_the_early_stops_cache_drop_advice_run_word_for_word_drops_the_judges_records(tmp_path, relative,
                                                                                    tension_run, monkeypatch):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    out, cache = (Path("r/think"), Path("cache/think")) if relative else (tmp_path / "out", tmp_path / "cache")
    monkeypatch.chdir(tmp_path)  # every command runs in the test's folder, as the subprocesses did (cwd)
    with InProcessServer("test-gen").serving() as ok, InProcessServer("test-gen", misbehave="think").serving() as judge:
        done = _score(tension_run, ok.base_url, corpus, out, cache, "--judge-base-url", judge.base_url)
        assert done.returncode == 1 and "the judge is not answering Y or N" in done.stderr, done.stderr
        drop = _advised_drop(done.stderr, "judge")
        assert "--cache" in drop
        held = _entries(tmp_path / cache, "verdicts")
        assert held > 0
        dropped = tension_run(*drop)
        assert dropped.returncode == 0, dropped.stderr
        assert re.search(r"dropped [1-9]\d* records", dropped.stdout), dropped.stdout
        assert _entries(tmp_path / cache, "verdicts") == 0
        # and the fixed setup now scores: nothing of the broken judge is replayed
        fixed = _score(tension_run, ok.base_url, corpus, out, cache)
        assert fixed.returncode == 0, fixed.stderr


def test_cache_drop_run_without_cache_uses_the_cache_the_run_used(tmp_path, tension_run):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    out, cache = tmp_path / "out", tmp_path / "cache"
    with InProcessServer("test-gen").serving() as ok, InProcessServer("test-gen", misbehave="think").serving() as judge:
        done = _score(tension_run, ok.base_url, corpus, out, cache, "--judge-base-url", judge.base_url)
        assert done.returncode == 1, done.stderr
    env_home = tmp_path / "home"  # the default cache (which holds nothing of the run) is elsewhere
    argv = ["cache", "drop", "--run", str(out), "--role", "judge", "--yes"]
    # the environment of the subprocess this was: these three, every other variable unset
    only = {"HOME": str(env_home), "XDG_CACHE_HOME": str(env_home / ".cache"), "PATH": "/usr/bin:/bin"}
    dropped = tension_run(*argv, env={**dict.fromkeys(os.environ), **only})
    assert dropped.returncode == 0, dropped.stderr
    assert f"cache {cache}: the one {out / 'run.json'} names" in dropped.stdout
    assert re.search(r"dropped [1-9]\d* records", dropped.stdout), dropped.stdout
    assert _entries(cache, "verdicts") == 0


def test_the_empty_endings_advice_names_the_runs_cache(tmp_path, tension_run):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    out, cache = tmp_path / "out", tmp_path / "cache"
    with InProcessServer("test-gen", misbehave="null_content").serving() as bad:
        done = _score(tension_run, bad.base_url, corpus, out, cache)
    assert done.returncode == 1, done.stderr
    drop = _advised_drop(done.stderr, "generation")
    assert drop[drop.index("--cache") + 1] == str(cache)
    dropped = tension_run(*drop)
    assert dropped.returncode == 0 and re.search(r"dropped [1-9]\d* records", dropped.stdout), dropped.stdout
    assert _entries(cache, "endings") == 0


def _one_cache_verbs(path: str) -> dict[str, list[list[str]]]:
    """Every cache verb that opens one cache, with it given as PATH and as --cache."""
    return {verb: [["cache", verb, path, *extra], ["cache", verb, "--cache", path, *extra]]
            for verb, extra in (("stats", []), ("verify", []), ("drop", ["--role", "judge"]))}


def test_every_cache_verb_takes_its_cache_as_path_or_as_cache(tmp_path, capsys):
    a = cache_with(tmp_path / "a", {key(1): verdict("Y")})
    for verb, forms in _one_cache_verbs(str(a)).items():
        said = []
        for argv in forms:
            assert main(argv) == 0, (verb, argv)
            said.append(capsys.readouterr().out)
        assert said[0] == said[1] and str(a) in said[0], verb
        # two different caches at once: a usage error naming both
        assert main([*forms[0], "--cache", str(tmp_path / "b")]) == 2
        err = capsys.readouterr().err
        assert "two caches given" in err and str(tmp_path / "b") in err, verb
    # the verbs of two or more caches take them as they are
    assert main(["cache", "recover", str(a), str(tmp_path / "new")]) == 0
    assert main(["cache", "merge", str(a), str(tmp_path / "merged")]) == 0
