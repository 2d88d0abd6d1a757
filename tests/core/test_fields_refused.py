"""What a server refuses or drops of a request (issue 61 M2, M3; core/llm/refusals.py):
transformers serve answers 422 "Unexpected fields in the request: {...}" to every
field outside OpenAI's (generate's `min_p`, the judge's `structured_outputs`), and
both it and FastChat drop `logprobs`, so `--judge-constraint logprobs` read every
verdict as empty and gave no-rate 1.0 at exit 0. Where no fallback keeps the
meaning, each now stops the run at once (exit 2: the settings must change) naming
the field and the flag that leaves it out; the advice, run as printed, completes;
run.json `servers` records it. (A refused `structured_outputs` falls back to the
paper's unconstrained judge and readers instead: test_fields_fallback.py.)
The real CLI against the test server taught each behaviour.
"""

from __future__ import annotations

import json
import re
import shlex

from tension.testing.corpus import make_corpus
from tension.testing.ideas import IDEAS, script_pipeline, write_ideas
from tension.testing.openai_server import CHAT_PATH, LoopbackServer


def _advice(stderr: str) -> list[str]:
    """The flag the error says leaves the field out, as argv (its first one)."""
    m = re.search(r": (--[\w-]+(?: [\w.]+)?) (?:\(score\) or [^;]*)?(?:\(or \w+\) )?leaves it out", stderr)
    assert m is not None, stderr
    return shlex.split(m.group(1))


def test_generate_on_a_server_refusing_min_p_says_the_flag_and_it_works(tension_run, tmp_path):
    ideas = write_ideas(tmp_path / "ideas.jsonl", IDEAS[:2])
    argv = ["generate", str(ideas), "--out", str(tmp_path / "stories.jsonl"), "--base-url", "{url}",
            "--model", "test-gen", "--cache", str(tmp_path / "cache"), "--no-progress"]
    with LoopbackServer(model="test-gen", refuse_fields=("min_p",)) as srv:
        script_pipeline(srv)
        args = [a.replace("{url}", srv.base_url) for a in argv]
        r = tension_run(*args)
        assert r.returncode == 2, r.stderr
        assert "does not take the field min_p" in r.stderr and "--min-p 0 leaves it out" in r.stderr
        refused = srv.count(path=CHAT_PATH)
        assert refused <= 2  # each idea's first request at most (both may be in flight): none retried
        assert r.stderr.count("does not take the field") == 1  # said once, not one idea after another
        again = tension_run(*args, *_advice(r.stderr))
    assert again.returncode == 0, again.stderr


def test_a_seed_probe_meeting_the_refusal_stops_the_run_as_its_request_would(tension_run, tmp_path):
    """generate's seeded request on a server of no known kind is preceded by the seed probe
    (core/llm/seed_probe.py), which carries the same min_p: its 422 stops the run with the
    refusal and its advice, and the request it stands for is not sent to be refused again."""
    ideas = write_ideas(tmp_path / "ideas.jsonl", IDEAS[:1])
    with LoopbackServer(model="test-gen", refuse_fields=("min_p",)) as srv:
        r = tension_run("generate", str(ideas), "--out", str(tmp_path / "stories.jsonl"), "--base-url",
                        srv.base_url, "--model", "test-gen", "--cache", str(tmp_path / "cache"), "--no-progress")
        sent, probes = srv.count(path=CHAT_PATH), srv.count(path=CHAT_PATH, probes=True)
    assert r.returncode == 2 and "--min-p 0 leaves it out" in r.stderr, r.stderr
    assert (sent, probes) == (0, 1)


def test_log_probabilities_the_server_drops_are_refused_not_read_as_empty(tension_run, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    out = tmp_path / "out"
    with LoopbackServer(model="test-gen", drop_logprobs=True) as srv:
        argv = ["score", str(corpus), "--out", str(out), "--base-url", srv.base_url, "--model", "test-gen",
                "--endings", "3", "--seed", "1", "--cache", str(tmp_path / "cache"), "--no-progress",
                "--judge-max-tokens", "1", "--judge-constraint", "logprobs"]
        r = tension_run(*argv)
        assert r.returncode == 2, r.stderr  # never a no-rate of 1.0 at exit 0
        assert "returned no log-probabilities" in r.stderr and "--judge-constraint none" in r.stderr
        assert not (out / "positions.jsonl").exists()
        run = json.loads((out / "run.json").read_text())
        assert any(s.get("drops") == ["logprobs"] for s in run["servers"])
        again = tension_run(*argv[:-2], "--judge-constraint", "none")
    assert again.returncode == 0, again.stderr


def test_a_422_that_names_no_field_sent_is_the_requests_own(tension_run, tmp_path):
    """A server refusing a field the run does not send is not told as refusing it:
    the refusal is matched to the fields the request sent."""
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    with LoopbackServer(model="test-gen", refuse_fields=("min_p",)) as srv:  # score sends no min_p
        r = tension_run("score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", srv.base_url,
                        "--model", "test-gen", "--endings", "3", "--cache", str(tmp_path / "cache"), "--no-progress")
    assert r.returncode == 0, r.stderr
