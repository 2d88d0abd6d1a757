"""Where a fallback keeps the meaning, a refused constraint falls back and says so
(issue 61 M2; core/pipelines/unconstrained.py): transformers serve answers 422
"Unexpected fields in the request: {'structured_outputs'}" to vLLM's constraint, so
`--judge-constraint choice` and `--reader-constraint json` stopped the run (exit 2,
test_fields_refused.py). The paper's judge and readers answered freely and were
parsed (000 App. C.5: the first character Y; 003: the JSON dictionary), which is
what the tool does for unconstrained answers: so the run goes on unconstrained, says
so once, records the constraint used, keys the answers as the unconstrained
requests' (a run with the constraint `none` reads them), and a later run on the same
server sends no refused request again (the server taught it: core/run/taught.py).
Where no fallback keeps the meaning (log-probabilities dropped, `min_p` refused) the
run, bench included, is refused naming the flag. The real CLI against the test server.
"""

from __future__ import annotations

import json
import re

from fairplay_scripted import SUSPECTS, scripted, story_record, write_jsonl  # tests/

from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer
from tension.testing.openai_server import CHAT_PATH, LoopbackServer

REFUSED = ("structured_outputs",)


def _constrained(srv: LoopbackServer) -> list[int]:
    """The statuses of the chat requests that carried vLLM's constraint."""
    return [r.status for r in srv.requests if r.path == CHAT_PATH and r.body and "structured_outputs" in r.body]


def test_a_refused_judge_choice_falls_back_to_the_papers_judge_and_a_rerun_sends_nothing(tension_run, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    cache = str(tmp_path / "cache")
    with LoopbackServer(model="test-gen", refuse_fields=REFUSED) as srv:
        def score(out: str, *flags: str):
            return tension_run("score", str(corpus), "--out", str(tmp_path / out), "--base-url", srv.base_url,
                               "--model", "test-gen", "--endings", "3", "--seed", "1", "--cache", cache,
                               "--no-progress", *flags)

        r = score("choice", "--judge-constraint", "choice")
        assert r.returncode == 0, r.stderr
        said = [line for line in r.stderr.splitlines() if "falls back to --judge-constraint none" in line]
        assert len(said) == 1, r.stderr  # said once, not once per position
        assert "structured_outputs" in said[0] and "first character" in said[0]
        refused = _constrained(srv)
        assert refused and set(refused) == {422}  # none answered: every verdict is an unconstrained one
        run = json.loads((tmp_path / "choice" / "run.json").read_text())
        assert run["judge_constraint_used"] == "none" and run["config"]["judge_constraint"] == "choice"
        assert any(s.get("refuses") == ["structured_outputs"] for s in run["servers"])
        sent = srv.count(path=CHAT_PATH)

        # the verdicts are the unconstrained requests': the paper's judge reads them all
        r = score("none", "--judge-constraint", "none")
        assert r.returncode == 0, r.stderr
        assert srv.count(path=CHAT_PATH) == sent
        assert ((tmp_path / "none" / "positions.jsonl").read_bytes()
                == (tmp_path / "choice" / "positions.jsonl").read_bytes())

        # the same command again: the server taught the run it refuses the field, so nothing is sent
        r = score("again", "--judge-constraint", "choice")
        assert r.returncode == 0, r.stderr
        assert srv.count(path=CHAT_PATH) == sent and len(_constrained(srv)) == len(refused)
        assert "falls back to --judge-constraint none" in r.stderr
        assert json.loads((tmp_path / "again" / "run.json").read_text())["judge_constraint_used"] == "none"

        # and estimate counts what that run would send: nothing, the verdicts being the unconstrained ones
        r = tension_run("estimate", str(corpus), "--base-url", srv.base_url, "--model", "test-gen", "--endings", "3",
                        "--seed", "1", "--cache", cache, "--no-progress", "--judge-constraint", "choice",
                        "--json", str(tmp_path / "e.json"))
        assert r.returncode == 0, r.stderr
        est = json.loads((tmp_path / "e.json").read_text())
        assert est["judge_requests"] > 0 and est["judge_to_send"] == 0 and est["generation_to_send"] == 0
        assert "falls back to --judge-constraint none" in r.stderr


def test_a_judge_choice_the_server_takes_is_used_and_recorded(tension_run, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    with LoopbackServer(model="test-gen") as srv:
        r = tension_run("score", str(corpus), "--out", str(tmp_path / "o"), "--base-url", srv.base_url,
                        "--model", "test-gen", "--endings", "3", "--cache", str(tmp_path / "cache"), "--no-progress",
                        "--judge-constraint", "choice")
        assert r.returncode == 0, r.stderr
        assert "falls back" not in r.stderr and _constrained(srv) and set(_constrained(srv)) == {200}
    assert json.loads((tmp_path / "o" / "run.json").read_text())["judge_constraint_used"] == "choice"


def test_a_refused_reader_json_falls_back_to_the_papers_free_answers(tension_run, tmp_path):
    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record("s1", generator=False)])
    cache = str(tmp_path / "cache")
    with LoopbackServer(model="test-judge", refuse_fields=REFUSED) as srv:
        srv.respond(scripted)

        def fairplay(out: str, *flags: str):
            return tension_run("fairplay", str(stories), "--out", str(tmp_path / out), "--base-url", srv.base_url,
                               "--model", "test-judge", "--readers", "gullible", "--schedule", "1,3",
                               "--cache", cache, "--no-progress", *flags)

        r = fairplay("json", "--reader-constraint", "json")
        assert r.returncode == 0, r.stderr
        said = [line for line in r.stderr.splitlines() if "falls back to --reader-constraint none" in line]
        assert len(said) == 1, r.stderr
        refused = _constrained(srv)
        assert refused and set(refused) == {422}
        values = json.loads((tmp_path / "json" / "readers.jsonl").read_text().splitlines()[0])
        assert values["suspects"] == SUSPECTS and values["failures"] == []
        assert values["readers"]["gullible"][0] is not None and values["readers"]["gullible"][2] is not None
        record = json.loads((tmp_path / "json" / "fairplay_run.json").read_text())
        assert record["reader_constraint_used"] == "none"
        sent = srv.count(path=CHAT_PATH)

        r = fairplay("none", "--reader-constraint", "none")  # the paper's readers read the same answers
        assert r.returncode == 0, r.stderr
        assert srv.count(path=CHAT_PATH) == sent
        assert ((tmp_path / "none" / "readers.jsonl").read_bytes()
                == (tmp_path / "json" / "readers.jsonl").read_bytes())

        r = fairplay("again", "--reader-constraint", "json")  # taught: nothing refused is sent again
        assert r.returncode == 0, r.stderr
        assert srv.count(path=CHAT_PATH) == sent and "falls back to --reader-constraint none" in r.stderr


def test_bench_falls_back_as_score_does_on_a_refused_judge_choice(tension_run, tmp_path):
    """bench measures the requests score would send: score's unconstrained judge."""
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    for stream in ([], ["--no-stream"]):
        with LoopbackServer(model="test-gen", refuse_fields=REFUSED) as srv:
            r = tension_run("bench", "--corpus", str(corpus), "--base-url", srv.base_url, "--model", "test-gen",
                            "--endings", "3", "--positions", "2", "--no-variants", "--no-progress",
                            "--cache", str(tmp_path / "cache"), "--judge-constraint", "choice", *stream)
            assert r.returncode == 0, r.stdout + r.stderr
            assert "falls back to --judge-constraint none" in r.stderr
            assert re.search(r"failed requests +0\n", r.stdout), r.stdout
            judged = [x for x in srv.requests if x.path == CHAT_PATH and x.kind == "judge" and x.status == 200]
            assert judged and not any("structured_outputs" in x.body for x in judged)


def test_bench_refuses_log_probabilities_the_server_drops_streamed_or_not(tension_run, tmp_path):
    """No fallback keeps the meaning of --judge-constraint logprobs: bench says so as
    score does, with the flag that leaves them out, streamed too (it read no
    log-probabilities from a stream and gave figures at exit 0)."""
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    for stream in ([], ["--no-stream"]):
        with LoopbackServer(model="test-gen", drop_logprobs=True) as srv:
            argv = ["bench", "--corpus", str(corpus), "--base-url", srv.base_url, "--model", "test-gen",
                    "--endings", "3", "--positions", "2", "--no-variants", "--no-progress",
                    "--cache", str(tmp_path / "cache"), "--judge-max-tokens", "1", *stream]
            r = tension_run(*argv, "--judge-constraint", "logprobs")
            assert r.returncode != 0, r.stdout
            assert "returned no log-probabilities" in r.stdout + r.stderr
            assert "use --judge-constraint none" in r.stdout + r.stderr
            again = tension_run(*argv, "--judge-constraint", "none")  # the advice, as printed
            assert again.returncode == 0, again.stdout + again.stderr


def test_the_early_stop_after_a_fallback_does_not_advise_the_refused_constraint(tension_run, tmp_path):
    """A judge that answers neither Y nor N once its constraint fell back: the stop says
    the server refuses the constraint, not "try --judge-constraint choice" (refused)
    nor that the constraint "went as structured_outputs" (it did not)."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    with InProcessServer(["test-gen"], misbehave="random", refuse_fields=REFUSED).serving() as srv:
        r = tension_run("score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", srv.base_url,
                        "--model", "test-gen", "--endings", "4", "--cache", str(tmp_path / "cache"), "--no-progress",
                        "--judge-constraint", "choice")
    assert r.returncode == 1, r.stderr
    assert "falls back to --judge-constraint none" in r.stderr
    stop = next(line for line in r.stderr.splitlines() if line.startswith("error: the judge is not answering"))
    assert "--judge-constraint choice" not in stop.replace("refuses --judge-constraint choice", "")
    assert "went as vLLM's structured_outputs" not in stop
    assert "refuses --judge-constraint choice" in stop and "--judge-constraint logprobs" in stop
