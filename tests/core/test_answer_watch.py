"""Degenerate answers (issue 20; docs/reliability.md, "Degenerate answers"): the run
says when the models are not doing the task. Every case runs the real CLI against
the test server scripted to misbehave, in this process (`tension_run`: what a run
says and records is the subject, not the process), through the server's in-process
door (the same answers and misbehaviours, no socket: the answers are the subject,
not the wire)."""

from __future__ import annotations

import contextlib
import json
import random
import re
from collections.abc import Iterator

import pytest

from tension.testing.corpus import make_corpus, write_story
from tension.testing.inprocess import InProcessServer

ENDINGS = "4"  # 2 stories x 4 endings: about 260 verdicts, past the early stop's 200


@pytest.fixture
def score(tension_run, tmp_path):
    """`score(server, *flags, env=None)`: a run of 2 stories of 4 endings; its status and
    output, its folder and its run record."""
    def run(srv: InProcessServer, *flags: str, env: dict[str, str | None] | None = None):
        corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
        out = tmp_path / "out"
        r = tension_run("score", str(corpus), "--out", str(out), "--base-url", srv.base_url, "--model", "test-gen",
                        "--endings", ENDINGS, "--cache", str(tmp_path / "cache"), "--no-progress", *flags, env=env)
        return r, out, json.loads((out / "run.json").read_text())

    return run


def _checks(run: dict) -> list[str]:
    return [w["check"] for w in run["warnings"]]


@contextlib.contextmanager
def _server(misbehave: str | None = None) -> Iterator[InProcessServer]:
    with InProcessServer(["test-gen"], misbehave=misbehave).serving() as srv:
        yield srv


def test_an_all_malformed_judge_stops_the_run_early_with_what_to_do(tmp_path, score):
    with _server("random") as srv:
        r, out, run = score(srv)
    assert r.returncode == 1, r.stderr
    err = r.stderr
    assert "error: the judge is not answering Y or N: 200 of the first 200 verdicts (100%) are neither" in err
    assert "Judge model 'test-gen' at " + srv.base_url in err  # the model and the server
    assert re.search(r"Sample answers: '\w+ [\w ]+\.'", err)  # raw answers, quoted
    for cause in ("reasoning not switched off", "chat template that is wrong", "not an instruction model"):
        assert cause in err
    assert "--keep-going" in err
    assert "rerun the same command to continue" not in err  # it would stop again
    # Stopped at the 200th verdict (50 positions of 4 endings; the run has 66), no confident outputs.
    assert run["positions"] < 50
    assert not (out / "stories.csv").exists() and not (out / "positions.jsonl").exists()
    assert run["status"] == "failed" and run["error"].startswith("the judge is not answering Y or N")
    assert _checks(run) == ["judge_malformed"]


def test_keep_going_scores_on_and_warns_everywhere(tmp_path, score):
    with _server("random") as srv:
        r, out, run = score(srv, "--keep-going")
    assert r.returncode == 0, r.stderr
    assert run["status"] == "complete" and _checks(run) == ["judge_malformed"]
    w = run["warnings"][0]
    assert w["count"] == w["total"] > 200
    line = f"warning: {w['total']} of {w['total']} (100%) judge answers were neither Y nor N"
    assert line in r.stderr
    assert "each counts as no match, so the no-rates are raised by up to 1.00" in r.stderr  # what it means
    report = (out / "report.md").read_text()
    assert "## Warnings: the models did not do the task as asked" in report
    assert report.index("## Warnings") < report.index("## Results")  # read before the numbers
    assert f"{w['total']} of {w['total']} (100%) judge answers" in report


def test_think_prefixed_answers_name_reasoning_as_the_likely_cause(tmp_path, score):
    with _server("think") as srv:
        r, _, run = score(srv)
    assert r.returncode == 1
    assert "200 open with a reasoning trace" in r.stderr
    assert "Sample answers: '<think>\\nOkay, the user wants me to decide whether this'" in r.stderr
    assert "200 of these answers open with <think>, so this is the likely one" in r.stderr
    # The endings are reasoning traces too, cut at max_tokens, and all the same.
    assert _checks(run) == ["judge_malformed", "endings_cut", "endings_reasoning", "endings_identical"]


def test_a_judge_that_always_says_yes_is_warned_about(tmp_path, score):
    with _server("always_y") as srv:
        r, out, run = score(srv)
    assert r.returncode == 0, r.stderr
    assert _checks(run) == ["judge_one_letter"]
    assert re.search(r"warning: the judge answered Y to (\d+) of \1 \(100%\) endings — every no-rate is near 0 "
                     r"whatever the story", r.stderr)
    assert "the judge answered Y to" in (out / "report.md").read_text()


def test_a_judge_that_says_yes_to_every_ending_of_one_story_is_named(tmp_path, score):
    with _server() as srv:
        # The judge says Y to everything about story-001 only (its text is in the prompt).
        story = json.loads(make_corpus(tmp_path / "probe.jsonl", 2, seed=3).read_text().splitlines()[1])
        probe = story["text"].split(".")[-3].strip()
        srv.respond(lambda msgs, n, seed: "Y" if "literary judge" in msgs[0]["content"] and any(
            probe in m["content"] for m in msgs) else None)
        r, _, run = score(srv)
    assert r.returncode == 0, r.stderr
    assert _checks(run) == ["judge_one_letter_story"]
    assert "every ending of 1 of 2 stories (story-001)" in r.stderr


def test_identical_endings_are_warned_about(tmp_path, score):
    """With --keep-going past the first position's stop (issue 61 H1,
    tests/core/test_greedy_server.py), the end of the run says so."""
    with _server("identical") as srv:
        r, _, run = score(srv, "--keep-going")
    assert r.returncode == 0, r.stderr
    assert _checks(run) == ["endings_identical"]
    assert "positions had all their endings identical — the server did not honour the temperature or seed" \
        in r.stderr


def test_a_healthy_run_has_no_warning(tmp_path, score):
    with _server() as srv:
        r, out, run = score(srv)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr
    assert run["warnings"] == []
    assert "## Warnings" not in (out / "report.md").read_text()


def test_the_early_stop_quotes_no_secret(tmp_path, score):
    key = "sk-planted-secret-4242"
    with _server() as srv:
        srv.respond(lambda msgs, n, seed: f"Authorization: Bearer {key}" if "literary judge" in msgs[0]["content"]
                    else None)
        r, out, run = score(srv, env={"OPENAI_API_KEY": key})
    assert r.returncode == 1 and "[redacted]" in r.stderr
    for text in (r.stdout, r.stderr, (out / "run.json").read_text()):
        assert key not in text


def test_thresholds_are_settings(tmp_path, score, tension_run):
    with _server("random") as srv:
        # A later decision: the early stop waits for 10,000 verdicts, so this run completes.
        r, _, run = score(srv, "--stop-after", "10000")
    assert r.returncode == 0 and _checks(run) == ["judge_malformed"]
    bad = tension_run("score", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "o2"), "--base-url", "http://127.0.0.1:9",
               "--warn-cut-share", "1.5")
    assert bad.returncode == 2 and "warn-cut-share: expected a share in [0, 1], got 1.5" in bad.stderr


# -- generate and fair play ----------------------------------------------------------


def test_generate_warns_when_stories_are_mostly_the_prompt(tmp_path, tension_run):
    out = tmp_path / "s.jsonl"
    with _server("echo") as srv:
        r = tension_run("generate", "examples/ideas.jsonl", "--out", str(out), "--mode", "vanilla", "--base-url",
                 srv.base_url, "--cache", str(tmp_path / "cache"), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "warning: 5 of 5 answers were mostly their prompt" in r.stderr
    record = json.loads((tmp_path / "s.run.json").read_text())
    assert [w["check"] for w in record["warnings"]] == ["generate_prompt"]


def test_generate_healthy_has_no_warning(tmp_path, tension_run):
    out = tmp_path / "s.jsonl"
    with _server() as srv:
        srv.script("Write the story now.", lambda msgs, seed, i: write_story(random.Random(seed), 400))
        r = tension_run("generate", "examples/ideas.jsonl", "--out", str(out), "--mode", "vanilla", "--base-url",
                 srv.base_url, "--cache", str(tmp_path / "cache"), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr
    assert json.loads((tmp_path / "s.run.json").read_text())["warnings"] == []


def _example_copier(msgs, n, seed):
    """A reader like the 135M model: the example of its prompt, whatever the story."""
    text = msgs[-1]["content"]
    if "likelihood estimates" not in text:
        return None
    example = json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))
    return json.dumps({"probabilities": example["probabilities"]})


def _reader(msgs, n, seed):
    """A reader that reads: its distribution moves with the story so far."""
    text = msgs[-1]["content"]
    if "likelihood estimates" not in text:
        return None
    k = len(json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))["probabilities"])
    first = (len(text) % 7 + 1) / 10
    return json.dumps({"probabilities": [first] + [(1 - first) / (k - 1)] * (k - 1)})


@pytest.fixture
def whodunits(tmp_path, tension_run):
    path = tmp_path / "w.jsonl"
    with _server() as srv:
        r = tension_run("generate", "examples/whodunit_ideas.jsonl", "--out", str(path), "--mode", "whodunit",
                 "--paragraphs", "8", "--base-url", srv.base_url, "--cache", str(tmp_path / "cache"),
                 "--no-progress")
    assert r.returncode == 0, r.stderr
    return path


@pytest.mark.parametrize("misbehave", ["example", "echo", None])
def test_fairplay_readers_that_do_not_read_are_warned_about(tmp_path, tension_run, whodunits, misbehave):
    with _server(misbehave if misbehave == "echo" else None) as srv:
        if misbehave != "echo":  # scripted answers come before the server's misbehaviour
            srv.respond(_example_copier if misbehave == "example" else _reader)
        r = tension_run("fairplay", str(whodunits), "--out", str(tmp_path / "fp"), "--readers", "gullible",
                 "--base-url", srv.base_url, "--cache", str(tmp_path / "cache"), "--no-progress")
    record = json.loads((tmp_path / "fp" / "fairplay_run.json").read_text())
    checks = [w["check"] for w in record["warnings"]]
    if misbehave == "example":
        assert checks == ["reader_constant"]
        assert re.search(r"warning: the gullible reader gave the example distribution in its prompt "
                         r"\([\d., ]+\) to every one of its 16 values — it did not read the stories", r.stderr)
    elif misbehave == "echo":
        assert checks == ["reader_unparsed"]
        assert "reader answers could not be read" in r.stderr
    else:
        assert checks == [] and "warning" not in r.stderr
