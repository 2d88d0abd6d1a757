"""Hostile ground for the run, the cache and the disk (issue 25, docs/reliability.md
"Hostile ground: the run, the cache and the disk"): a broken setup's answers are
not replayed forever, the run record states the exit status the process returns,
full disks and read-only caches are said plainly, a stop during the outputs is
obeyed, and a reused --out is said. Every case runs the real CLI: in process
through `main` against in-process servers (the same answers, no socket), or as a
subprocess against the loopback server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fairplay_scripted import story_record, write_jsonl

from tension.core.cli import main
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer
from tension.testing.numba_cache import seeded_numba_cache
from tension.testing.openai_server import LoopbackServer

# --- finding 4 (11f): the record's exit status is the process's ---------------------


def _score_args(corpus: Path, out: Path, cache: Path, url: str, *flags: str, endings: int = 3) -> list[str]:
    return ["score", str(corpus), "--out", str(out), "--base-url", url, "--endings", str(endings), "--seed", "1",
            "--cache", str(cache), "--no-progress", *flags]


def _verb_with_a_model_typo(verb: str, server, tmp_path: Path) -> tuple[int, Path]:
    """`verb` run with a model the server lacks (a ConfigError found after the run
    opened); its record's path."""
    cache = str(tmp_path / "cache")
    if verb == "score":
        corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
        rc = main(_score_args(corpus, tmp_path / "out", tmp_path / "cache", server.base_url, "--model", "nosuch"))
        return rc, tmp_path / "out" / "run.json"
    if verb == "generate":
        ideas = tmp_path / "ideas.jsonl"
        ideas.write_text(json.dumps({"id": "i0", "idea": "A lighthouse keeper."}) + "\n")
        rc = main(["generate", str(ideas), "--out", str(tmp_path / "stories.jsonl"), "--mode", "vanilla",
                   "--base-url", server.base_url, "--model", "nosuch", "--cache", cache, "--no-progress"])
        return rc, tmp_path / "stories.run.json"
    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record("s1", generator=False)])
    rc = main(["fairplay", str(stories), "--out", str(tmp_path / "out"), "--reader-base-url", server.base_url,
               "--reader-model", "nosuch", "--cache", cache, "--readers", "gullible", "--no-progress"])
    return rc, tmp_path / "out" / "fairplay_run.json"


@pytest.mark.parametrize("verb", ["score", "generate", "fairplay"])
@pytest.mark.in_process
def test_a_config_error_after_the_run_opened_is_exit_2_in_the_record_too(verb, server, tmp_path, capsys):
    rc, record = _verb_with_a_model_typo(verb, server, tmp_path)
    err = capsys.readouterr().err
    assert rc == 2, err
    doc = json.loads(record.read_text())
    assert doc["status"] == "failed" and "nosuch" in doc["error"]
    assert doc["exit_status"] == rc  # one truth: the record holds the code the process returns


# --- finding 1 (5c, 5d): a broken setup's answers are not replayed forever ----------

OUTPUT_FILES = ("positions.jsonl", "stories.csv", "groups.csv")


def _score4(url: str, corpus: Path, out: Path, cache: Path, *flags: str, report: bool = False) -> int:
    """score with 4 endings (2 stories: about 260 verdicts, past the early stop's 200);
    the report is drawn only where a test's subject is the outputs' writing."""
    return main(["score", str(corpus), "--out", str(out), "--base-url", url, "--model", "test-gen",
                 "--endings", "4", "--seed", "1", "--cache", str(cache), "--no-progress",
                 *(() if report else ("--no-report",)), *flags])


def _same_outputs(a: Path, b: Path) -> None:
    for name in OUTPUT_FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture
def broken(tmp_path):
    """The corpus, and a clean run's folder on a healthy server (what a fixed setup must give)."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    with InProcessServer(model=["test-gen"]).serving() as ok:
        assert _score4(ok.base_url, corpus, tmp_path / "clean", tmp_path / "clean-cache") == 0
    return corpus, tmp_path / "clean"


def _null_endings_run(corpus: Path, out: Path, cache: Path, capsys) -> str:
    with InProcessServer(model=["test-gen"], misbehave="null_content").serving() as bad:
        rc = _score4(bad.base_url, corpus, out, cache)
    err = capsys.readouterr().err
    assert rc == 1, err
    return err


def test_endings_that_came_back_null_fail_the_run_and_refresh_generation_asks_them_again(broken, tmp_path,
                                                                                          capsys):
    corpus, clean = broken
    out, cache = tmp_path / "out", tmp_path / "cache"
    err = _null_endings_run(corpus, out, cache, capsys)
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and run["exit_status"] == 1
    assert run["error"].startswith("every ending is empty")
    assert "a rerun reads them from it" in err and "--refresh generation" in err
    assert f"tension-run cache drop --run {out} --role generation --yes" in err
    assert "rerun the same command to continue" not in err  # it would fail again
    assert not (out / "positions.jsonl").exists()  # no result that looks like one
    # identical because empty: not blamed on the temperature or seed
    assert "temperature" not in err and "endings_identical" not in [w["check"] for w in run["warnings"]]
    with InProcessServer(model=["test-gen"]).serving() as ok:
        assert _score4(ok.base_url, corpus, out, cache) == 1  # fixed, but replayed from the cache
        assert ok.count(kind="generation") == 0
        assert _score4(ok.base_url, corpus, out, cache, "--refresh", "generation") == 0, capsys.readouterr().err
        assert ok.count(kind="generation") > 0
        _same_outputs(out, clean)
        counts = json.loads((out / "run.json").read_text())["cache"]
        assert counts["hits"]["endings"] == 0 and counts["misses"]["endings"] > 0  # asked again: not hits
        # the fresh answers replaced the cached ones: a plain rerun sends nothing and gives the same
        ok.reset_records()
        assert _score4(ok.base_url, corpus, tmp_path / "again", cache) == 0
        assert ok.count(kind="generation") == 0 and ok.count(kind="judge") == 0
    _same_outputs(tmp_path / "again", clean)


def test_endings_that_came_back_null_are_dropped_by_cache_drop_run(broken, tmp_path, capsys):
    corpus, clean = broken
    out, cache = tmp_path / "out", tmp_path / "cache"
    _null_endings_run(corpus, out, cache, capsys)
    args = ["cache", "drop", "--cache", str(cache), "--run", str(out), "--role", "generation"]
    assert main(args) == 0  # a dry run first: counts, drops nothing
    dry = capsys.readouterr().out
    n = int(dry.split(" records match")[0].rsplit(" ", 1)[1])
    assert n > 0 and "endings records (generation)" in dry and "add --yes" in dry
    assert main(args) == 0 and capsys.readouterr().out == dry  # nothing was dropped
    assert main([*args, "--yes"]) == 0
    assert f"dropped {n} records" in capsys.readouterr().out
    with InProcessServer(model=["test-gen"]).serving() as ok:
        assert _score4(ok.base_url, corpus, out, cache) == 0, capsys.readouterr().err
    _same_outputs(out, clean)


def _think_judge_run(corpus: Path, out: Path, cache: Path, gen_url: str, capsys) -> str:
    with InProcessServer(model=["test-gen"], misbehave="think").serving() as judge:
        rc = _score4(gen_url, corpus, out, cache, "--judge-base-url", judge.base_url)
    err = capsys.readouterr().err
    assert rc == 1 and "the judge is not answering Y or N" in err, err
    return err


@pytest.mark.parametrize("way", ["refresh", "drop_run", "drop_model"])
def test_a_judge_that_answered_think_is_asked_again_once_fixed(broken, tmp_path, capsys, way):
    corpus, clean = broken
    out, cache = tmp_path / "out", tmp_path / "cache"
    with InProcessServer(model=["test-gen"]).serving() as ok:
        err = _think_judge_run(corpus, out, cache, ok.base_url, capsys)
        assert "a rerun reads them from it" in err and "--refresh judge" in err
        assert f"tension-run cache drop --run {out} --role judge --yes" in err
        assert "Rerunning the same command stops here again" not in err
        # the healthy judge alone: the cached verdicts stop the run again (what the user met)
        assert _score4(ok.base_url, corpus, out, cache) == 1
        assert "the judge is not answering Y or N" in capsys.readouterr().err
        if way == "refresh":
            flags: tuple[str, ...] = ("--refresh", "judge")
        else:
            by = ["--run", str(out)] if way == "drop_run" else ["--model", "test-gen"]
            assert main(["cache", "drop", "--cache", str(cache), "--role", "judge", *by, "--yes"]) == 0
            assert "verdict records (judge)" in capsys.readouterr().out
            flags = ()
        ok.reset_records()
        assert _score4(ok.base_url, corpus, out, cache, *flags) == 0, capsys.readouterr().err
        assert ok.count(kind="generation") == 0  # the endings were fine: only the judge is asked again
        assert ok.count(kind="judge") > 0
    _same_outputs(out, clean)


def test_cache_drop_needs_a_filter_and_a_cache(tmp_path, capsys):
    assert main(["cache", "drop", "--cache", str(tmp_path)]) == 2
    assert "name what to drop" in capsys.readouterr().err
    assert main(["cache", "drop", "--cache", str(tmp_path / "none"), "--role", "judge"]) == 1  # a missing input
    assert "none: no cache here" in capsys.readouterr().err


# --- finding 11 (3a, 6b, 7a, 7c): the limit, no positions, a reused --out -----------


@pytest.mark.in_process
def test_the_cache_size_limit_says_raise_it_not_rerun(server, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    # 16 endings a position: records are stored compressed, and 3 would fit the limit
    args = _score_args(corpus, tmp_path / "out", tmp_path / "cache", server.base_url, "--model", "test-gen",
                       "--no-report", endings=16)
    assert main([*args, "--cache-max-gb", "0.0002"]) == 1
    err = capsys.readouterr().err
    assert "reached its limit of 200,000 bytes (--cache-max-gb)" in err
    assert "Raise --cache-max-gb (now 0.0002) and rerun to continue" in err
    assert "rerun the same command" not in err  # that fails again at the same limit
    assert main([*args, "--cache-max-gb", "1"]) == 0, capsys.readouterr().err  # raised: it continues


@pytest.mark.in_process
def test_a_corpus_without_any_position_fails_and_says_why(server, tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "flat", "text": " ".join(["word"] * 700)}) + "\n")  # no sentence end
    rc = main(_score_args(corpus, tmp_path / "out", tmp_path / "cache", server.base_url, "--model", "test-gen"))
    err = capsys.readouterr().err
    assert rc == 1, err
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["status"] == "failed" and run["exit_status"] == 1
    assert run["error"].startswith("no position to score in any of the 1 stories (story 'flat':")
    assert "no position to score in any of the 1 stories" in err and "rerun the same command" not in err


@pytest.mark.in_process
def test_a_run_of_other_settings_without_a_report_leaves_no_earlier_report(server, tmp_path, capsys):
    """--no-report over a folder holding a reported run of other settings: the earlier report,
    tables and figures described the outputs this run replaces, so they go with them (said,
    with the command that writes this run's, run here as printed)."""
    import os
    import re

    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(_score_args(corpus, out, cache, server.base_url, "--model", "test-gen")) == 0
    assert {"report.md", "table6.csv", "table18.csv", "figures"} <= {p.name for p in out.iterdir()}
    capsys.readouterr()
    assert main(_score_args(corpus, out, cache, server.base_url, "--model", "test-gen", "--no-report",
                            endings=4)) == 0
    err = capsys.readouterr().err
    names = {p.name for p in out.iterdir()}
    assert not names & {"report.md", "table6.csv", "table18.csv", "figures"}, names
    said = re.search(r"note: removed the earlier run's report.md, table6.csv, table18.csv, figures from .*: they "
                     r"described the outputs this run replaced; `(tension-run report [^`]+)` writes this run's", err)
    assert said, err
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    again = subprocess.run(said.group(1), shell=True, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "4 endings" in (out / "report.md").read_text() or "endings: 4" in (out / "report.md").read_text()
    # the same settings again without a report: its report is this run's, and stays
    capsys.readouterr()
    assert main(_score_args(corpus, out, cache, server.base_url, "--model", "test-gen", "--no-report",
                            endings=4)) == 0
    assert (out / "report.md").exists() and "removed the earlier run's" not in capsys.readouterr().err

@pytest.mark.in_process
def test_reusing_an_out_folder_for_another_run_is_said_and_its_cost_not_added(server, tmp_path, capsys):
    c1 = make_corpus(tmp_path / "c1.jsonl", 1, seed=3)
    c2 = make_corpus(tmp_path / "c2.jsonl", 1, seed=4)
    out, cache = tmp_path / "out", tmp_path / "cache"

    def run(corpus: Path, *flags: str) -> tuple[str, dict]:
        assert main(_score_args(corpus, out, cache, server.base_url, "--model", "test-gen", *flags)) == 0
        return capsys.readouterr().err, json.loads((out / "run.json").read_text())

    err, doc = run(c1)
    assert "note:" not in err and doc["invocations"]["count"] == 1
    err, doc = run(c1, "--judge-concurrency", "7")  # how it runs, not what: the same run, counted
    assert "note:" not in err and doc["invocations"]["count"] == 2
    err, doc = run(c1, "--temperature", "1.0")
    assert f"note: --out {out} held a run of other settings (temperature 1.2 → 1.0); this run replaces it" in err
    assert doc["invocations"]["count"] == 1
    assert "invocations into this folder" not in (out / "report.md").read_text()
    err, doc = run(c2, "--temperature", "1.0")
    assert f"note: --out {out} held a run of another corpus ({c1})" in err
    assert doc["invocations"]["count"] == 1 and "invocations into this folder" not in (out / "report.md").read_text()


# --- finding 10 (8b, 8c): a stop signal while the outputs are written --------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_while_the_outputs_are_written_is_obeyed_and_every_file_agrees(server, tmp_path, sig):
    corpus = make_corpus(tmp_path / "c.jsonl", 4, seed=5)
    args = _score_args(corpus, tmp_path / "clean", tmp_path / "cache", server.base_url, "--model", "test-gen")
    assert main(args) == 0  # a clean run; the signalled one below is then fully cached: all its time is outputs
    out = tmp_path / "out"
    exe = str(Path(sys.executable).parent / "tension-run")
    p = subprocess.Popen([exe, *_score_args(corpus, out, tmp_path / "cache", server.base_url, "--model",
                                            "test-gen")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not (out / "positions.jsonl").exists() and p.poll() is None:
        time.sleep(0.002)
    assert p.poll() is None, p.communicate()  # still writing: the report comes after positions.jsonl
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err  # obeyed, not lost
    assert "Traceback" not in err and "Resume with the same command" in err
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "interrupted" and run["exit_status"] == 130
    # no file says otherwise: a report saying "complete, exit status 0" is not left beside it
    report = out / "report.md"
    assert not report.exists() or "Status **interrupted**" in report.read_text()
    assert main(args[:3] + [str(out)] + args[4:]) == 0  # the same command then finishes
    _same_outputs(out, tmp_path / "clean")
    assert "Status **complete**, exit status 0" in report.read_text()


# --- finding 9 (1a-1d, 2a, 2b): full disks and read-only caches --------------------


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size) -> a fresh tmpfs of `size` bytes (a small disk that fills); needs
    root (CAP_SYS_ADMIN), else the test is skipped saying so; unmounted after."""
    mounted: list[Path] = []

    def mount(size: int, name: str = "disk") -> Path:
        where = tmp_path / name
        where.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"a small disk needs a tmpfs mount, which this user may not make: {r.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(disk: Path, leave: int) -> Path:
    """Fill `disk` but `leave` bytes; the filler file (delete it to make room)."""
    import shutil as sh

    filler = disk / "filler"
    free = sh.disk_usage(disk).free
    with filler.open("wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def test_a_full_disk_under_the_cache_is_said_with_the_free_space_and_the_run_resumes(broken, tmpfs, tmp_path,
                                                                                       capsys):
    corpus, clean = broken
    disk = tmpfs(3 << 20)
    filler = _fill(disk, 100_000)  # a whole run's cache takes 150-180 KB (its commits' timing decides)
    out, cache = tmp_path / "out", disk / "cache"
    with InProcessServer(model=["test-gen"]).serving() as ok:
        rc = _score4(ok.base_url, corpus, out, cache)
        err = capsys.readouterr().err
        assert rc == 1, err
        assert f"cannot write to the cache at {cache}" in err
        assert "The disk holding it has" in err and "bytes (" in err and "a full disk" in err
        assert "rerun the same command to continue" in err
        assert err.count("rerun the same command") == 1  # the way on said once
        run = json.loads((out / "run.json").read_text())
        assert run["status"] == "failed" and run["exit_status"] == 1 and "full disk" in run["error"]
        filler.unlink()
        assert _score4(ok.base_url, corpus, out, cache) == 0, capsys.readouterr().err
    _same_outputs(out, clean)


@pytest.mark.parametrize("leave", [60_000, 12_000], ids=["outputs", "record"])
def test_a_full_disk_under_the_outputs_names_the_file_and_the_way_on(broken, tmpfs, tmp_path, capsys, leave):
    corpus, clean = broken
    disk = tmpfs(2 << 20)
    out, cache = disk / "out", tmp_path / "cache"  # the report's figures are outputs the full disk must refuse
    with InProcessServer(model=["test-gen"]).serving() as ok:
        assert _score4(ok.base_url, corpus, tmp_path / "warm", cache) == 0  # the answers are cached
        filler = _fill(disk, leave)
        rc = _score4(ok.base_url, corpus, out, cache, report=True)
        err = capsys.readouterr().err
        assert rc == 1, err
        line = next((x for x in err.splitlines() if x.startswith("error: cannot write ")), err)
        assert f"error: cannot write {out}/" in line and "No space left on device" in line  # the file
        assert "free on its disk" in line and "rerun the same command to continue" in line
        assert "Traceback" not in err
        if (out / "run.json").exists():  # room is made for it where possible (the partial file gives way)
            run = json.loads((out / "run.json").read_text())
            assert run["status"] == "failed" and "cannot write" in run["error"], err
        else:  # no room even for the record: that is said too
            assert f"error: cannot write {out / 'run.json'}: No space left on device" in err
        filler.unlink()
        ok.reset_records()
        assert _score4(ok.base_url, corpus, out, cache, report=True) == 0, capsys.readouterr().err
        assert ok.count(kind="generation") == ok.count(kind="judge") == 0  # nothing asked again
    _same_outputs(out, clean)


def test_a_file_size_limit_under_the_cache_is_said_like_a_full_disk(server, tmp_path):
    import resource

    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    # 16 endings a position: records are stored compressed, and 3 would fit under the limit
    args = _score_args(corpus, tmp_path / "out", tmp_path / "cache", server.base_url, "--model", "test-gen",
                       "--no-report", endings=16)
    exe = str(Path(sys.executable).parent / "tension-run")
    limit = 200 * 1024  # `ulimit -f 200`

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, preexec_fn=small_files)
    assert r.returncode == 1, r.stderr
    assert f"cannot write to the cache at {tmp_path / 'cache'}" in r.stderr
    assert "a file-size limit (ulimit -f)" in r.stderr and "free" in r.stderr
    assert "Traceback" not in r.stderr
    assert main(args) == 0  # without the limit the same command finishes


# runs a command as the unprivileged user nobody (no DAC override: root reads any file)
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def readonly_cache(broken, tmpfs, tmp_path, request):
    """A cache that holds every answer of `broken`'s corpus (4 endings), made
    read-only as `request.param` says: "ro_mount" (a read-only mount) or
    "ro_files" (folder 555, files 444, read by a user without DAC override)."""
    import os
    import tempfile

    corpus, clean = broken
    if request.param == "ro_mount":
        disk = tmpfs(16 << 20)
        cache, work, prefix = disk / "cache", tmp_path, []
    else:
        work = Path(tempfile.mkdtemp(prefix="tension-ro-"))  # nobody cannot enter pytest's 0700 tmp folders
        os.chmod(work, 0o777)
        corpus = Path(str(work / "c.jsonl"))
        corpus.write_bytes(broken[0].read_bytes())
        os.chmod(corpus, 0o644)
        cache, prefix = work / "cache", AS_NOBODY
    with LoopbackServer(model=["test-gen"]) as ok:  # the wire: the runs below are processes of another user
        assert _score4(ok.base_url, corpus, work / "warm", cache) == 0
        if request.param == "ro_mount":
            subprocess.run(["mount", "-o", "remount,ro", str(cache.parent)], check=True)
        else:
            for f in cache.iterdir():
                os.chmod(f, 0o444)
            os.chmod(cache, 0o555)
        yield ok, corpus, clean, cache, work, prefix
    if request.param == "ro_files":
        import shutil

        shutil.rmtree(work)  # root may: DAC does not stop it


@pytest.mark.parametrize("readonly_cache", ["ro_mount", "ro_files"], indirect=True)
def test_a_read_only_cache_serves_a_fully_cached_rerun_stats_and_the_view(readonly_cache, capsys, monkeypatch):
    import os

    ok, corpus, clean, cache, work, prefix = readonly_cache
    exe = str(Path(sys.executable).parent / "tension-run")
    env = {**os.environ, "HOME": str(work), "MPLCONFIGDIR": str(work / "mpl"),  # writable for nobody
           "NUMBA_CACHE_DIR": str(seeded_numba_cache(work / "numba"))}  # the kernels loaded, not compiled

    def cli(*args: str) -> subprocess.CompletedProcess:
        if not prefix:  # a read-only mount: the mount is the subject, not the process; main() in this one
            monkeypatch.chdir(work)
            capsys.readouterr()
            rc = main(list(args))
            said = capsys.readouterr()
            return subprocess.CompletedProcess(list(args), rc, said.out, said.err)
        # another user's processes (the files' modes are the subject)
        return subprocess.run([*prefix, exe, *args], capture_output=True, text=True, timeout=120, env=env,
                              cwd=work)

    base = ["score", str(corpus), "--base-url", ok.base_url, "--model", "test-gen", "--endings", "4", "--seed",
            "1", "--cache", str(cache), "--no-progress"]
    ok.reset_records()
    r = cli(*base[:2], "--out", str(work / "out"), *base[2:])
    assert r.returncode == 0, r.stderr
    assert f"note: the cache at {cache} cannot be written" in r.stderr
    _same_outputs(work / "out", clean)
    assert ok.count(kind="generation") == ok.count(kind="judge") == 0
    r = cli("cache", "stats", "--cache", str(cache))
    assert r.returncode == 0 and "endings" in r.stdout, r.stderr
    r = cli("view", str(work / "out"), "--cache", str(cache), "--export", str(work / "export"), "--endings")
    assert r.returncode == 0, r.stderr
    endings = next((work / "export" / "r0" / "endings").iterdir()).read_text()
    assert '"cached":true' in endings and "cannot be read" not in endings
    # a run with new answers to keep stops and says what to do
    r = cli(*base[:2], "--out", str(work / "more"), *base[2:7], "5", *base[8:])
    assert r.returncode == 1, r.stderr
    assert f"the cache at {cache} cannot be written" in r.stderr and f"cp -r {cache} NEW" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.in_process
def test_an_export_with_endings_of_which_none_could_be_read_fails(server, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(_score_args(corpus, out, cache, server.base_url, "--model", "test-gen", "--no-report")) == 0
    assert main(["cache", "drop", "--cache", str(cache), "--run", str(out), "--role", "generation", "--yes"]) == 0
    capsys.readouterr()
    rc = main(["view", str(out), "--cache", str(cache), "--export", str(tmp_path / "e"), "--endings"])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "error: none of the" in err and "positions' endings could be read (the endings of this position are " \
                                             "not in the cache" in err


def _generate(url: str, ideas: Path, out: Path, cache: Path, *flags: str) -> int:
    return main(["generate", str(ideas), "--out", str(out), "--mode", "vanilla", "--base-url", url, "--model",
                 "test-gen", "--cache", str(cache), "--no-progress", "--min-chars", "1", *flags])


def test_generate_refresh_asks_a_broken_setups_stories_again(tmp_path, capsys):
    ideas = tmp_path / "ideas.jsonl"
    ideas.write_text("".join(json.dumps({"id": f"i{i}", "idea": f"A lighthouse keeper, {i}."}) + "\n"
                             for i in range(2)))
    with InProcessServer(model=["test-gen"]).serving() as ok:
        assert _generate(ok.base_url, ideas, tmp_path / "clean.jsonl", tmp_path / "clean-cache") == 0
    out, cache = tmp_path / "stories.jsonl", tmp_path / "cache"
    with InProcessServer(model=["test-gen"], misbehave="think").serving() as bad:
        assert _generate(bad.base_url, ideas, out, cache) == 0  # stories of cut reasoning traces (warned)
    assert "generate_reasoning" in json.loads((tmp_path / "stories.run.json").read_text())["warnings"][0]["check"]
    with InProcessServer(model=["test-gen"]).serving() as ok:
        assert _generate(ok.base_url, ideas, out, cache) == 0
        assert ok.count(path="/v1/chat/completions") == 0  # fixed, but replayed from the cache
        assert out.read_bytes() != (tmp_path / "clean.jsonl").read_bytes()
        assert _generate(ok.base_url, ideas, out, cache, "--refresh", "generation") == 0, capsys.readouterr().err
        assert ok.count(path="/v1/chat/completions") > 0
    assert out.read_bytes() == (tmp_path / "clean.jsonl").read_bytes()


def _fairplay(url: str, stories: Path, out: Path, cache: Path, *flags: str) -> int:
    return main(["fairplay", str(stories), "--out", str(out), "--base-url", url, "--model", "test-judge",
                 "--cache", str(cache), "--readers", "gullible", "--no-progress", "--resamples", "50", *flags])


def test_fairplay_refresh_asks_a_broken_readers_answers_again(tmp_path, capsys):
    from fairplay_scripted import scripted

    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record("s1", generator=False)])
    clean = tmp_path / "clean"
    with InProcessServer(model=["test-judge"]).serving() as ok:
        ok.respond(scripted)
        assert _fairplay(ok.base_url, stories, clean, tmp_path / "clean-cache") == 0, capsys.readouterr().err
    out, cache = tmp_path / "out", tmp_path / "cache"
    with InProcessServer(model=["test-judge"], misbehave="think").serving() as bad:
        _fairplay(bad.base_url, stories, out, cache, "--parse-retries", "1")  # readers that never parse
    broken = (out / "readers.jsonl").read_bytes() if (out / "readers.jsonl").exists() else b""
    assert broken != (clean / "readers.jsonl").read_bytes()
    with InProcessServer(model=["test-judge"]).serving() as ok:
        ok.respond(scripted)
        _fairplay(ok.base_url, stories, out, cache, "--parse-retries", "1")
        assert ok.count(path="/v1/chat/completions") == 0  # fixed, but replayed from the cache
        assert _fairplay(ok.base_url, stories, out, cache, "--refresh", "all") == 0, capsys.readouterr().err
    assert (out / "readers.jsonl").read_bytes() == (clean / "readers.jsonl").read_bytes()
