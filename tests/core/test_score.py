"""`score` end to end against the loopback OpenAI-compatible server: numbers,
prompts, rerun semantics, interruption and faults.

The runs are in this process (the API, `main`, `tension_run`), but the SIGINT test's:
a signal sent to a process, and its resume, are the console script in a subprocess."""

from __future__ import annotations

import asyncio
import csv
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tension
from tension.cache.store import Store
from tension.testing.corpus import make_corpus, write_story
from tension.testing.interrupt import cancel_midway
from tension.testing.openai_server import count_tokens, expected_endings, expected_verdict

N = 6  # endings per position: small, so the tests run in seconds


def cfg_for(srv, tmp_path, **kw):
    base = {"base_url": srv.base_url, "model": "test-gen", "cache": str(tmp_path / "cache"), "endings": N,
            "progress": False, "seed": 7, "report": False}  # no test here reads report.md or its figures
    base.update(kw)
    return base  # the API's keywords: tension.score(corpus, out=…, **cfg_for(…))


def read_positions(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "positions.jsonl").read_text().splitlines()]


# --- an independent computation of positions, prompts and verdicts -------------
# Written from docs/metrics.md 1.1-1.3 and the paper's appendix, not from core/.

_SPLIT = re.compile(r"([.!?][\"\u201d\u2019)]*)\s+(?=[A-Z\u201c\"(\[])")


def ref_sentences(text: str) -> list[str]:
    marked = _SPLIT.sub(lambda m: m.group(1) + "\x00", text)
    return [s.strip() for s in marked.split("\x00") if s.strip()]


def ref_positions(text: str) -> list[tuple[int, float]]:
    s = ref_sentences(text)
    total = count_tokens(" ".join(s))
    out = []
    for k in range(1, len(s)):
        if len(s[k - 1].split()) < 10:
            continue
        pct = count_tokens(" ".join(s[:k])) / total
        if 0.10 <= pct <= 0.99:
            out.append((k, pct))
    return out


def ref_generation_messages(prefix: str) -> list[dict]:
    return [
        {"role": "system", "content": "You are a fiction writer. Write only story text."},
        {"role": "user", "content": "In 2\u20133 sentences, describe how you think this story ends. No commentary, "
                                    "no explanation, no preamble.\n\nSTORY SO FAR:\n" + prefix},
    ]


def ref_judge_messages(anchor: str, continuation: str, ending: str) -> list[dict]:
    system = ("You are a literary judge. You determine whether a predicted story ending captures the general "
              "direction of the true story continuation. Answer Y if the prediction gets the broad plot trajectory "
              "right \u2014 the same characters are involved, similar types of events unfold, or the emotional arc "
              "matches. Minor differences in specific details, wording, or sequence are acceptable. Answer N only "
              "if the prediction describes a fundamentally different outcome from what actually happens.")
    user = ("Here is the actual continuation of a story:\n\n\u2014BEGIN CONTINUATION\u2014\n"
            f"{anchor} {continuation}\n\u2014END CONTINUATION\u2014\n\nHere is a predicted ending:\n\n"
            f"\u2014BEGIN PREDICTED\u2014\n{anchor} {ending}\n\u2014END PREDICTED\u2014\n\n"
            "Does the predicted ending capture the general direction of the true continuation \u2014 similar "
            "characters involved, similar types of events, or a matching emotional arc? Answer Y if the broad "
            "trajectory is right, even if specific details differ. Answer N only if the prediction is "
            "fundamentally wrong about what happens. Answer ONLY Y or N.\n\nJudgment:")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def ref_position_seed(seed: int | None, prefix: str) -> int | None:
    """The seed of a position's generation request, as docs/metrics.md 1.2-1.3 states it:
    BLAKE2b's first 8 bytes of "{seed}\\0{prefix}", big-endian, modulo 2**31 - 10,000."""
    if seed is None:
        return None
    import hashlib
    digest = hashlib.blake2b(f"{seed}\0{prefix}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (2**31 - 10_000)


def ref_no_rates(text: str, n: int, seed, yes_rate=0.3, empty_rate=0.0) -> list[tuple[int, float, float, int]]:
    s = ref_sentences(text)
    out = []
    for k, pct in ref_positions(text):
        prefix = " ".join(s[:k])
        endings = expected_endings(ref_generation_messages(prefix), n, ref_position_seed(seed, prefix),
                                   empty_rate=empty_rate)
        words = " ".join(s[k:]).split()
        cont = " ".join(s[k:]) if len(words) <= 2000 else " ".join(words[:2000])
        yes = sum(expected_verdict(ref_judge_messages(s[k - 1], cont, e), yes_rate=yes_rate) == "Y"
                  for e in endings if e.strip())
        out.append((k, pct, 1 - yes / n, sum(1 for e in endings if not e.strip())))
    return out


# --- tests ---------------------------------------------------------------------


@pytest.mark.in_process
def test_no_rates_positions_and_pct_match_an_independent_computation(server, tmp_path):
    server.empty_rate = 0.1
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=1)
    s = tension.score(corpus, out=tmp_path / "out", **cfg_for(server, tmp_path)).summary
    assert s.status == "complete", s.error
    got = read_positions(tmp_path / "out")
    stories = [json.loads(x) for x in corpus.read_text().splitlines()]
    want = [(st["id"], k, pct, nr, ne) for st in stories for k, pct, nr, ne in ref_no_rates(st["text"], N, 7, 0.3, 0.1)]
    assert len(got) == len(want) > 30
    for g, (sid, k, pct, nr, ne) in zip(got, want):
        assert (g["id"], g["k"]) == (sid, k)
        assert g["pct"] == pytest.approx(pct, abs=1e-15)
        assert g["no_rate"] == pytest.approx(nr, abs=1e-12)
        assert g["n_endings"] == N and g["n_empty"] == ne
    assert sum(g["n_empty"] for g in got) > 0  # the empty-ending path was exercised
    # stories.csv holds the kernels' statistics of these very curves
    rows = list(csv.DictReader((tmp_path / "out" / "stories.csv").read_text().splitlines()))
    assert [r["id"] for r in rows] == [st["id"] for st in stories]
    for r in rows:
        ys = [g["no_rate"] for g in got if g["id"] == r["id"]]
        assert float(r["mean_nr"]) == pytest.approx(sum(ys) / len(ys), rel=1e-9)
        assert int(r["n_positions"]) == len(ys)


@pytest.mark.in_process
def test_judge_prompts_hold_anchor_and_truncated_continuation(server, tmp_path):
    import random
    long_story = write_story(random.Random(5), 2600)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "long", "text": long_story}) + "\n")
    s = tension.score(corpus, out=tmp_path / "out", **cfg_for(server, tmp_path, endings=2, pct_max=0.2)).summary
    assert s.status == "complete", s.error
    judge = [r for r in server.requests if r.path == "/v1/chat/completions" and r.body["messages"][0]["content"].startswith("You are a literary judge")]
    gen = [r for r in server.requests if r.path == "/v1/chat/completions" and r.body["n"] == 2]
    sents = ref_sentences(long_story)
    positions = ref_positions(long_story)
    positions = [(k, p) for k, p in positions if p <= 0.2]
    assert len(gen) == len(positions)
    # one ending per judge request, each generated ending judged exactly once
    assert len(judge) == 2 * len(positions)
    seen = {json.dumps(r.body["messages"]) for r in judge}
    for k, _ in positions:
        prefix = " ".join(sents[:k])
        endings = expected_endings(ref_generation_messages(prefix), 2, ref_position_seed(7, prefix))
        cont_words = " ".join(sents[k:]).split()
        assert len(cont_words) > 2000  # so truncation is exercised
        cont = " ".join(cont_words[:2000])
        for e in endings:
            assert json.dumps(ref_judge_messages(sents[k - 1], cont, e)) in seen
    for r in judge:
        assert r.body["n"] == 1 and r.body["temperature"] == 0 and r.body["max_tokens"] == 10
        assert r.body["chat_template_kwargs"] == {"enable_thinking": False}
        assert r.body["messages"][1]["content"].count("BEGIN PREDICTED") == 1
    for r in gen:
        assert (r.body["temperature"], r.body["top_p"], r.body["max_tokens"]) == (1.2, 0.95, 150)


@pytest.mark.in_process
def test_rerun_judge_change_and_corpus_extension(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=2)
    out = tmp_path / "out"
    first = tension.score(corpus, out=out, **cfg_for(server, tmp_path)).summary
    assert first.status == "complete"
    before = out.joinpath("positions.jsonl").read_bytes()
    n_first = len(server.requests)

    # the same command again: nothing is sent at all
    server.reset_records()
    again = tension.score(corpus, out=out, **cfg_for(server, tmp_path)).summary
    assert again.status == "complete" and server.requests == []
    assert out.joinpath("positions.jsonl").read_bytes() == before
    assert again.cache_hits["endings"] == first.requests["generation"]

    # another judge model: only judge requests, all of them to the new model
    server.reset_records()
    other = tension.score(corpus, out=tmp_path / "out2", **cfg_for(server, tmp_path, judge_model="test-judge")).summary
    assert other.status == "complete"
    assert server.count(kind="generation") == 0 and server.count(path="/tokenize") == 0
    assert server.count(kind="judge") == first.requests["judge"] > 0
    # before its first chat request, the run checked that its server serves its models (once)
    assert server.count(path="/v1/models") == 1
    assert {r.body["model"] for r in server.requests if r.path != "/v1/models"} == {"test-judge"}

    # two more stories: only they are requested
    server.reset_records()
    with corpus.open("a") as f:
        f.write(make_corpus(tmp_path / "more.jsonl", 2, seed=3, start=3).read_text())
    more = tension.score(corpus, out=out, **cfg_for(server, tmp_path)).summary
    assert more.status == "complete" and more.stories == 5
    new_texts = [json.loads(x)["text"] for x in (tmp_path / "more.jsonl").read_text().splitlines()]
    gen_prefixes = [r.body["messages"][1]["content"].split("STORY SO FAR:\n", 1)[1]
                    for r in server.requests if r.body and r.path == "/v1/chat/completions"
                    and "STORY SO FAR" in r.body["messages"][1]["content"]]
    assert gen_prefixes and all(any(" ".join(ref_sentences(t)).startswith(p) for t in new_texts) for p in gen_prefixes)
    assert out.joinpath("positions.jsonl").read_bytes().startswith(before)
    assert n_first > 0


@pytest.mark.in_process
def test_cancelled_run_resumes_to_identical_outputs_without_repeats(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 4, seed=4)
    clean = tension.score(corpus, out=tmp_path / "clean",
                          **cfg_for(server, tmp_path, cache=str(tmp_path / "clean-cache"))).summary
    assert clean.status == "complete"
    total_gen, total_judge = clean.requests["generation"], clean.requests["judge"]

    server.delay = 0.002
    cfg = cfg_for(server, tmp_path, gen_concurrency=4, judge_concurrency=8)

    server.reset_records()
    cancel_midway(lambda: tension.score_async(corpus, out=tmp_path / "out", **cfg),
                  lambda: server.count(kind="judge") >= total_judge // 3)
    run_json = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run_json["status"] == "interrupted"
    assert not (tmp_path / "out" / "positions.jsonl").exists()
    partial = (tmp_path / "out" / "positions.partial.jsonl").read_text().splitlines()
    assert 0 < len(partial) < len(read_positions(tmp_path / "clean"))
    with Store(tmp_path / "cache") as st:
        kept = st.stats()

    server.delay = 0.0
    resumed = tension.score(corpus, out=tmp_path / "out", **cfg).summary
    assert resumed.status == "complete"
    assert (tmp_path / "out" / "positions.jsonl").read_bytes() == (tmp_path / "clean" / "positions.jsonl").read_bytes()
    # nothing requested twice: every request of the resumed run made a new cache entry
    with Store(tmp_path / "cache") as st:
        now = st.stats()
    assert now["endings"]["entries"] - kept["endings"]["entries"] == resumed.requests["generation"]
    assert now["verdicts"]["entries"] - kept["verdicts"]["entries"] == resumed.requests["judge"]
    assert resumed.requests["generation"] < total_gen and resumed.requests["judge"] < total_judge
    assert now["verdicts"]["entries"] == clean.requests["judge"]


@pytest.mark.in_process
def test_a_completed_run_keeps_its_partial_file_with_this_runs_lines_in_commit_order(server, tmp_path):
    """positions.partial.jsonl stays beside positions.jsonl (README, "Outputs"), as
    generate's OUT.partial and fairplay's readers.partial.jsonl do: the lines as they
    were committed, which a stop would have left. A rerun into the folder starts it
    anew, and writes every line again (the cached positions too)."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=4)
    out = tmp_path / "out"
    for _ in range(2):  # the run, then a rerun from the cache
        assert tension.score(corpus, out=out, **cfg_for(server, tmp_path)).summary.status == "complete"
        final = (out / "positions.jsonl").read_text().splitlines()
        partial = (out / "positions.partial.jsonl").read_text().splitlines()
        assert sorted(partial) == sorted(final) and len(final) > 1


@pytest.mark.in_process
def test_short_answers_are_completed(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=6)
    server.fail_next("few_choices", times=3)
    s = tension.score(corpus, out=tmp_path / "out", **cfg_for(server, tmp_path)).summary
    assert s.status == "complete"
    assert all(p["n_endings"] == N for p in read_positions(tmp_path / "out"))
    gen = [r.body for r in server.requests if r.path == "/v1/chat/completions" and r.kind == "generation"]
    followups = [b for b in gen if b["n"] < N]
    assert len(followups) == 3 and all(b["n"] == N - N // 2 for b in followups)
    first = {json.dumps(b["messages"]): b["seed"] for b in gen if b["n"] == N}
    # the seed moves on from the position's own: no repeated samples
    assert all(b["seed"] == first[json.dumps(b["messages"])] + N // 2 for b in followups)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["http"]["followups"] == 3


def test_faults_are_retried_and_outputs_unchanged(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=8)
    clean = tension.score(corpus, out=tmp_path / "clean",
                          **cfg_for(server, tmp_path, cache=str(tmp_path / "clean-cache"))).summary
    for kind in ("500", "503", "drop", "truncate", "nonjson", "429"):
        server.fail_next(kind, times=2)
    server.fail_next("503", times=2, path="/tokenize")
    s = tension.score(corpus, out=tmp_path / "out", **cfg_for(server, tmp_path)).summary
    assert s.status == "complete", s.error
    assert server.pending_faults() == 0 and server.pending_faults("/tokenize") == 0
    assert (tmp_path / "out" / "positions.jsonl").read_bytes() == (tmp_path / "clean" / "positions.jsonl").read_bytes()
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["http"]["retries"] == 14
    assert clean.status == "complete"


def test_retry_budget_ends_with_a_clear_error_and_keeps_completed_work(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=9)
    cfg = cfg_for(server, tmp_path, retries=3, gen_concurrency=2, judge_concurrency=4)

    async def break_server_midway():
        task = asyncio.ensure_future(tension.score_async(corpus, out=tmp_path / "out", **cfg))
        while server.count(kind="judge") < 60 and not task.done():
            await asyncio.sleep(0.005)
        server.set_fault_rates({"503": 1.0}, path=None)
        return (await task).summary

    s = asyncio.run(break_server_midway())
    assert s.status == "failed"
    assert "gave up after 3 attempt(s)" in s.error and "HTTP 503" in s.error
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["status"] == "failed" and run["error"] == s.error
    with Store(tmp_path / "cache") as st:
        kept = st.stats()["verdicts"]["entries"]
    assert kept >= 55  # what completed before the outage is in the cache

    server.clear_faults()
    server.reset_records()
    done = tension.score(corpus, out=tmp_path / "out", **cfg).summary
    assert done.status == "complete"
    assert done.cache_hits["verdicts"] >= kept
    assert server.count(kind="judge") == done.requests["judge"]


@pytest.mark.in_process
def test_prefix_over_the_context_is_skipped_not_sent(server, tmp_path):
    """A position whose prompt would not fit the model's context (as /tokenize
    reports it) is skipped with a reason, never sent to fail."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=10)
    import random
    with corpus.open("a") as f:
        f.write(json.dumps({"id": "huge", "text": write_story(random.Random(1), 4900)}) + "\n")
    server.max_model_len = 4000
    s = tension.score(corpus, out=tmp_path / "out", **cfg_for(server, tmp_path)).summary
    assert s.status == "complete" and s.failures == []
    assert set(s.too_long) == {"huge"} and s.too_long["huge"] > 10
    assert all(r.status == 200 for r in server.requests)  # nothing was sent to fail
    ks = [p["k"] for p in read_positions(tmp_path / "out") if p["id"] == "huge"]
    assert ks and max(ks) < len(ref_sentences(json.loads(corpus.read_text().splitlines()[2])["text"]))
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["context_len"] == 4000 and run["positions_skipped_too_long"] == s.too_long


@pytest.mark.in_process
def test_positions_refused_for_the_context_are_skipped_not_the_run(server, tmp_path):
    """A context 400 the client could not foresee (here: the context set wrongly
    larger than the server's) skips the positions refused, as those known to be too
    long before sending are (issue 26, F7: before, it failed the whole story)."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=10)
    import random
    with corpus.open("a") as f:
        f.write(json.dumps({"id": "huge", "text": write_story(random.Random(1), 4900)}) + "\n")
    server.max_model_len = 4000
    s = tension.score(corpus, out=tmp_path / "out", **cfg_for(server, tmp_path, max_model_len=100_000)).summary
    assert s.status == "complete"
    assert not s.failures and s.too_long["huge"] > 0
    ids = {p["id"] for p in read_positions(tmp_path / "out")}
    assert {"story-000", "story-001"} <= ids


@pytest.mark.in_process
def test_cli_score_outputs_exit_status_and_secret(server, tmp_path, tension_run):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=11)
    with corpus.open("a") as f:
        f.write('{"id": "bad", "text": 5}\n')
        f.write(json.dumps({"id": "tiny", "text": "Too short to score. " * 10}) + "\n")
    cfgfile = tmp_path / "run.toml"
    cfgfile.write_text(f'endings = 3\nmodel = "test-gen"\nbase-url = "{server.base_url}"\n')
    r = tension_run("score", str(corpus), "--out", str(tmp_path / "out"), "--config", str(cfgfile), "--endings",
                    str(N), "--cache", str(tmp_path / "cache"), "--no-progress", env={"OPENAI_API_KEY": "sk-secret-123"})
    assert r.returncode == 1, r.stderr  # one bad record
    assert f"{corpus}:3 field `text`: expected a string, got a number" in r.stderr
    assert "2 stories (1 skipped by the word filter)" in r.stdout
    for name in ("positions.jsonl", "stories.csv", "groups.csv", "run.json"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["config"]["endings"] == N  # the flag beat the config file
    assert run["models"] == {"generation": "test-gen", "judge": "test-gen"}
    assert run["stories"]["skipped"][0]["id"] == "tiny"
    # the key never lands in outputs, logs or the cache
    blobs = [r.stdout, r.stderr] + [p.read_bytes().decode("utf-8", "replace") for p in (tmp_path / "out").rglob("*") if p.is_file()]
    blobs += [p.read_bytes().decode("latin-1") for p in (tmp_path / "cache").iterdir()]
    assert not any("sk-secret-123" in b for b in blobs)
    assert run["config"]["api_key"] == "(set)"

    r = tension_run("cache", "stats", "--cache", str(tmp_path / "cache"))
    assert r.returncode == 0
    assert re.search(r"verdicts\s+\d+", r.stdout)
    assert re.search(r"positions\s+[1-9]\d*", r.stdout)  # the judged-position records


def test_cli_sigint_stops_cleanly_with_a_resume_hint(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=12)
    server.delay = 0.01
    exe = str(Path(sys.executable).parent / "tension-run")
    args = [exe, "score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", server.base_url,
            "--model", "test-gen", "--endings", str(N), "--cache", str(tmp_path / "cache"), "--no-progress",
            "--gen-concurrency", "2", "--judge-concurrency", "4", "--no-report"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while server.count(kind="judge") < 40 and time.time() < deadline:
        time.sleep(0.02)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Resume with the same command" in err
    assert json.loads((tmp_path / "out" / "run.json").read_text())["status"] == "interrupted"
    server.delay = 0.0
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "cache hits:" in r.stdout


@pytest.mark.in_process
def test_metrics_recomputes_a_run_from_positions_alone(server, tmp_path):
    from tension.core.cli import main

    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=13)
    assert tension.score(corpus, out=tmp_path / "run", **cfg_for(server, tmp_path)).summary.status == "complete"
    assert main(["metrics", str(tmp_path / "run"), "--out", str(tmp_path / "again")]) == 0
    for name in ("stories.csv", "groups.csv"):
        assert (tmp_path / "again" / name).read_text() == (tmp_path / "run" / name).read_text()


@pytest.mark.in_process
def test_judge_constraints_change_the_request_and_the_key(server, tmp_path):
    from tension.core.prompts.score import verdict_from_logprobs

    assert verdict_from_logprobs({"The": -0.1, "Yes": -1.0, "No": -1.2, "N": -3.0}) == "Y"
    assert verdict_from_logprobs({"The": -0.1, "Y": -2.0, "No": -1.2}) == "N"
    assert verdict_from_logprobs({"The": -0.1}) == "" and verdict_from_logprobs(None) == ""
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=14)
    plain = tension.score(corpus, out=tmp_path / "plain", **cfg_for(server, tmp_path)).summary
    server.reset_records()
    lp = tension.score(corpus, out=tmp_path / "lp",
                       **cfg_for(server, tmp_path, judge_constraint="logprobs", judge_max_tokens=1)).summary
    judge = [r.body for r in server.requests if r.kind == "judge"]
    assert judge and all(b["logprobs"] is True and b["top_logprobs"] == 20 and b["max_tokens"] == 1 for b in judge)
    assert lp.requests["generation"] == 0  # endings came from the cache; only verdicts are new
    # the server's logprobs favour its own verdict, so both judges give the same no-rates
    assert (tmp_path / "lp" / "stories.csv").read_text() == (tmp_path / "plain" / "stories.csv").read_text()
    server.reset_records()
    tension.score(corpus, out=tmp_path / "choice", **cfg_for(server, tmp_path, judge_constraint="choice"))
    judge = [r.body for r in server.requests if r.kind == "judge"]
    assert judge and all(b["structured_outputs"] == {"choice": ["Y", "N"]} for b in judge)
    assert plain.status == "complete"


@pytest.mark.in_process
def test_a_second_run_on_the_same_out_folder_fails_fast(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=15)
    server.delay = 0.01
    cfg = cfg_for(server, tmp_path)

    async def two_runs():
        first = asyncio.ensure_future(tension.score_async(corpus, out=tmp_path / "out", **cfg))
        while server.count() < 5:
            await asyncio.sleep(0.01)
        with pytest.raises(Exception) as e:
            await tension.score_async(corpus, out=tmp_path / "out", **cfg)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        return str(e.value)

    # a second run in the same process is refused as one in another process is, and
    # named as what it is (not "another tension-run (pid N)" with this process's pid)
    msg = asyncio.run(two_runs())
    assert f"--out {tmp_path / 'out'} is in use by another call in this process (a score run" in msg
    server.delay = 0.0
    assert tension.score(corpus, out=tmp_path / "out",
                         **cfg).summary.status == "complete"  # the lock went with the first run


@pytest.mark.in_process
def test_stories_without_positions_are_reported(server, tmp_path, capsys):
    from tension.core.cli import main

    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=16)
    with corpus.open("a") as f:
        f.write(json.dumps({"id": "run-on", "text": " ".join(["and then it rained"] * 150)}) + "\n")
        f.write(json.dumps({"id": "terse", "text": "Go. " * 600}) + "\n")
    rc = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", server.base_url, "--model",
               "test-gen", "--endings", "2", "--cache", str(tmp_path / "cache"), "--no-progress", "--no-report"])
    err = capsys.readouterr().err
    assert rc == 0
    assert "story 'run-on' has no position to score (1 sentence(s): no sentence boundary found)" in err
    assert "story 'terse' has no position to score (no sentence of >= 10 words to anchor a position)" in err
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert set(run["stories_without_positions"]) == {"run-on", "terse"}


def test_ten_percent_faults_of_every_kind_leave_the_outputs_unchanged(server, tmp_path):
    """10% of chat and tokenize requests fail in every way the test server knows;
    the seeded run's outputs equal a clean run's, and retries stay in bounds."""
    from tension.testing.openai_server import FAULT_KINDS

    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=17)
    clean = tension.score(corpus, out=tmp_path / "clean",
                          **cfg_for(server, tmp_path, cache=str(tmp_path / "clean-cache"))).summary
    # A slow answer must outlast the timeout, and a normal one must never reach it,
    # even on a loaded 2-core machine (else load-made retries exceed the faults).
    server.slow_seconds = 6.0
    rates = {k: 0.10 / len(FAULT_KINDS) for k in FAULT_KINDS}
    server.set_fault_rates(rates, seed=3, path=None)
    server.reset_records()
    s = tension.score(corpus, out=tmp_path / "out", **cfg_for(server, tmp_path, timeout=3.0, retries=8)).summary
    server.clear_faults()
    assert s.status == "complete", s.error
    faults = [r.fault for r in server.requests if r.fault]
    assert set(faults) >= {"500", "503", "429", "drop", "truncate", "nonjson", "few_choices", "empty_content"}
    assert 0.05 < len(faults) / len(server.requests) < 0.15
    for name in ("positions.jsonl", "stories.csv", "groups.csv"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes(), name
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert 0 < run["http"]["retries"] <= len(faults)
    assert clean.status == "complete"


def test_full_cache_is_a_clear_error_and_stays_readable(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=18)
    s = tension.score(corpus, out=tmp_path / "out", **cfg_for(server, tmp_path, cache_max_gb=0.0003)).summary  # 300 kB
    assert s.status == "failed"
    assert f"the cache at {tmp_path / 'cache'} is full: it reached its limit of 300,000 bytes" in s.error
    from tension.cache import records

    with Store(tmp_path / "cache", readonly=True) as st:
        stats = st.stats()
        assert stats["verdicts"]["entries"] > 0
        with st.env.begin(db=st._dbs["endings"]) as txn:
            assert all(len(records.decode(v).texts) == N for _, v in txn.cursor())
    # with room again, the same command finishes from where it stopped
    done = tension.score(corpus, out=tmp_path / "out", **cfg_for(server, tmp_path)).summary
    assert done.status == "complete" and done.cache_hits["verdicts"] >= stats["verdicts"]["entries"]


def test_module_exports():
    import importlib

    for name in ("", ".positions", ".requests", ".judge", ".feed", ".outputs"):
        mod = importlib.import_module("tension.core.pipelines.score" + name)
        assert mod.__all__ and all(hasattr(mod, n) for n in mod.__all__), name
    from tension.core.pipelines.score import Failure, Position, PositionResult, RunSummary  # noqa: F401 - the public names
