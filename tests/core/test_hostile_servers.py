"""Hostile ground for the servers and the router (issue 25): servers without
/health, a client killed with SIGKILL, the router's leftovers and its start-up
failures, a worker that answers HTTP 200 with an HTML page among good ones, 429
storms, answers far beyond max_tokens, list URLs that name an endpoint, URL
credentials beside an API key, a server that reports no usage. Every router here
is the real `vllm-router` binary over loopback servers.

The commands run in this process (`main`, or `route` through the `tension_run`
fixture: each `route` here stops before it serves). One stays a process: the client
killed with SIGKILL, whose router must die with it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.core.llm.vllm_router import free_port
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import CHAT_PATH, LoopbackServer
from tension.testing.procs import children, running

MODELS = ["test-gen", "test-judge"]
EXE = str(Path(sys.executable).parent / "tension-run")


def score_argv(corpus: Path, tmp_path: Path, urls: str, *more: str) -> list[str]:
    return ["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", urls, "--model", "test-gen",
            "--judge-model", "test-judge", "--endings", "2", "--seed", "7", "--cache", str(tmp_path / "cache"),
            "--no-progress", "--no-report", *more]


@pytest.fixture
def pair(loopback_servers):
    return loopback_servers(2)


@pytest.fixture
def route(tension_run):
    """`route(*args)`: `tension-run route ARGS` in this process, for a `route` that stops
    before it serves; it must leave this process's stop handlers as it found them (it
    makes SIGTERM a Ctrl-C only while it serves: core/cli/route.py)."""
    def run(*args: str):
        before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        r = tension_run("route", *args)
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
        return r

    return run


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """The system temp folder of this process (where vllm-router's log goes), empty."""
    folder = tmp_path / "systmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


# --- /health (review 4a, 4b) ---------------------------------------------------------

def test_score_over_servers_without_health_says_at_once_that_the_router_needs_it(tmp_path, capsys, own_tmp):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    servers = [LoopbackServer(model=MODELS, serve_health=False).start() for _ in range(2)]
    try:
        rc = main(score_argv(corpus, tmp_path, ",".join(s.base_url for s in servers)))
        err = capsys.readouterr().err
        assert rc == 2, err
        assert (f"{servers[0].base_url} has no /health endpoint (HTTP 404); vllm-router needs it (vLLM serves it)"
                in err)
        assert "not ready within" not in err and "Traceback" not in err
        assert all(s.count(path=CHAT_PATH) == 0 for s in servers)
        assert list(own_tmp.iterdir()) == []  # no router was started, no log left
    finally:
        for s in servers:
            s.stop()


def test_route_over_servers_without_health_says_at_once_that_the_router_needs_it(route):
    servers = [LoopbackServer(model=MODELS, serve_health=False).start() for _ in range(2)]
    try:
        r = route(*(s.base_url for s in servers), "--port", str(free_port()))
    finally:
        for s in servers:
            s.stop()
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"error: {servers[0].base_url} has no /health endpoint (HTTP 404); "
                               "vllm-router needs it (vLLM serves it)"), r.stderr
    assert "Traceback" not in r.stderr


# --- the router's process: killed client, leftovers, start-up failure (8d, 11g, 11h) ---

def _router_of(pid: int) -> int | None:
    for child in children(pid):
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"vllm-router" in cmd:
            return child
    return None


def test_a_client_killed_with_sigkill_leaves_no_router_running(pair, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 4, seed=3)
    for s in pair:
        s.delay = 0.05  # the run is still going when the kill lands
    p = subprocess.Popen([EXE, *score_argv(corpus, tmp_path, ",".join(s.base_url for s in pair))],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        router = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            router = router or _router_of(p.pid)
            if router is not None and sum(s.count(path=CHAT_PATH) for s in pair) > 0:
                break
            time.sleep(0.02)
        assert router is not None and p.poll() is None, "the run ended before its router served"
        p.kill()
        p.wait()
        deadline = time.monotonic() + 30
        while running(router) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(router), "vllm-router outlived its SIGKILLed client"
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()  # reaped and its pipes closed, so nothing of it reaches the next test
        p.stderr.close()


def test_a_clean_multi_server_run_leaves_no_router_log(pair, tmp_path, capsys, own_tmp):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    rc = main(score_argv(corpus, tmp_path, ",".join(s.base_url for s in pair)))
    assert rc == 0, capsys.readouterr().err
    assert list(own_tmp.iterdir()) == []


def test_route_on_a_busy_port_prints_only_the_cause(pair, route):
    r = route(pair[0].base_url, pair[1].base_url, "--port", str(pair[0].port))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Address already in use" in lines[0] and lines[0].startswith("error: vllm-router could not start")
    assert "\x1b[" not in r.stderr and "DEBUG" not in r.stderr and "Traceback" not in r.stderr
    log = Path(lines[0].rsplit("its log: ", 1)[1].rstrip(")"))
    assert log.exists()  # named in the error: kept
    log.unlink()


# --- one bad worker among several (review 5m) ------------------------------------------

OUTPUTS = ("positions.jsonl", "stories.csv", "groups.csv", "meta.jsonl")


def _cfg(urls: str, tmp_path: Path, cache: str, **kw):
    """The API's keywords."""
    return {"base_url": urls, "model": "test-gen", "judge_model": "test-judge", "cache": str(tmp_path / cache),
            "endings": 4, "progress": False, "seed": 7, "report": False, **kw}


def _outputs(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in OUTPUTS}


def test_a_worker_answering_html_with_200_is_taken_out_and_the_run_ends_on_the_others(pair, tmp_path, capsys):
    import tension

    corpus = make_corpus(tmp_path / "c.jsonl", 6, seed=3)
    good, bad = pair
    clean = tension.score(corpus, out=tmp_path / "clean", **_cfg(good.base_url, tmp_path, "clean-cache")).summary
    assert clean.status == "complete", clean.error
    good.reset_records()
    bad.misbehave = "html200"  # a proxy's welcome page for every POST; /v1/models and /health stay well
    s = tension.score(corpus, out=tmp_path / "out",
                      **_cfg(f"{good.base_url},{bad.base_url}", tmp_path, "cache")).summary
    err = capsys.readouterr().err
    assert s.status == "complete", s.error
    assert _outputs(tmp_path / "out") == _outputs(tmp_path / "clean")  # --seed: the retries sample the same
    assert bad.count(path=CHAT_PATH) + bad.count(path="/tokenize") >= 1  # it was routed to before it went out
    told = [e for e in s.replica_events if "taken out" in e]
    assert len(told) == 1 and told[0].startswith(f"generation and judge server {bad.base_url} sent an unreadable "
                                                 "answer (HTTP 200 with an unreadable body"), s.replica_events
    assert f"the run goes on with {good.base_url}" in told[0]
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    for role in ("generation", "judge"):
        fig = {f["url"]: f for f in run["replicas"][role]}
        assert fig[bad.base_url]["up"] is False and fig[bad.base_url]["taken_out"].startswith("HTTP 200")
        assert fig[good.base_url]["up"] is True and fig[good.base_url]["taken_out"] is None
    router_port = run["replicas"]["generation"][0]["router"].rsplit(":", 1)[1]
    assert f"127.0.0.1:{router_port}" not in err  # the notices name the servers, not the router's own port


def test_when_every_worker_answers_html_the_error_names_the_servers_not_the_router(pair, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    for s in pair:
        s.misbehave = "html200"
    rc = main(score_argv(corpus, tmp_path, ",".join(s.base_url for s in pair), "--retries", "3"))
    err = capsys.readouterr().err
    assert rc == 1, err
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    router = run["replicas"]["generation"][0]["router"]
    assert router not in err and router not in run["error"]
    servers = ", ".join(s.base_url for s in pair)
    assert f"the generation and judge servers (via vllm-router over {servers}), POST /tokenize: gave up" in err
    assert "sent an unreadable answer to POST /tokenize" in err


# --- retry notices in a 429 storm (review 5k) -------------------------------------------

def test_a_429_storm_prints_one_notice_per_server_per_interval_worded_as_a_refusal(server, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    # 30 refusals (Retry-After: 0) taken by the first requests to arrive: a storm
    # spread over the first wave, never one request refused until it gives up (a
    # random rate did that now and then, and its backoff outlasted the interval).
    server.fail_next("429", 30)
    rc = main(score_argv(corpus, tmp_path, server.base_url))
    err = capsys.readouterr().err
    assert rc == 0, err
    retried = sum(1 for r in server.requests if r.fault == "429")
    assert retried > 20  # a storm: every one retried
    notices = [line for line in err.splitlines() if line.startswith("warning:") and server.base_url in line]
    assert len(notices) <= 2, notices  # one retry notice (the run is shorter than the interval), one "again"
    assert notices[0].startswith(f"warning: {server.base_url} refused POST /v1/chat/completions (HTTP 429: ")
    assert "did not answer" not in err


# --- answers far beyond max_tokens (review 5g) -------------------------------------------

@pytest.mark.parametrize("batching", [False, True], ids=["chat", "batched"])
def test_answers_far_beyond_max_tokens_are_kept_cut_and_said_once(tmp_path, capsys, batching):
    from tension.core.llm.choices import CHARS_MARGIN, CHARS_PER_TOKEN
    from tension.testing.cache_records import verdict_records
    from tension.testing.openai_server import classify

    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    huge = "Y " + "pad " * 250_000  # 1 MB per verdict, for --judge-max-tokens 10
    with LoopbackServer(model=MODELS, batching=batching) as srv:
        srv.respond(lambda msgs, n, seed: huge if classify(msgs) == "judge" else None)
        rc = main(score_argv(corpus, tmp_path, srv.base_url, "--judge-batch", "on" if batching else "off"))
        err = capsys.readouterr().err
        assert srv.count(path="/v1/completions" if batching else CHAT_PATH, kind=None) > 0
    assert rc == 0, err
    limit = CHARS_PER_TOKEN * 10 + CHARS_MARGIN
    verdicts = verdict_records(tmp_path / "cache")
    assert verdicts and all(len(v.text) == limit for v in verdicts.values())
    told = [line for line in err.splitlines() if "ignores max_tokens" in line]
    assert len(told) == 1 and told[0].startswith(f"warning: {srv.base_url} ignores max_tokens: it sent an answer "
                                                 f"of {len(huge):,} characters for max_tokens 10"), err


# --- a list item that names an endpoint (review 4e) ------------------------------------

@pytest.mark.parametrize("flag", ["--base-url", "--judge-base-url"])
@pytest.mark.parametrize("bad", [0, 1])
def test_a_list_item_naming_an_endpoint_is_told_it_is_not_a_servers_root(pair, tmp_path, capsys, flag, bad):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    items = [s.base_url for s in pair]
    items[bad] += "/v1/chat/completions"
    more = [] if flag == "--base-url" else ["--judge-base-url", ",".join(items)]
    rc = main(score_argv(corpus, tmp_path, ",".join(items) if flag == "--base-url" else pair[0].base_url, *more))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith(f"error: {flag}[{bad}] {items[bad]}: not the root of an OpenAI-compatible server "
                          "(GET /v1/models answered HTTP 404"), err
    assert all(s.count(path=CHAT_PATH) == 0 for s in pair)


# --- URL credentials beside an API key (review 10d) ---------------------------------------

@pytest.mark.parametrize("verb", ["score", "generate"])
def test_url_credentials_and_an_api_key_together_are_a_usage_error_before_any_request(server, tmp_path, capsys,
                                                                                      monkeypatch, verb):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-CANARY-10d")
    url = server.base_url.replace("http://", "http://alice:PW-SECRET@")
    if verb == "score":
        argv = score_argv(make_corpus(tmp_path / "c.jsonl", 1, seed=3), tmp_path, url)
    else:
        ideas = tmp_path / "ideas.jsonl"
        ideas.write_text('{"id": "i1", "idea": "a lighthouse keeper finds a letter"}\n')
        argv = ["generate", str(ideas), "--out", str(tmp_path / "gen"), "--base-url", url, "--model", "test-gen",
                "--cache", str(tmp_path / "cache"), "--no-progress"]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "has a user in its URL, and an API key is set too" in err and "Traceback" not in err
    assert "PW-SECRET" not in err and "sk-CANARY-10d" not in err
    assert server.requests == []  # not one request, not even /v1/models


# --- a server that reports no usage (review 5l) ---------------------------------------------

def test_a_server_reporting_no_usage_gets_unknown_tokens_in_report_md_not_zeros(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    with LoopbackServer(model=MODELS, serve_usage=False) as srv:
        argv = [a for a in score_argv(corpus, tmp_path, srv.base_url) if a != "--no-report"]
        rc = main(argv)
    assert rc == 0, capsys.readouterr().err
    report = (tmp_path / "out" / "report.md").read_text()
    assert "- tokens this run: unknown: the server reported no token usage" in report
    assert "- tokens of all answers (as if nothing were cached): unknown: the server reported no token usage" in report
    assert "0 prompt" not in report


def test_generate_over_a_worker_answering_html_ends_on_the_others_with_the_clean_stories(pair, tmp_path, capsys):
    long = "The ferry left without her, and the harbour lights went out one by one. " * 4
    ideas = tmp_path / "ideas.jsonl"
    ideas.write_text("".join(json.dumps({"id": f"i{i}", "idea": f"A keeper finds letter number {i}."}) + "\n"
                             for i in range(6)))
    good, bad = pair
    for s in pair:
        s.script("Write the story now.", lambda m, seed, i: f"STORY[{seed}] {m[-1]['content'][-40:]} " + long)

    def generate(urls: str, name: str) -> list[dict]:
        out = tmp_path / f"{name}.jsonl"
        rc = main(["generate", str(ideas), "--out", str(out), "--mode", "vanilla", "--base-url", urls,
                   "--model", "test-gen", "--cache", str(tmp_path / f"cache-{name}"), "--no-progress"])
        assert rc == 0, capsys.readouterr().err
        return [{k: r[k] for k in ("idea_id", "text")} for r in map(json.loads, out.read_text().splitlines())]

    clean = generate(good.base_url, "clean")
    bad.misbehave = "html200"
    assert generate(f"{good.base_url},{bad.base_url}", "routed") == clean
    assert bad.count(path=CHAT_PATH) >= 1  # routed to before it went out
    err = capsys.readouterr().err
    assert f"generation server {bad.base_url} sent an unreadable answer" in err and "taken out" in err
