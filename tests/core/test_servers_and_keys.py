"""Servers, models and keys on the user's paths (issue 16, findings 1, 3 and 4).

Every verb that talks to a server checks every server and model it needs before
its first chat request (exit 2, naming the server, the model asked for and the
models it has); a missing endpoint is told from a missing model; a key a server
echoes reaches neither stderr, nor a run record, nor the cache; a server that does
not answer is said at once, with until when it is retried; OPENAI_BASE_URL names
the server when --base-url does not. Through the real CLI against the loopback
server (tests/testing/openai_server.py answers as vLLM does).

The commands run in this process (`main`, or the `tension_run` fixture), except the
two whose subject is a line on the stderr of a process that is still running (the
retries of a server that does not answer, a server lost mid-run): those read the
pipe of a `score` subprocess while it works, then kill it or let it finish.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import CHAT_PATH, LoopbackServer

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-4f2a9c1e7b30d5"  # what the user set; the server wants another


def _closed_port_url() -> str:
    """A URL nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _score(capsys, tmp_path, *flags: str) -> tuple[int, str]:
    corpus = make_corpus(tmp_path / "c.jsonl", 2)
    rc = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
               "--no-progress", "--endings", "2", *flags])
    return rc, capsys.readouterr().err


def _files_bytes(folder: Path) -> bytes:
    return b"".join(f.read_bytes() for f in folder.rglob("*") if f.is_file())


# --- finding 1: a wrong model or server, found before the first chat request ---------


@pytest.mark.in_process
def test_score_with_a_model_the_server_lacks_names_it_and_the_models_the_server_has(server, tmp_path, capsys):
    rc, err = _score(capsys, tmp_path, "--base-url", server.base_url, "--model", "no-such-model")
    assert rc == 2, err
    assert "--model no-such-model" in err and server.base_url in err and "test-gen, test-judge" in err
    # the server's 404 names the model: not a missing /tokenize endpoint, and no advice to rerun
    assert "no /tokenize" not in err and "--tokenizer" not in err and "rerun" not in err
    assert server.count(path=CHAT_PATH) == 0


@pytest.mark.in_process
def test_score_with_a_judge_model_typo_stops_before_any_generation(server, tmp_path, capsys):
    rc, err = _score(capsys, tmp_path, "--base-url", server.base_url, "--model", "test-gen",
                     "--judge-model", "test-jugde")
    assert rc == 2, err
    assert "--judge-model test-jugde" in err and "test-gen, test-judge" in err
    assert server.count(path=CHAT_PATH) == 0


def test_score_with_an_unreachable_judge_server_stops_before_any_generation(server, tmp_path, capsys):
    judge = _closed_port_url()
    rc, err = _score(capsys, tmp_path, "--base-url", server.base_url, "--model", "test-gen",
                     "--judge-base-url", judge, "--judge-model", "j", "--retries", "2", "--retry-seconds", "2")
    assert rc == 1, err
    assert f"the judge server {judge} (--judge-base-url) did not answer" in err
    assert server.count(path=CHAT_PATH) == 0 and server.count(path="/tokenize") == 0


def test_score_on_a_server_without_tokenize_advises_the_tokenizer_flag(tmp_path, capsys):
    with LoopbackServer(model="test-gen", serve_tokenize=False) as srv:
        rc, err = _score(capsys, tmp_path, "--base-url", srv.base_url, "--model", "test-gen")
        assert srv.count(path=CHAT_PATH) == 0
    assert rc == 2, err
    assert "no /tokenize endpoint" in err and "--tokenizer words" in err and "rerun" not in err


@pytest.mark.in_process
def test_generate_with_a_model_the_server_lacks_stops_before_any_idea(server, tmp_path, capsys):
    ideas = tmp_path / "ideas.jsonl"
    ideas.write_text("".join(json.dumps({"id": f"i{i}", "idea": f"A lighthouse keeper, {i}."}) + "\n"
                             for i in range(3)))
    rc = main(["generate", str(ideas), "--out", str(tmp_path / "stories.jsonl"), "--mode", "vanilla",
               "--base-url", server.base_url, "--model", "test-gne", "--cache", str(tmp_path / "cache"),
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "--model test-gne" in err and "test-gen, test-judge" in err
    assert "the others were generated" not in err and server.count(path=CHAT_PATH) == 0


@pytest.mark.in_process
def test_bench_with_a_judge_model_typo_stops_before_any_request(server, tmp_path, capsys):
    rc = main(["bench", "--base-url", server.base_url, "--model", "test-gen", "--judge-model", "nope",
               "--endings", "2", "--positions", "1", "--no-variants"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "--judge-model nope" in err and server.count(path=CHAT_PATH) == 0


# --- finding 3: a key the server echoes ------------------------------------------------


def test_a_key_the_server_echoes_never_reaches_stderr_run_json_or_the_cache(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with LoopbackServer(model="test-gen", api_key="sk-the-right-one", echo_auth=True) as srv:
        rc, err = _score(capsys, tmp_path, "--base-url", srv.base_url, "--model", "test-gen")
        assert any(r.status == 401 for r in srv.requests)  # the echo was sent
    assert rc == 2, err
    assert "refused" in err and "OPENAI_API_KEY" in err and "rerun" not in err
    record = (tmp_path / "out" / "run.json").read_text()
    assert json.loads(record)["status"] == "failed" and "401" in json.loads(record)["error"]
    for where, text in (("stderr", err.encode()), ("run.json", record.encode()),
                        ("outputs", _files_bytes(tmp_path / "out")), ("cache", _files_bytes(tmp_path / "cache"))):
        assert KEY.encode() not in text, where
        assert b"Bearer sk-" not in text, where


def test_a_key_refused_in_the_middle_of_a_run_stops_it_without_rerun_advice(tmp_path, capsys, monkeypatch):
    # The key works for the check and the first answers, then the server stops
    # accepting it (a revoked key): the run stops with exit status 2, the work done
    # is kept, and the echoed key is nowhere.
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with LoopbackServer(model="test-gen", api_key=KEY, echo_auth=True) as srv:
        def revoke(msgs, n, seed):
            srv.api_key = "sk-rotated-key"
            return None

        srv.respond(revoke)
        rc, err = _score(capsys, tmp_path, "--base-url", srv.base_url, "--model", "test-gen")
        assert any(r.status == 401 for r in srv.requests)
    assert rc == 2, err
    assert "HTTP 401" in err and "refuses the API key" in err and "rerun" not in err
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["status"] == "failed" and "401" in record["error"]
    for where, text in (("stderr", err.encode()), ("outputs", _files_bytes(tmp_path / "out")),
                        ("cache", _files_bytes(tmp_path / "cache"))):
        assert KEY.encode() not in text, where


# --- finding 4: silence and defaults ---------------------------------------------------


def test_retries_of_an_unreachable_server_are_told_at_once_under_no_progress(tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    url = _closed_port_url()
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / ".cache")}
    # 8 tries with backoff 0.5 s doubling: about 30-60 s of retrying before it gives up
    proc = subprocess.Popen([sys.executable, "-m", "tension.core.cli", "score", str(corpus), "--out",
                             str(tmp_path / "out"), "--base-url", url, "--model", "m", "--no-progress"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        still_retrying = proc.poll() is None
    finally:
        proc.kill()  # the process this test started, by its handle
        proc.wait()
        proc.stderr.close()
    assert still_retrying, line  # told while the retries go on, not after
    assert line.startswith(f"warning: {url} did not answer GET /v1/models")
    assert "retrying up to 7 more time(s), until about" in line and "retry budget: 8 attempts" in line


def test_openai_base_url_names_the_server_when_no_base_url_is_given(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/v1")  # as the openai SDK takes it
    rc, err = _score(capsys, tmp_path, "--model", "test-gen")
    assert rc == 0, err
    assert f"using the server OPENAI_BASE_URL names, {server.base_url}/v1" in err
    assert server.count(path=CHAT_PATH) > 0


def test_the_default_server_is_said_when_nothing_names_one(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    rc, err = _score(capsys, tmp_path, "--model", "m", "--tokenizer", "words", "--retries", "1",
                     "--timeout", "2")
    assert "no server named (--base-url, OPENAI_BASE_URL, a running embedded server): using " \
           "http://127.0.0.1:8000" in err
    assert rc in (1, 2)  # whatever answers on 8000 here, the run does not pretend it worked


# --- finding 8: reproducibility through faults ----------------------------------------


def test_reruns_and_faults_name_the_seed_where_they_are_described(tension_run):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    reruns = readme.split("- **Reruns are free**", 1)[1].split("\n- **", 1)[0]
    assert "--seed" in reruns and "byte-identical" in reruns
    reliability = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    assert "--seed" in reliability.split("## Servers, models and keys", 1)[1]
    score_help = tension_run("score", "--help").stdout  # words joined below: the wrap width does not matter
    seed_help = " ".join(score_help.split("\n  --seed SEED", 1)[1].split("\n  --", 1)[0].split())
    assert "byte-identical" in seed_help and "faults" in seed_help


def test_a_server_url_with_a_password_is_recorded_without_it():
    from tension.core.config import FairPlayConfig, GenerateConfig, ScoreConfig

    for cfg in (ScoreConfig(base_url="http://me:pw-4f2a9c@gpu:8000,http://gpu:8002",
                            judge_base_url=[{"url": "http://me:pw-4f2a9c@gpu:8001", "weight": 2}]),
                GenerateConfig(base_url="http://me:pw-4f2a9c@gpu:8000"),
                FairPlayConfig(base_url="http://me:pw-4f2a9c@gpu:8000")):
        pub = cfg.public()
        assert "pw-4f2a9c" not in json.dumps(pub), type(cfg).__name__
        assert pub["base_url"].startswith("http://me:***@gpu:8000")


def test_a_server_down_at_start_is_named_before_any_work(tmp_path, tension_run):
    # Behind the vLLM router any request may go to any server, so each is checked
    # first (the router itself calls a dead worker healthy at start-up).
    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    dead = _closed_port_url()
    env = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / ".cache")}
    with LoopbackServer(model="test-gen") as srv:
        r = tension_run("score", corpus, "--out", tmp_path / "out", "--base-url", f"{srv.base_url},{dead}",
                        "--model", "test-gen", "--endings", "2", "--no-progress", env=env)
        assert srv.count(path=CHAT_PATH) == 0
    assert r.returncode != 0 and dead in r.stderr and "Traceback" not in r.stderr


def test_a_server_lost_mid_run_is_told_while_the_run_goes_on(tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2)
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / ".cache")}
    servers = [LoopbackServer(model="test-gen", delay=0.02, max_concurrent=2).start() for _ in range(2)]
    try:
        proc = subprocess.Popen([sys.executable, "-m", "tension.core.cli", "score", str(corpus), "--out",
                                 str(tmp_path / "out"), "--base-url", ",".join(s.base_url for s in servers),
                                 "--model", "test-gen", "--endings", "2", "--no-progress", "--seed", "1"],
                                cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and min(s.count(path=CHAT_PATH) for s in servers) < 5:
                time.sleep(0.01)
            servers[1].shutdown_hard()
            dead = servers[1].base_url
            line = proc.stderr.readline()
            running = proc.poll() is None
            rest = proc.communicate(timeout=300)[1]
        finally:
            proc.kill()  # the process this test started, by its handle
            proc.wait()
    finally:
        for s in servers:
            s.stop()
    assert running, line  # told when it happened, not when the run ended
    # the servers serve both roles, and each role's router is watched apart: either may see the loss first (under
    # load the judge's did), and each says it once at most
    told = [f"warning: {role} server {dead} unhealthy" for role in ("generation", "judge")]
    assert line.startswith(tuple(told)), (dead, line, rest)
    assert all((line + rest).count(t) <= 1 for t in told), (dead, line, rest)
    assert proc.returncode == 0, rest
