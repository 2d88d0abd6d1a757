"""`generate` end to end against the loopback server: the paper's prompts and
parameters, how the steps chain, the ablations, short-story regeneration, whodunits
in the fairplay format, the cache, and bad ideas."""

from __future__ import annotations

import json
import random
import re
import string
from pathlib import Path

import pytest

import tension
from tension.core.cli import main
from tension.core.pipelines.fairplay import load_fairplay_config, read_stories
from tension.core.pipelines.generate import run_record_path
from tension.core.prompts.fill import render_whodunit
from tension.testing.ideas import IDEAS, LONG, script_pipeline, write_ideas
from tension.testing.openai_server import CHAT_PATH

# The paper's prompts (000, App. D.4), typed here from the paper, not from core/.
EXTRACT = ("extract 7 scene-level beats. For each beat describe: (1) the concrete action, (2) the specific "
           "narrative technique used, and (3) identify what made it memorable. What narrative trick, thematic "
           "resonance, or structural choice made each story work?")
PAPER_POOL = ["The Ones Who Walk Away from Omelas \u2014 Ursula K. Le Guin", "The Lottery \u2014 Shirley Jackson",
              "The Yellow Wallpaper \u2014 Charlotte Perkins Gilman"]


def warmup_prompt(title: str) -> str:
    return f'Using "{title}" as your reference, {EXTRACT}'


def adapt_prompt(warmup: str, idea: str, n: int | None = None) -> str:
    tail = f"\n\nLimit to exactly {n} beats." if n else ""
    return ("Here is a structural beat sheet extracted from a reference story:\n\n\u2014\n" + warmup
            + "\n\u2014\n\nUsing the above as a template, create an adapted to-do list of the most important "
            "structural beats needed to tell THIS story:\n\n" + idea + tail)


def write_prompt(beats: str) -> str:
    return ("Here is a structural to-do list for a short story:\n\n\u2014\n" + beats + "\n\u2014\n\n"
            "Write the story now. Follow the structural beats closely. Write only the story \u2014 no commentary.")


def cfg_for(srv, tmp_path, **kw) -> dict:
    """The API's keywords: tension.generate(ideas, out=…, **cfg_for(…))."""
    base = {"base_url": srv.base_url, "model": "test-gen", "cache": str(tmp_path / "cache"), "progress": False}
    base.update(kw)
    return base


def chats(srv) -> list[dict]:
    return [r.body for r in srv.requests if r.path == CHAT_PATH and r.status == 200]


def read_out(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.in_process
def test_full_pipeline_sends_the_papers_prompts_and_chains_the_steps(server, tmp_path):
    script_pipeline(server)
    out = tmp_path / "full.jsonl"
    s = tension.generate(write_ideas(tmp_path / "ideas.jsonl"), out=out,
                         **cfg_for(server, tmp_path, mode="full")).summary
    assert s.status == "complete" and s.stories == 3 and s.requests["generation"] == 9 and not s.failures
    bodies = chats(server)
    assert len(bodies) == 9
    for b in bodies:  # App. D.2: T 0.7, 4,000 tokens, min_p 0.1, reasoning off; one answer each
        assert (b["temperature"], b["max_tokens"], b["min_p"], b["n"]) == (0.7, 4000, 0.1, 1)
        assert b["chat_template_kwargs"] == {"enable_thinking": False} and b["model"] == "test-gen"
        assert [m["role"] for m in b["messages"]] == ["user"]
    sent = {b["messages"][0]["content"] for b in bodies}
    recs = read_out(out)
    assert [r["idea_id"] for r in recs] == ["lamp", "bees", "choir"]  # idea order, whatever finished first
    for rec, idea in zip(recs, IDEAS):
        ref = rec["reference"]
        assert ref["kind"] == "title" and ref["name"] in PAPER_POOL
        assert warmup_prompt(ref["name"]) in sent
        assert rec["warmup"].startswith("WARMUP[")
        assert adapt_prompt(rec["warmup"], idea["idea"]) in sent  # Step 1 got Step 0's answer
        assert rec["beats"].startswith("BEATS[") and idea["idea"][:30] in rec["beats"]
        assert write_prompt(rec["beats"]) in sent  # Step 2 got Step 1's answer
        assert rec["text"] == (f"STORY[{rec['settings']['seed']}] " + LONG).strip()
        assert rec["id"] == f"{idea['id']}-full" and rec["group"] == "full" and rec["mode"] == "full"
        assert rec["idea"] == idea["idea"] and rec["model"] == "test-gen"
        assert rec["idea_group"] == idea.get("group")
        assert rec["attempts"] == 1 and rec["short_attempts"] == []
        assert rec["settings"]["temperature"] == 0.7 and rec["settings"]["min_p"] == 0.1
    run = json.loads(run_record_path(out).read_text())
    assert run["status"] == "complete" and run["requests"] == {"generation": 9} and run["sampling"]["max_tokens"] == 4000
    assert not (tmp_path / "full.jsonl.partial").read_text() == ""  # streamed as stories finished


@pytest.mark.in_process
def test_ablations_skip_the_right_steps(server, tmp_path):
    script_pipeline(server)
    ideas = write_ideas(tmp_path / "ideas.jsonl", IDEAS[:2])
    s = tension.generate(ideas, out=tmp_path / "v.jsonl", **cfg_for(server, tmp_path, mode="vanilla")).summary
    assert s.requests["generation"] == 2
    for b, idea in zip(sorted(chats(server), key=lambda b: b["messages"][0]["content"]),
                       sorted(IDEAS[:2], key=lambda i: i["idea"])):
        content = b["messages"][0]["content"]
        assert idea["idea"] in content and "Write the story now." in content
        assert "beat" not in content.lower()  # no Step 0, no Step 1
    for r in read_out(tmp_path / "v.jsonl"):
        assert r["warmup"] is None and r["beats"] is None and r["reference"] is None and r["mode"] == "vanilla"

    server.reset_records()
    s = tension.generate(ideas, out=tmp_path / "b.jsonl", **cfg_for(server, tmp_path, mode="beats", beats=5)).summary
    bodies = chats(server)
    assert s.requests["generation"] == 4 and len(bodies) == 4
    step1 = [b["messages"][0]["content"] for b in bodies if "to-do list of the most important" in
             b["messages"][0]["content"]]
    assert len(step1) == 2
    for c in step1:  # from scratch: no reference beat sheet; the constraint ends the prompt
        assert "beat sheet extracted" not in c and c.endswith(".\n\nLimit to exactly 5 beats.")
    assert not any(EXTRACT in b["messages"][0]["content"] for b in bodies)
    for r in read_out(tmp_path / "b.jsonl"):
        assert r["warmup"] is None and r["beats"].startswith("BEATS[") and r["settings"]["beats"] == 5


@pytest.mark.in_process
def test_step0_full_text_mode_and_a_title_file(server, tmp_path):
    script_pipeline(server)
    ref = tmp_path / "harbour.txt"
    ref.write_text("A short reference story of ours, {with braces}.\n", encoding="utf-8")
    ideas = write_ideas(tmp_path / "ideas.jsonl", IDEAS[:1])
    tension.generate(ideas, out=tmp_path / "t.jsonl", **cfg_for(server, tmp_path, reference_stories=[str(ref)]))
    first = chats(server)[0]["messages"][0]["content"]
    assert first == ("Here is a short story:\n\n\u2014\nA short reference story of ours, {with braces}.\n\u2014\n\n"
                     f"Using this story as your reference, {EXTRACT}")
    rec = read_out(tmp_path / "t.jsonl")[0]
    assert rec["reference"]["kind"] == "text" and rec["reference"]["name"] == "harbour"
    assert len(rec["reference"]["sha256"]) == 64

    titles = tmp_path / "titles.txt"
    titles.write_text("# my pool\nThe Tin Kettle \u2014 A. Nobody\n\n", encoding="utf-8")
    server.reset_records()
    tension.generate(ideas, out=tmp_path / "u.jsonl", **cfg_for(server, tmp_path, titles=str(titles)))
    assert chats(server)[0]["messages"][0]["content"] == warmup_prompt("The Tin Kettle \u2014 A. Nobody")


@pytest.mark.in_process
def test_reference_is_drawn_per_story_reproducibly(server, tmp_path):
    script_pipeline(server)
    many = [{"id": f"i{k}", "idea": f"Idea number {k} about a clock."} for k in range(12)]
    ideas = write_ideas(tmp_path / "ideas.jsonl", many)
    tension.generate(ideas, out=tmp_path / "a.jsonl", **cfg_for(server, tmp_path, titles="recommended"))
    refs = [r["reference"]["name"] for r in read_out(tmp_path / "a.jsonl")]
    assert len(set(refs)) > 3  # drawn per story from the 20
    tension.generate(ideas, out=tmp_path / "b.jsonl",
                     **cfg_for(server, tmp_path, titles="recommended", cache=str(tmp_path / "other")))
    assert [r["reference"]["name"] for r in read_out(tmp_path / "b.jsonl")] == refs  # same seed, same draws
    tension.generate(ideas, out=tmp_path / "c.jsonl", **cfg_for(server, tmp_path, titles="recommended", seed=1))
    assert [r["reference"]["name"] for r in read_out(tmp_path / "c.jsonl")] != refs


@pytest.mark.in_process
def test_short_stories_are_regenerated_with_new_seeds_up_to_the_bound(server, tmp_path):
    seeds: dict[str, list[int]] = {"lamp": [], "bees": []}

    def story(m, seed, i):
        content = m[-1]["content"]
        key = "lamp" if "lighthouse" in content else "bees"
        seeds[key].append(seed)
        if key == "lamp" and len(seeds[key]) >= 3:
            return LONG  # the third attempt is long enough
        return "Too short."

    server.script("Write the story now.", story)
    ideas = write_ideas(tmp_path / "ideas.jsonl", IDEAS[:2])
    out = tmp_path / "s.jsonl"
    code = main(["generate", str(ideas), "--out", str(out), "--mode", "vanilla", "--attempts", "4",
                 "--base-url", server.base_url, "--model", "test-gen", "--cache", str(tmp_path / "cache"),
                 "--no-progress"])
    assert code == 1  # one idea failed
    assert len(seeds["lamp"]) == 3 and len(seeds["bees"]) == 4  # the bound, exactly
    for s in seeds.values():
        assert s == list(range(s[0], s[0] + len(s)))  # each retry: the next seed, so a new cache key
    recs = read_out(out)
    assert [r["idea_id"] for r in recs] == ["lamp"]
    assert recs[0]["attempts"] == 3 and recs[0]["short_attempts"] == [10, 10] and recs[0]["text"] == LONG.strip()
    run = json.loads(run_record_path(out).read_text())
    assert run["failures"][0]["id"] == "bees" and "4 attempt(s)" in run["failures"][0]["error"]


@pytest.mark.in_process
def test_rerun_is_served_from_the_cache_and_a_failed_run_resumes(server, tmp_path):
    script_pipeline(server)
    ideas = write_ideas(tmp_path / "ideas.jsonl")
    first = tmp_path / "one.jsonl"
    tension.generate(write_ideas(tmp_path / "two.jsonl", IDEAS[:2]), out=first, **cfg_for(server, tmp_path))
    assert server.count(path=CHAT_PATH) == 6
    # The third idea's requests fail for good: the run stops, the other two came from the cache.
    server.set_fault_rates({"500": 1.0})
    out = tmp_path / "three.jsonl"
    s = tension.generate(ideas, out=out, **cfg_for(server, tmp_path, retries=1)).summary
    assert s.status == "failed" and s.cache_hits["endings"] == 6 and not out.exists()
    assert len((tmp_path / "three.jsonl.partial").read_text().splitlines()) == 2  # completed stories kept
    server.clear_faults()
    server.reset_records()
    s = tension.generate(ideas, out=out, **cfg_for(server, tmp_path)).summary
    assert s.status == "complete" and s.requests["generation"] == 3 and server.count(path=CHAT_PATH) == 3
    server.reset_records()
    again = tmp_path / "again.jsonl"
    s = tension.generate(ideas, out=again, **cfg_for(server, tmp_path)).summary
    assert s.requests["generation"] == 0 and s.cache_hits["endings"] == 9 and server.requests == []  # nothing sent, not even /v1/models
    assert again.read_bytes() == out.read_bytes()


def test_429_with_retry_after_is_waited_out(server, tmp_path):
    script_pipeline(server)
    server.retry_after = "0"
    server.fail_next("429", times=2)
    s = tension.generate(write_ideas(tmp_path / "i.jsonl", IDEAS[:1]), out=tmp_path / "o.jsonl",
                         **cfg_for(server, tmp_path, mode="vanilla")).summary
    assert s.status == "complete" and s.stories == 1
    assert [r.status for r in server.requests if r.path == CHAT_PATH] == [429, 429, 200]


WHODUNIT = {"id": "w1", "idea": "A prize marrow is poisoned at the village show.", "group": "cozy",
            "suspects": ["Mrs Pell", "The vicar", "Dr Lowe", "Tam"], "culprit": "Dr Lowe", "distractor": "Tam"}


@pytest.mark.in_process
def test_whodunit_paragraph_by_paragraph_in_the_fairplay_format(server, tmp_path):
    def paragraph(m, seed, i):
        k = re.search(r"paragraph (\d+) of", m[-1]["content"]).group(1)
        return f"Paragraph {k} {{clue}} text."

    server.script("Continue the story.", paragraph)
    server.script("Finish the story.", lambda m, seed, i: "So it was Dr Lowe, and the clues said so.")
    ideas = write_ideas(tmp_path / "w.jsonl", [WHODUNIT])
    out = tmp_path / "w_out.jsonl"
    s = tension.generate(ideas, out=out, **cfg_for(server, tmp_path, mode="whodunit", paragraphs=4)).summary
    assert s.status == "complete" and s.requests["generation"] == 4
    (line,) = out.read_bytes().splitlines()
    # the fairplay contract (docs/fairplay.md): these fields, no others; and fairplay reads the file
    doc = json.loads(line)
    assert set(doc) == {"id", "group", "segments", "suspects", "culprit", "distractor", "revelation", "generator"}
    assert set(doc["generator"]) == {"model", "system", "paragraph_prompt", "final_prompt", "temperature",
                                     "max_tokens", "L"}
    (rec,), _, errors = read_stories(out, load_fairplay_config(None, {}))
    assert errors == []
    assert rec.segments == ["Paragraph 1 {clue} text.", "Paragraph 2 {clue} text.", "Paragraph 3 {clue} text.",
                            "So it was Dr Lowe, and the clues said so."]
    assert (rec.id, rec.group, rec.culprit, rec.distractor, rec.revelation) == ("w1", "cozy", "Dr Lowe", "Tam", 4)
    assert rec.suspects == WHODUNIT["suspects"]
    g = rec.generator
    assert (g.model, g.temperature, g.L) == ("test-gen", 1.0, 4)
    assert g.system.startswith("You are a skilled author of detective fiction.") and "distractor" in g.system
    for ph in ("{i}", "{L}", "{suspects}", "{culprit}", "{distractor}", "{story}"):
        assert ph in g.paragraph_prompt and ph in g.final_prompt
    bodies = chats(server)
    assert len(bodies) == 4
    for i, b in enumerate(bodies, start=1):  # a reader can rebuild every request from the record
        assert b["temperature"] == 1.0 and "min_p" not in b and b["max_tokens"] == g.max_tokens
        template = g.final_prompt if i == 4 else g.paragraph_prompt
        assert b["messages"] == [
            {"role": "system", "content": g.system},
            {"role": "user", "content": render_whodunit(
                template, i=i, L=4, suspects=rec.suspects, culprit=rec.culprit, distractor=rec.distractor,
                story="\n\n".join(rec.segments[: i - 1]))}]
    second = bodies[1]["messages"][1]["content"]
    assert second.startswith("Continue the story. Write the next paragraph (paragraph 2 of 4). The suspects are: "
                             "Mrs Pell, The vicar, Dr Lowe, Tam. The true culprit is: Dr Lowe (do not reveal this "
                             "yet). The distractor is: Tam (do not reveal their innocence yet).")
    assert second.endswith("Paragraph 1 {clue} text.")
    assert "reveal that Dr Lowe is the culprit" in bodies[3]["messages"][1]["content"]


def test_render_whodunit_replaces_only_its_placeholders_in_one_pass():
    t = "{i}/{L} {suspects} {culprit} {distractor} {x} {{i}} {story}"
    got = render_whodunit(t, i=3, L=9, suspects=["A {story}", "B"], culprit="{L}", distractor="B",
                          story="so far {i}")
    assert got == "3/9 A {story}, B {L} B {x} {3} so far {i}"


@pytest.mark.in_process
def test_bad_ideas_are_reported_by_file_line_and_field_and_the_rest_go_on(server, tmp_path, capsys):
    script_pipeline(server)
    bad = tmp_path / "ideas.jsonl"
    good_w = dict(WHODUNIT, id="ok")
    lines = [json.dumps(good_w),
             "{not json",
             json.dumps({"id": "x2", "idea": 5}),
             json.dumps(dict(WHODUNIT, id="x3", culprit="Nobody")),
             json.dumps(dict(WHODUNIT, id="x4", distractor="Dr Lowe")),
             json.dumps({k: v for k, v in WHODUNIT.items() if k != "suspects"} | {"id": "x5"}),
             json.dumps(dict(good_w))]
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    code = main(["generate", str(bad), "--out", str(out), "--mode", "whodunit", "--paragraphs", "2",
                 "--base-url", server.base_url, "--model", "test-gen", "--cache", str(tmp_path / "c"),
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"{bad}:2: not valid JSON" in err
    assert f"{bad}:3 field `idea`: expected a string, got a number" in err
    assert f"{bad}:4 field `culprit`: 'Nobody' is not one of the suspects" in err
    assert f"{bad}:5 field `distractor`: must differ from the culprit" in err
    assert f"{bad}:6 field `suspects`: expected a list of at least 2 names" in err
    assert f"{bad}:7 field `id`: duplicate id 'ok' (first on line 1)" in err
    assert [r["id"] for r in read_out(out)] == ["ok"]


@pytest.mark.in_process
def test_bad_settings_are_usage_errors(server, tmp_path, capsys):
    ideas = write_ideas(tmp_path / "i.jsonl")
    base = ["generate", str(ideas), "--out", str(tmp_path / "o.jsonl"), "--base-url", server.base_url]
    assert main(base + ["--titles", str(tmp_path / "missing.txt")]) == 2
    assert "--titles" in capsys.readouterr().err
    assert main(base + ["--attempts", "0"]) == 2
    assert "--attempts: expected an integer >= 1" in capsys.readouterr().err
    assert server.count(path=CHAT_PATH) == 0


@pytest.mark.in_process
def test_generated_stories_are_a_valid_score_corpus(server, tmp_path):
    from tension.core.inputs.corpus import read_corpus

    script_pipeline(server)
    out = tmp_path / "v.jsonl"
    tension.generate(write_ideas(tmp_path / "i.jsonl"), out=out, **cfg_for(server, tmp_path, mode="vanilla"))
    corpus = read_corpus(out, min_words=1)
    assert not corpus.errors and [s.id for s in corpus.stories] == ["lamp-vanilla", "bees-vanilla", "choir-vanilla"]
    assert [s.meta["idea_id"] for s in corpus.stories] == ["lamp", "bees", "choir"]
    assert all(s.group == "vanilla" for s in corpus.stories)


@pytest.mark.in_process
def test_api_key_from_the_named_variable_is_never_written(server, tmp_path, monkeypatch, capsys):
    script_pipeline(server)
    secret = "sk-planted-generate-0123456789"
    monkeypatch.setenv("HOSTED_KEY", secret)
    out = tmp_path / "o" / "s.jsonl"
    code = main(["generate", str(write_ideas(tmp_path / "i.jsonl", IDEAS[:1])), "--out", str(out), "--mode", "vanilla",
                 "--min-p", "0", "--api-key-env", "HOSTED_KEY", "--base-url", server.base_url, "--model", "test-gen",
                 "--cache", str(tmp_path / "o" / "cache"), "--no-progress"])
    std = capsys.readouterr()
    assert code == 0 and secret not in std.out + std.err
    assert "min_p" not in chats(server)[0]  # --min-p 0: the field is left out
    assert json.loads(run_record_path(out).read_text())["config"]["api_key"] == "(set)"
    for f in (tmp_path / "o").rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f


def test_the_shipped_example_ideas_are_valid():
    from tension.core.pipelines.generate import read_ideas

    root = Path(__file__).resolve().parents[2] / "examples"
    ideas, errors = read_ideas(root / "ideas.jsonl")
    assert not errors and len(ideas) == 5
    ideas, errors = read_ideas(root / "whodunit_ideas.jsonl", whodunit=True)
    assert not errors and len(ideas) == 2 and all(len(i.suspects) == 4 for _, i in ideas)


def test_sigterm_stops_cleanly_and_the_same_command_resumes(server, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    script_pipeline(server)
    server.delay = 0.3
    many = [{"id": f"i{k}", "idea": f"Idea number {k} about a bell."} for k in range(8)]
    ideas = write_ideas(tmp_path / "ideas.jsonl", many)
    out = tmp_path / "s.jsonl"
    argv = [sys.executable, "-m", "tension.core.cli", "generate", str(ideas), "--out", str(out), "--mode", "vanilla",
            "--concurrency", "1", "--base-url", server.base_url, "--model", "test-gen",
            "--cache", str(tmp_path / "cache"), "--no-progress"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    deadline = time.monotonic() + 30
    while server.count(path=CHAT_PATH) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Resume with the same command" in err
    assert not out.exists()  # never a half output file
    assert json.loads(run_record_path(out).read_text())["status"] == "interrupted"
    done = len((tmp_path / "s.jsonl.partial").read_text().splitlines())
    assert 2 <= done < 8  # the third may still have been on its way back
    server.delay = 0.0
    s = tension.generate(ideas, out=out, **cfg_for(server, tmp_path, mode="vanilla")).summary
    assert s.status == "complete" and s.stories == 8 and s.cache_hits["endings"] >= done and s.requests["generation"] <= 8 - done
    assert [r["idea_id"] for r in read_out(out)] == [f"i{k}" for k in range(8)]


@pytest.mark.in_process
def test_study_recipe_end_to_end_vanilla_and_full_scored_and_compared_by_idea(server, tmp_path, capsys):
    """docs/generation.md's recipe on the test server: generate both, score both,
    `compare --pair-by idea_id` pairs every idea."""
    import random

    from tension.testing.corpus import write_story

    server.script("extract 7 scene-level beats", "Seven beats.")
    server.script("to-do list of the most important", "Five beats.")
    server.script("Write the story now.", lambda m, seed, i: write_story(random.Random(seed), 130))
    ideas = write_ideas(tmp_path / "ideas.jsonl")
    common = ["--base-url", server.base_url, "--model", "test-gen", "--cache", str(tmp_path / "cache"),
              "--no-progress"]
    for mode in ("vanilla", "full"):
        assert main(["generate", str(ideas), "--mode", mode, "--out", str(tmp_path / f"{mode}.jsonl")] + common) == 0
        assert main(["score", str(tmp_path / f"{mode}.jsonl"), "--out", str(tmp_path / "runs" / mode), "--endings",
                     "4", "--min-words", "50", "--no-report", "--seed", "1"] + common) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "runs" / "vanilla"), str(tmp_path / "runs" / "full"), "--pair-by",
                 "idea_id", "--resamples", "200"]) == 0
    assert capsys.readouterr().out.startswith("3 pairs by `idea_id` (0 stories only in A, 0 only in B)")


@pytest.mark.in_process
def test_a_second_run_on_the_same_out_file_fails_fast(server, tmp_path, capsys):
    import fcntl

    out = tmp_path / "s.jsonl"
    with (tmp_path / ".s.jsonl.lock").open("a+") as held:  # as a running generate holds it
        held.write("4242")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code = main(["generate", str(write_ideas(tmp_path / "i.jsonl")), "--out", str(out), "--base-url",
                     server.base_url, "--model", "test-gen", "--cache", str(tmp_path / "c"), "--no-progress"])
    assert code == 1
    assert f"--out {out} is in use by another tension-run generate (pid 4242)" in capsys.readouterr().err
    assert server.count(path=CHAT_PATH) == 0 and not out.exists()


@pytest.mark.in_process
def test_a_refused_request_fails_its_idea_and_the_others_go_on(server, tmp_path):
    script_pipeline(server)
    huge = {"id": "huge", "idea": "word " * 5000}  # with 4,000 answer tokens: over the 8,192 context → 400
    out = tmp_path / "o.jsonl"
    s = tension.generate(write_ideas(tmp_path / "i.jsonl", [huge, IDEAS[0]]), out=out,
                         **cfg_for(server, tmp_path, mode="vanilla")).summary
    assert s.status == "complete" and s.stories == 1
    assert [(f.id, f.stage) for f in s.failures] == [("huge", "request")] and "HTTP 400" in s.failures[0].error
    assert [r["idea_id"] for r in read_out(out)] == ["lamp"]


@pytest.mark.in_process
def test_cache_max_gb_bounds_the_cache_and_the_run_resumes_with_room(server, tmp_path):
    # Stories of ~90 kB each as stored (120,000 random characters of 64: the cache stores
    # records compressed, and a repeated text would take nothing; the client cuts an answer
    # at 129,024 characters): the third cannot fit a 200 kB cache.
    def story(m, seed, i):
        rng = random.Random(f"{seed}-{i}")
        return f"STORY[{seed}] " + "".join(rng.choice(string.ascii_letters + string.digits + " .")
                                           for _ in range(120_000))

    server.script("Write the story now.", story)
    ideas = write_ideas(tmp_path / "ideas.jsonl")
    s = tension.generate(ideas, out=tmp_path / "v.jsonl",
                         **cfg_for(server, tmp_path, mode="vanilla", cache_max_gb=0.0002)).summary
    assert s.status == "failed"
    assert f"the cache at {tmp_path / 'cache'} is full: it reached its limit of 200,000 bytes" in s.error
    done = tension.generate(ideas, out=tmp_path / "v.jsonl", **cfg_for(server, tmp_path, mode="vanilla")).summary
    assert done.status == "complete" and done.stories == 3
