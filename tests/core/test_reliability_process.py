"""Reliability of `tension-run score` as a process: SIGKILL at random moments and
resume, SIGTERM / SIGINT, two runs sharing one cache, two runs on one --out folder,
and states a crash or an interrupted run can leave behind.

Every run here is the real console script in a subprocess (except where a test says
why it runs in-process) against the loopback OpenAI-compatible server, whose answers
depend only on the request, so a clean run's outputs are the reference bytes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tension
from tension.cache import records
from tension.cache.keys import request_key
from tension.cache.store import DBS, Store
from tension.core.run.commit import COMMIT_BATCH
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

N = 6  # endings per position
GEN_CONC, JUDGE_CONC, TOKENIZE_CONC = 4, 16, 64  # the lanes of every run here (tokenize: the default)
CHAT = "/v1/chat/completions"
EXE = str(Path(sys.executable).parent / "tension-run")
TIMEOUT = 240  # seconds any one subprocess may take before the test gives up on it


# --- helpers -------------------------------------------------------------------


def score_args(corpus: Path, out: Path, cache: Path, url: str) -> list[str]:
    return [EXE, "score", str(corpus), "--out", str(out), "--base-url", url, "--model", "test-gen",
            "--endings", str(N), "--cache", str(cache), "--no-progress", "--no-report",
            "--gen-concurrency", str(GEN_CONC), "--judge-concurrency", str(JUDGE_CONC)]


def start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p: subprocess.Popen) -> tuple[str, str]:
    try:
        return p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"tension-run score did not end within {TIMEOUT} s (a lock never released?)\n{err[-3000:]}")


def in_process_cfg(url: str, cache: Path, **kw):
    """The settings of `score_args` as the CLI builds them."""
    base = {"base_url": url, "model": "test-gen", "endings": N, "cache": str(cache), "progress": False,
            "report": False, "gen_concurrency": GEN_CONC, "judge_concurrency": JUDGE_CONC}
    base.update(kw)
    return base  # the API's keywords


def read_cache(path: Path) -> dict[str, dict[bytes, object]]:
    """Every record of every database, decoded (a record that does not decode fails
    the test), reduced to what the server answered (no timings or usage)."""
    out: dict[str, dict[bytes, object]] = {}
    kinds = {"endings": records.Endings, "verdicts": records.Verdict, "tokens": records.TokenCount,
             "positions": records.JudgedPosition}
    with Store(path, readonly=True) as store:
        for name in DBS:
            got: dict[bytes, object] = {}
            with store.env.begin(db=store._dbs[name]) as txn:
                for key, value in txn.cursor():
                    rec = records.decode(bytes(value))
                    assert isinstance(rec, kinds[name]), f"{name}: a {type(rec).__name__} record"
                    assert key not in got
                    if isinstance(rec, records.Endings):
                        assert len(rec.texts) == len(rec.finish_reasons) == N, \
                            f"endings record with {len(rec.texts)} texts, {len(rec.finish_reasons)} reasons"
                        got[key] = tuple(rec.texts)
                    elif isinstance(rec, records.Verdict):
                        got[key] = rec.text
                    elif isinstance(rec, records.JudgedPosition):
                        assert len(rec.texts) == N and rec.judged == sum(t is not None for t in rec.texts)
                        got[key] = tuple(rec.texts)
                    else:
                        got[key] = rec.count
            stats = store.stats()[name]["entries"]
            assert stats == len(got), f"{name}: stat() says {stats} entries, the cursor saw {len(got)}"
            out[name] = got
    return out


def partial_lines(out: Path) -> list[bytes]:
    return (out / "positions.partial.jsonl").read_bytes().splitlines(keepends=True)


def wait_for(cond, p: subprocess.Popen | None = None, timeout: float = 120.0, step: float = 0.002) -> bool:
    """Poll `cond` until true; False when the process ended or the time ran out first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        if p is not None and p.poll() is not None:
            return False
        time.sleep(step)
    return False


class Clean:
    """An uninterrupted run's outputs and requests: the reference."""

    def __init__(self, out: Path, cache: Path, requests: dict[str, int]):
        self.positions = (out / "positions.jsonl").read_bytes()
        self.stories = (out / "stories.csv").read_bytes()
        self.lines = set(self.positions.splitlines(keepends=True))
        self.cache = read_cache(cache)
        self.requests = requests  # generation, judge, tokenize as the server saw them
        self.chat = requests["generation"] + requests["judge"]


def clean_in_process(corpus: Path, root: Path) -> Clean:
    with LoopbackServer(model=["test-gen", "test-judge"]) as srv:
        s = tension.score(corpus, out=root / "clean", **in_process_cfg(srv.base_url, root / "clean-cache")).summary
        assert s.status == "complete" and not s.failures, s.error
        req = {"generation": srv.count(kind="generation"), "judge": srv.count(kind="judge"),
               "tokenize": srv.count(path="/tokenize")}
    assert req["generation"] == s.requests["generation"] and req["judge"] == s.requests["judge"]
    return Clean(root / "clean", root / "clean-cache", req)


@pytest.fixture(scope="module")
def clean4(tmp_path_factory):
    """A four-story corpus and its clean run (in-process: the outputs do not depend
    on how the run was started, and this saves a process start per test)."""
    root = tmp_path_factory.mktemp("clean4")
    corpus = make_corpus(root / "c.jsonl", 4, seed=31)
    return corpus, clean_in_process(corpus, root)


def assert_outputs_equal_clean(out: Path, clean: Clean) -> None:
    assert (out / "positions.jsonl").read_bytes() == clean.positions
    assert (out / "stories.csv").read_bytes() == clean.stories
    assert json.loads((out / "run.json").read_text())["status"] == "complete"


# --- 1. SIGKILL at random moments, then resume -----------------------------------


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_gives_the_clean_bytes(server, tmp_path):
    # Enough work that 20 kills cannot finish it: each kill lets the run commit up to
    # ~110 chat requests (or ~1 s of work), and the corpus needs ~5,000.
    corpus = make_corpus(tmp_path / "c.jsonl", 24, seed=41)
    server.delay = 0.003

    # the uninterrupted reference, the same command with its own cache and out
    t0 = time.monotonic()
    r = subprocess.run(score_args(corpus, tmp_path / "clean", tmp_path / "clean-cache", server.base_url),
                       capture_output=True, text=True, timeout=TIMEOUT)
    clean_seconds = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    clean_req = {"generation": server.count(kind="generation"), "judge": server.count(kind="judge"),
                 "tokenize": server.count(path="/tokenize")}
    clean = Clean(tmp_path / "clean", tmp_path / "clean-cache", clean_req)
    assert len(clean.cache["verdicts"]) == clean_req["judge"]  # each judge request made one entry
    server.reset_records()

    rng = random.Random(20240611)
    args = score_args(corpus, tmp_path / "out", tmp_path / "cache", server.base_url)
    moments = []
    torn_tails = 0
    for _ in range(20):
        chat0, tok0 = server.count(path=CHAT), server.count(path="/tokenize")
        mode = rng.choices(["time", "tokenize", "chat"], weights=[2, 3, 15])[0]
        p = start(args)
        if mode == "time":  # anywhere: interpreter start, imports, corpus, first requests
            # (start-up takes ~0.1 s; a later moment would let a fast machine finish the run)
            at = rng.uniform(0.05, 1.2)
            wait_for(lambda: False, p, timeout=at)
            what = f"{at:.2f}s"
        elif mode == "tokenize":
            n = rng.randint(1, 80)
            wait_for(lambda: server.count(path="/tokenize") - tok0 >= n, p)
            what = f"{n} tokenize"
        else:
            n = rng.randint(1, 110)
            wait_for(lambda: server.count(path=CHAT) - chat0 >= n, p)
            what = f"{n} chat"
        time.sleep(rng.uniform(0.0, 0.04))  # anywhere in a group-commit interval
        if p.poll() is not None:
            # On a loaded machine the runs before may have committed nearly all the
            # work, so this one finished first: the kill loop ends here.
            assert p.returncode == 0, p.stderr.read()
            finish(p)
            break
        p.send_signal(signal.SIGKILL)
        finish(p)
        assert p.returncode == -signal.SIGKILL
        moments.append(what)
        # what a killed run left: the partial file holds committed positions only
        lines = partial_lines(tmp_path / "out") if (tmp_path / "out" / "positions.partial.jsonl").exists() else []
        if lines and not lines[-1].endswith(b"\n"):
            torn_tails += 1
            lines = lines[:-1]
        assert all(x in clean.lines for x in lines)
        final_file = tmp_path / "out" / "positions.jsonl"
        if final_file.exists():
            # On a loaded machine the kill can land after the run wrote its outputs
            # but before the process ended: then they must already be the clean ones.
            assert final_file.read_bytes() == clean.positions
            final_file.unlink()  # so the next kill is judged on its own
        if (tmp_path / "cache").exists():
            read_cache(tmp_path / "cache")  # every record decodes after every kill

    time.sleep(0.1)  # requests the last killed run left in flight finish on the server
    killed = {"generation": server.count(kind="generation"), "judge": server.count(kind="judge"),
              "tokenize": server.count(path="/tokenize")}
    before_final = read_cache(tmp_path / "cache")
    r = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    total = {"generation": server.count(kind="generation"), "judge": server.count(kind="judge"),
             "tokenize": server.count(path="/tokenize")}
    final = {k: total[k] - killed[k] for k in total}

    assert_outputs_equal_clean(tmp_path / "out", clean)
    assert sorted(partial_lines(tmp_path / "out")) == sorted(clean.positions.splitlines(keepends=True))
    got = read_cache(tmp_path / "cache")
    assert len(got["verdicts"]) == clean_req["judge"]
    assert got == clean.cache  # the same keys, each once, with the same answers
    # the final run asked only for what no killed run had committed
    assert final["judge"] == clean_req["judge"] - len(before_final["verdicts"])
    assert final["generation"] == clean_req["generation"] - len(before_final["endings"])

    repeats = {k: total[k] - clean_req[k] for k in total}
    chat_repeats = repeats["generation"] + repeats["judge"]
    figures = (f"kills survived: {len(moments)}; moments: {', '.join(moments)}; clean run {clean_seconds:.1f}s; "
               f"requests clean: {clean_req}; all runs: {total} (final run alone: {final}); "
               f"repeated (in flight or not yet committed when killed): {repeats}, "
               f"{chat_repeats / len(moments):.1f} chat requests per kill; partial files with a torn last line: "
               f"{torn_tails}")
    print("\nFIGURES crash/resume:", figures)
    assert len(moments) >= 12, figures  # 20 planned; fewer only if a run finished before its kill
    # A kill loses at most the records waiting for the group commit (fewer than
    # COMMIT_BATCH) and the requests in flight.
    assert 0 <= chat_repeats <= len(moments) * (COMMIT_BATCH + GEN_CONC + JUDGE_CONC), figures
    assert 0 <= repeats["tokenize"] <= len(moments) * (COMMIT_BATCH + TOKENIZE_CONC), figures


# --- 2. SIGTERM and SIGINT -----------------------------------------------------------


def test_the_tests_children_hear_ctrl_c():
    """The SIGINT cases below mean a terminal's Ctrl-C: a child of the tests must start with
    SIGINT at its default even when pytest itself was started with it ignored (in the
    background of a script: tests/conftest.py pytest_configure)."""
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "True", r.stdout + r.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_cleanly_commits_completed_work_and_resumes(server, tmp_path, clean4, sig):
    corpus, clean = clean4
    server.delay = 0.05
    args = score_args(corpus, tmp_path / "out", tmp_path / "cache", server.base_url)
    p = start(args)
    assert wait_for(lambda: server.count(kind="judge") >= 30, p), p.communicate()[1][-3000:]
    p.send_signal(sig)
    _, err = finish(p)
    assert p.returncode == 130, err
    assert "Resume with the same command" in err
    assert "Traceback" not in err
    time.sleep(2 * server.delay + 0.1)  # requests cancelled in flight finish on the server
    seen = {"generation": server.count(kind="generation"), "judge": server.count(kind="judge")}

    out = tmp_path / "out"
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "interrupted"
    assert not (out / "positions.jsonl").exists()
    lines = partial_lines(out)
    assert lines and all(x.endswith(b"\n") for x in lines)
    for x in lines:
        json.loads(x)
    assert all(x in clean.lines for x in lines) and len(set(lines)) == len(lines)
    assert len(lines) < len(clean.lines)

    kept = read_cache(tmp_path / "cache")  # every record decodes
    assert len(kept["verdicts"]) > 0 and len(kept["endings"]) > 0
    # every answer that arrived was committed: only the requests in flight are lost
    assert seen["judge"] - JUDGE_CONC <= len(kept["verdicts"]) <= seen["judge"]
    assert seen["generation"] - GEN_CONC <= len(kept["endings"]) <= seen["generation"]

    server.delay = 0.0
    server.reset_records()
    r = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert_outputs_equal_clean(out, clean)
    assert server.count(kind="judge") == clean.requests["judge"] - len(kept["verdicts"])
    assert server.count(kind="generation") == clean.requests["generation"] - len(kept["endings"])
    assert read_cache(tmp_path / "cache") == clean.cache


# --- 3. two runs sharing one cache ----------------------------------------------------


def test_two_runs_at_once_on_one_cache(server, tmp_path, clean4):
    corpus, clean = clean4
    server.delay = 0.003
    ps = [start(score_args(corpus, tmp_path / f"out{i}", tmp_path / "cache", server.base_url)) for i in range(2)]
    results = [finish(p) for p in ps]
    for p, (_, err) in zip(ps, results):
        assert p.returncode == 0, err
    for i in range(2):
        assert_outputs_equal_clean(tmp_path / f"out{i}", clean)
        assert sorted(partial_lines(tmp_path / f"out{i}")) == sorted(clean.positions.splitlines(keepends=True))
    assert read_cache(tmp_path / "cache") == clean.cache  # each key once, every record decodes

    sent = {"generation": server.count(kind="generation"), "judge": server.count(kind="judge"),
            "tokenize": server.count(path="/tokenize")}
    by_run = [json.loads((tmp_path / f"out{i}" / "run.json").read_text())["requests"] for i in range(2)]
    for k in sent:
        assert sent[k] == by_run[0][k] + by_run[1][k]
    dup = {k: sent[k] - clean.requests[k] for k in sent}
    print(f"\nFIGURES shared cache: requests clean {clean.requests}, both runs {sent}, per run {by_run}; "
          f"duplicated across the two processes (both missed the same key): {dup}")
    assert all(0 <= dup[k] <= clean.requests[k] for k in dup)


# --- 4. two runs on the same --out folder ----------------------------------------------


def test_a_second_run_on_the_same_out_folder_fails_fast_naming_it(server, tmp_path, clean4):
    """Both write positions.partial.jsonl and run.json there, so one of two runs
    started together must be refused at once, with the folder and the other run's
    pid, and the other must end with the clean outputs."""
    corpus, clean = clean4
    server.delay = 0.005
    out = tmp_path / "out"
    ps = [start(score_args(corpus, out, tmp_path / "cache", server.base_url)) for _ in range(2)]
    assert wait_for(lambda: any(p.poll() is not None for p in ps), timeout=TIMEOUT)
    loser = next(p for p in ps if p.poll() is not None)
    winner = ps[1 - ps.index(loser)]
    assert winner.poll() is None, "the first run to end was not refused: both ran to the end"
    _, lerr = finish(loser)
    _, werr = finish(winner)
    assert loser.returncode != 0 and winner.returncode == 0, (lerr, werr)
    assert f"--out {out} is in use by another tension-run score (pid {winner.pid})" in lerr
    assert_outputs_equal_clean(out, clean)
    lines = partial_lines(out)
    assert sorted(lines) == sorted(clean.positions.splitlines(keepends=True))  # one writer: each line once
    run = json.loads((out / "run.json").read_text())
    assert run["requests"]["judge"] == clean.requests["judge"]  # the winner's run.json, not the loser's


# --- 5. a stop signal during the final commit ----------------------------------------------


def test_stop_signal_during_the_final_commit_never_leaves_complete_without_outputs(server, tmp_path, monkeypatch):
    """In-process, so that the signal lands in that window every time: the signal is
    sent by the run itself while it commits its last batch (a real SIGTERM, handled
    by the handler `score` installs)."""
    from tension.core.run.commit import Committer

    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=32)
    original = Committer.close

    def close_with_signal(self):
        os.kill(os.getpid(), signal.SIGTERM)
        return original(self)

    monkeypatch.setattr(Committer, "close", close_with_signal)
    out = tmp_path / "out"
    try:
        status = tension.score(corpus, out=out, **in_process_cfg(server.base_url, tmp_path / "cache")).summary.status
    except BaseException as e:  # noqa: BLE001 - the interrupted form is CancelledError
        status = type(e).__name__
    run = json.loads((out / "run.json").read_text())
    # run.json may say "complete" only when the outputs it describes were written
    assert run["status"] == "interrupted" or (out / "positions.jsonl").exists(), (status, run["status"])
    assert status == "complete" or run["status"] == "interrupted", (status, run["status"])


# --- 6. the context limit and what the cache holds -------------------------------------------


def test_context_limit_does_not_depend_on_what_the_cache_holds(server, tmp_path):
    """The same command on a fresh cache and on a cache whose token counts were
    filled by a run that set max_model_len itself must score the same positions."""
    server.max_model_len = 500  # short enough that late prefixes do not fit, long enough for the judge
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=33)
    kw = {"endings": 2, "continuation_words": 40}
    fresh = tension.score(corpus, out=tmp_path / "fresh",
                          **in_process_cfg(server.base_url, tmp_path / "fresh-cache", **kw)).summary
    assert fresh.status == "complete" and not fresh.failures and fresh.too_long
    warm = tension.score(corpus, out=tmp_path / "warm",
                         **in_process_cfg(server.base_url, tmp_path / "cache", max_model_len=500, **kw)).summary
    assert warm.status == "complete" and warm.too_long == fresh.too_long
    with Store(tmp_path / "cache", readonly=True) as st:
        assert st.get("tokens", request_key("context", {"model": "test-gen"})) is None

    again = tension.score(corpus, out=tmp_path / "again",
                          **in_process_cfg(server.base_url, tmp_path / "cache", **kw)).summary
    assert [f.id for f in again.failures] == []
    assert again.too_long == fresh.too_long
    assert (tmp_path / "again" / "positions.jsonl").read_bytes() == (tmp_path / "fresh" / "positions.jsonl").read_bytes()
