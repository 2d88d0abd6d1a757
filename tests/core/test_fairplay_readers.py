"""`fairplay` end to end against the loopback server with scripted readers: the
values in readers.jsonl, the know-it-all's continuations and prompts, S / C_UB /
FP_UB by hand, retries and failures, reruns from the cache, bad input."""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path

import pytest
from fairplay_scripted import (  # tests/
    CULPRIT,
    FAST,
    FAST_KW,
    GEN_SYSTEM,
    GENERATOR,
    SUSPECTS,
    K,
    L,
    cfg_for,
    experienced_expected,
    gullible_expected,
    kia_culprit_share,
    prefix_len,
    scene,
    scripted,
    story_record,
    user_text,
    write_jsonl,
)

import tension
from tension.core.cli import main
from tension.core.pipelines.fairplay import load_fairplay_config, read_stories, reader_schedule, segment_text


def read_readers(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "readers.jsonl").read_text().splitlines()]


def close(a, b):
    return a is not None and all(abs(x - y) < 1e-9 for x, y in zip(a, b, strict=True))


@pytest.mark.in_process
def test_readers_end_to_end_values_metrics_and_rerun(server, tmp_path):
    server.respond(scripted)
    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record("s1"), story_record("s2", generator=False)])
    cfg = cfg_for(server, tmp_path)
    run = tension.fairplay(stories, out=tmp_path / "out", **cfg, **FAST_KW).summary
    assert run.status == "complete", run.error
    assert run.reader_failures == 0 and run.input_errors == []
    s1, s2 = read_readers(tmp_path / "out")
    assert s1["id"] == "s1" and s1["L"] == L and s1["suspects"] == SUSPECTS and s1["culprit"] == CULPRIT
    assert s1["extracted_suspects"] is False and s1["failures"] == [] and s1["revelation"] == L
    # one schedule for every reader: paragraphs 1, 3, 5, nothing elsewhere
    for i in range(1, L + 1):
        for reader, expected in (("gullible", gullible_expected), ("experienced", experienced_expected)):
            got = s1["readers"][reader][i - 1]
            assert close(got, expected(i)) if i in (1, 3, 5) else got is None, (reader, i)
    kia = s1["readers"]["know_it_all"]
    for i in range(1, L + 1):
        if i in (1, 3, 5):
            share = kia_culprit_share(i) / K
            assert close(kia[i - 1], [0.0, share, 1 - share]), i
        else:
            assert kia[i - 1] is None
    assert "know_it_all" not in s2["readers"]  # no generator: no know-it-all
    assert close(s2["readers"]["gullible"][0], gullible_expected(1))

    # Requests: per story 3 gullible + 3 experienced; K chains per checkpoint: one
    # n=K request for the first paragraph, then one per further paragraph each.
    reqs = [r for r in server.requests if r.path == "/v1/chat/completions"]
    gen = [r for r in reqs if r.body["messages"][0]["content"] == GEN_SYSTEM]
    assert len(gen) == sum(1 + K * (L - c - 1) for c in (1, 3, 5))
    assert len(reqs) == 2 * (2 * 3) + len(gen) + 3 * K
    first = [r for r in gen if r.body["n"] == K]
    assert sorted(r.body["seed"] for r in first) == [0, 0, 0]
    # The generator template rendered literally: braces in the story stay, the
    # continuation is blind to the culprit by default.
    r3 = next(r for r in first if prefix_len(r.body["messages"][1]["content"]) == 3)
    expected = ("Write paragraph 4 of 6. Suspects: Mara Quill, Tobias Fenn, Ines Harrow. Culprit: "
                "the suspect the story so far has set up to be the culprit. Distractor: the suspect the story so "
                "far has set up to be the distractor.\nSTORY SO FAR:\n" + "\n\n".join(scene("s1", j) for j in (1, 2, 3)))
    assert r3.body["messages"][1]["content"] == expected
    assert r3.body["temperature"] == 1.0 and r3.body["max_tokens"] == 80 and r3.body["model"] == "test-gen"

    # S, C_UB, FP_UB by hand (docs/fairplay.md) at paragraphs 1, 3, 5: the gullible
    # reader misses all three; the know-it-all misses (all distractor), ties 2/4 with
    # the distractor (half a hit) and hits.
    rows = {r["id"]: r for r in csv.DictReader((tmp_path / "out" / "stories.csv").read_text().splitlines())}
    assert float(rows["s1"]["S"]) == 1.0
    assert float(rows["s1"]["C_UB"]) == pytest.approx(0.5)
    assert float(rows["s1"]["FP_UB"]) == pytest.approx(0.5)
    # experienced: a 3-way tie at 1 (a third of a hit), hits at 3 and 5
    assert float(rows["s1"]["C_ER"]) == pytest.approx((1 / 3 + 2) / 3)
    assert rows["s2"]["C_UB"] == ""

    # A rerun sends nothing: every answer comes from the cache.
    before = len(server.requests)
    again = tension.fairplay(stories, out=tmp_path / "out2", **cfg, **FAST_KW).summary
    assert again.status == "complete"
    assert len(server.requests) == before
    assert (tmp_path / "out2" / "readers.jsonl").read_bytes() == (tmp_path / "out" / "readers.jsonl").read_bytes()


@pytest.mark.in_process
def test_given_mode_names_the_culprit_and_keeps_the_key_out_of_outputs(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-4242")
    server.respond(scripted)
    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record("s1")])
    cfg = cfg_for(server, tmp_path, readers=("know_it_all",), schedule="5", know_it_all_culprit="given")
    assert tension.fairplay(stories, out=tmp_path / "out", **cfg, **FAST_KW).summary.status == "complete"
    (req,) = [r for r in server.requests if r.path == "/v1/chat/completions"
              and r.body["messages"][0]["content"] == GEN_SYSTEM]
    assert "Culprit: Tobias Fenn." in req.body["messages"][1]["content"]
    (s1,) = read_readers(tmp_path / "out")
    assert set(s1["readers"]) == {"know_it_all"}
    assert s1["readers"]["know_it_all"][4] == [0.0, 1.0, 0.0]
    for f in (tmp_path / "out").rglob("*"):
        if f.is_file():
            assert b"sk-secret-4242" not in f.read_bytes(), f
    run_json = json.loads((tmp_path / "out" / "fairplay_run.json").read_text())
    assert run_json["config"]["api_key"] == "(set)" and run_json["requests"]["generation"] == 1


@pytest.mark.in_process
def test_unusable_answers_are_retried_with_a_new_seed_then_recorded(server, tmp_path):
    def flaky(msgs, n, seed):
        text = user_text(msgs)
        if "ignoring the interest of the writer" not in text:
            return None
        i = prefix_len(text)
        if i == 2 and seed == 0:
            return "I cannot tell yet."  # retried: the next seed answers
        if i == 4:
            return json.dumps({"suspects": SUSPECTS, "probabilities": [0.5, -0.1, 0.6]})  # never usable
        return json.dumps({"suspects": SUSPECTS, "probabilities": gullible_expected(i)})

    server.respond(flaky)
    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record("s1", generator=False)])
    out = tmp_path / "out"
    code = main(["fairplay", str(stories), "--out", str(out), "--reader-base-url", server.base_url,
                 "--reader-model", "test-judge", "--cache", str(tmp_path / "cache"), "--readers", "gullible",
                 "--parse-retries", "2", "--no-progress", "--resamples", "50"])
    assert code == 1  # a value failed: the exit status says so, the rest is written
    (s1,) = read_readers(out)
    g = s1["readers"]["gullible"]
    assert close(g[1], gullible_expected(2))
    assert g[3] is None
    (f,) = s1["failures"]
    assert f["reader"] == "gullible" and f["paragraph"] == 4 and "negative" in f["error"]
    seeds = sorted(r.body["seed"] for r in server.requests
                   if r.path == "/v1/chat/completions" and prefix_len(user_text(r.body["messages"])) == 4)
    assert seeds == [0, 1, 2]  # first try + 2 re-asks, each a new cache key
    temps = [r.body["temperature"] for r in server.requests
             if r.path == "/v1/chat/completions" and prefix_len(user_text(r.body["messages"])) == 2]
    assert temps == [0.0, 0.7]  # a re-ask samples
    assert (out / "stories.csv").exists()


@pytest.mark.in_process
def test_json_constraint_sends_the_answer_shape(server, tmp_path):
    server.respond(scripted)
    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record("s1")])
    cfg = cfg_for(server, tmp_path, readers=("gullible", "know_it_all"), schedule="5", reader_constraint="json")
    assert tension.fairplay(stories, out=tmp_path / "out", **cfg, **FAST_KW).summary.status == "complete"
    bodies = [r.body for r in server.requests if r.path == "/v1/chat/completions"]
    reader = next(b for b in bodies if "ignoring the interest" in user_text(b["messages"]))
    schema = reader["structured_outputs"]["json"]
    assert schema["properties"]["suspects"]["prefixItems"] == [{"const": s} for s in SUSPECTS]
    assert schema["properties"]["probabilities"]["minItems"] == 3
    judge = next(b for b in bodies if "true culprit?" in user_text(b["messages"]))
    assert judge["structured_outputs"]["json"]["properties"]["culprit"]["anyOf"][0] == {"enum": SUSPECTS}
    gen = [b for b in bodies if b["messages"][0]["content"] == GEN_SYSTEM]
    assert gen and all("structured_outputs" not in b for b in gen)  # story text is never constrained


@pytest.mark.in_process
def test_experienced_reader_sees_earlier_stories_of_the_same_generator(server, tmp_path):
    server.respond(scripted)
    other_gen = {**GENERATOR, "model": "other-model"}
    rows = [story_record("a1"), story_record("n1", generator=False), {**story_record("b1"), "generator": other_gen},
            story_record("a2"), story_record("n2", generator=False)]
    stories = write_jsonl(tmp_path / "stories.jsonl", rows)
    cfg = cfg_for(server, tmp_path, readers=("experienced",), previous_stories=2)
    assert tension.fairplay(stories, out=tmp_path / "out", **cfg, **FAST_KW).summary.status == "complete"
    shown: dict[str, set[str]] = {}
    for r in server.requests:
        if r.path != "/v1/chat/completions":
            continue
        text = user_text(r.body["messages"])
        head, _, current = text.partition("STORY FOR PREDICTION ##")
        sid = re.search(r"Scene 1 of (\w+)", current).group(1)
        shown.setdefault(sid, set()).update(re.findall(r"Scene 1 of (\w+)", head))
    # a2 sees a1 (same generator model), not b1; n2 sees n1 (no generator, same group)
    assert shown == {"a1": set(), "n1": set(), "b1": set(), "a2": {"a1"}, "n2": {"n1"}}


@pytest.mark.in_process
def test_an_interrupted_run_keeps_its_answers_and_resumes(server, tmp_path):
    import asyncio

    server.respond(scripted)
    server.delay = 0.05
    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record(f"s{j}", generator=False) for j in range(4)])
    cfg = cfg_for(server, tmp_path, readers=("gullible",), reader_concurrency=2)

    async def cut_short():
        task = asyncio.ensure_future(tension.fairplay_async(stories, out=tmp_path / "out", **cfg, **FAST_KW))
        while sum(r.path == "/v1/chat/completions" for r in server.requests) < 6:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cut_short())
    time.sleep(0.5)  # requests in flight at the stop finish on the server; they were not committed
    sent = sum(r.path == "/v1/chat/completions" for r in server.requests)
    assert 6 <= sent < 4 * L
    partial = (tmp_path / "out" / "readers.partial.jsonl").read_text().splitlines()
    assert len(partial) >= 4  # the answers that completed were committed before the stop
    assert not (tmp_path / "out" / "readers.jsonl").exists()
    server.delay = 0.0
    run = tension.fairplay(stories, out=tmp_path / "out", **cfg, **FAST_KW).summary
    assert run.status == "complete" and run.cache_hits["verdicts"] >= len(partial)
    total = sum(r.path == "/v1/chat/completions" for r in server.requests)
    assert total - sent <= 4 * L - len(partial)  # only what was missing was asked
    assert [len(s["readers"]["gullible"]) for s in read_readers(tmp_path / "out")] == [L] * 4


@pytest.mark.in_process
def test_without_seeds_each_re_ask_is_still_a_new_request(server, tmp_path):
    server.respond(lambda msgs, n, seed: "No idea." if "ignoring the interest" in user_text(msgs) else None)
    server.respond(scripted)
    rec = {**story_record("s1", segments=[scene("s1", 1), "b"], revelation=2), "generator": {**GENERATOR, "L": 2}}
    stories = write_jsonl(tmp_path / "stories.jsonl", [rec])
    cfg = cfg_for(server, tmp_path, readers=("gullible",), schedule="all", parse_retries=3, seeds=False)
    run = tension.fairplay(stories, out=tmp_path / "out", **cfg, **FAST_KW).summary
    assert run.reader_failures == 2
    bodies = [r.body for r in server.requests if r.path == "/v1/chat/completions"]
    assert all("seed" not in b for b in bodies)
    temps = sorted(b["temperature"] for b in bodies if "ignoring the interest" in user_text(b["messages"]))
    assert temps == [0.0, 0.0, 0.7, 0.7, 0.71, 0.71, 0.72, 0.72]  # two paragraphs, 1 + 3 tries each


@pytest.mark.in_process
def test_bad_input_lines_are_reported_and_the_rest_runs(server, tmp_path, capsys):
    server.respond(scripted)
    good = story_record("ok", generator=False)
    rows = [
        good,
        "{not json",
        story_record("c1", generator=False, culprit="Nobody Known"),
        story_record("c2", generator=False, revelation=9),
        {**story_record("c3", generator=False), "generator": {"model": "m"}},
        {"id": "c4", "culprit": CULPRIT, "suspects": SUSPECTS},
        story_record("ok", generator=False),
        story_record("c5", generator=False, distractor=["Ines Harrow", "Mara Quill"]),
        {**story_record("c6"), "generator": {**GENERATOR, "final_prompt": "Reveal the culprit."}},
    ]
    path = write_jsonl(tmp_path / "stories.jsonl", rows)
    out = tmp_path / "out"
    code = main(["fairplay", str(path), "--out", str(out), "--reader-base-url", server.base_url,
                 "--reader-model", "test-judge", "--cache", str(tmp_path / "cache"), "--readers", "gullible",
                 "--no-progress", "--resamples", "50"])
    err = capsys.readouterr().err
    assert code == 1
    p = str(path)
    assert f"{p}:2: not valid JSON" in err
    assert f"{p}:3 field `culprit`: 'Nobody Known' is not one of the suspects" in err
    assert f"{p}:4 field `revelation`: expected a paragraph number 1..6" in err
    assert f"{p}:5 field `generator`:" in err
    assert f"{p}:6 field `segments`: missing" in err
    assert f"{p}:7 field `id`: duplicate id 'ok' (first on line 1)" in err
    assert f"{p}:8 field `distractor`: expected one name, got a list of 2" in err
    assert f"{p}:9 field `generator.final_prompt`: has no {{story}} placeholder" in err
    assert [r["id"] for r in read_readers(out)] == ["ok"]


@pytest.mark.in_process
def test_suspects_extracted_text_segmented_and_labels_as_lists(server, tmp_path):
    def extraction(msgs, n, seed):
        text = user_text(msgs)
        if "List the suspects" in text:
            return 'Suspects: {"suspects": ["Baron Fenn", "Mara Quill", "Old Gus", "Pip", "Ada"]}'
        if "ignoring the interest of the writer" in text:
            names = re.search(r"The suspects are: (.+?)\. Please", text).group(1).split(", ")
            return json.dumps({"probabilities": dict(zip(names, [0.1, 0.2, 0.3, 0.4]))})
        return None

    server.respond(extraction)
    text = "\n\n".join(scene("t1", j) for j in range(1, 13))
    rows = [{"id": "t1", "text": text, "suspects": None, "culprit": ["Tobias Fenn"], "distractor": None}]
    path = write_jsonl(tmp_path / "stories.jsonl", rows)
    cfg = cfg_for(server, tmp_path, readers=("gullible",), segments=4, schedule="all")
    run = tension.fairplay(path, out=tmp_path / "out", **cfg, **FAST_KW).summary
    assert run.status == "complete"
    (t1,) = read_readers(tmp_path / "out")
    assert t1["extracted_suspects"] is True
    # the culprit label's spelling wins; at most 4 suspects, the culprit kept
    assert t1["suspects"] == ["Tobias Fenn", "Mara Quill", "Old Gus", "Pip"]
    assert t1["L"] == 4 and t1["distractor"] is None and t1["group"] is None
    assert t1["readers"]["gullible"] == [[0.1, 0.2, 0.3, 0.4]] * 4
    prompts = [user_text(r.body["messages"]) for r in server.requests if r.path == "/v1/chat/completions"]
    assert sum("List the suspects" in p for p in prompts) == 1
    # the chunks: 12 paragraphs in 4 chunks of 3, the reader's last prefix is the whole text
    assert max(prefix_len(p) for p in prompts) == 12


@pytest.mark.in_process
def test_a_failed_extraction_is_reported_with_file_and_line(server, tmp_path):
    server.respond(lambda msgs, n, seed: "Everyone is a suspect." if "List the suspects" in user_text(msgs) else None)
    rows = [story_record("ok", generator=False), {"id": "x", "segments": ["a", "b"], "culprit": "Ann"}]
    path = write_jsonl(tmp_path / "stories.jsonl", rows)
    server.respond(scripted)
    run = tension.fairplay(path, out=tmp_path / "out",
                           **cfg_for(server, tmp_path, readers=("gullible",), parse_retries=1), **FAST_KW).summary
    assert run.status == "complete" and run.failed_stories == ["x"]
    assert [r["id"] for r in read_readers(tmp_path / "out")] == ["ok"]
    doc = json.loads((tmp_path / "out" / "fairplay_run.json").read_text())
    (f,) = doc["failures"]["x"]
    assert f["reader"] == "suspects" and f["error"].startswith(f"{path}:2 field `suspects`: missing, and the extraction")


def test_suspects_file_and_no_extraction(tmp_path):
    sus = write_jsonl(tmp_path / "sus.jsonl", [{"id": "h1", "suspects": ["A. Holder", "Sir George"]}])
    rows = [{"id": "h1", "segments_25": ["x", "y", "z"], "suspects": None, "culprit": ["sir george"]},
            {"id": "h2", "segments_25": ["x", "y"], "suspects": None, "culprit": "B"}]
    path = write_jsonl(tmp_path / "stories.jsonl", rows)
    cfg = load_fairplay_config(None, {"suspects_file": str(sus), "extract_suspects": False})
    stories, extract, errors = read_stories(path, cfg)
    assert [s.id for s in stories] == ["h1"] and extract == []
    assert stories[0].culprit == "Sir George" and stories[0].L == 3
    assert len(errors) == 1 and "field `suspects`: missing" in str(errors[0])


def test_reader_schedule_and_segmentation():
    # the authors' (crime_fiction.py): the paper's 19 steps of 25
    assert reader_schedule("authors", 25) == [1, 3, 5, 7, 9, 11, *range(13, 26)]
    assert reader_schedule("authors", 10) == list(range(1, 11))  # L < 25: every paragraph
    assert reader_schedule("authors", 30) == [*range(1, 16, 2), *range(16, 31)]
    assert reader_schedule("authors", 60) == [*range(1, 30, 3), *range(31, 60, 2)]
    assert reader_schedule("all", 3) == [1, 2, 3]
    assert reader_schedule("9,1,30,1", 25) == [1, 9]
    assert segment_text("a\n\nb\n\nc\n\nd\n\ne", "paragraphs", 3) == ["a\n\nb", "c\n\nd", "e"]
    assert segment_text("a\n\nb", "paragraphs", 25) == ["a", "b"]
    assert segment_text("One here. Two there. Three now.", "sentences", 2) == ["One here. Two there.", "Three now."]


def test_config_errors_name_the_setting(tmp_path):
    from tension.core.errors import ConfigError

    with pytest.raises(ConfigError, match="readers"):
        load_fairplay_config(None, {"readers": ("gullible", "wise")})
    with pytest.raises(ConfigError, match="know-it-all-culprit"):
        load_fairplay_config(None, {"know_it_all_culprit": "maybe"})
    toml = tmp_path / "c.toml"
    toml.write_text('base_url = "http://h:1"\nendings = 5\n[fairplay]\nk = 3\n')
    cfg = load_fairplay_config(toml, {"k": None})
    assert cfg.base_url == "http://h:1" and cfg.k == 3  # a score key is ignored, [fairplay] read
    toml.write_text('[fairplay]\nkk = 3\n')
    with pytest.raises(ConfigError, match="unknown key `kk`"):
        load_fairplay_config(toml, {})


def test_docs_name_only_real_flags():
    """Every --flag the readers section of docs/fairplay.md names exists."""
    from tension.core.cli import build_parser

    doc = (Path(__file__).resolve().parents[2] / "docs" / "fairplay.md").read_text()
    section = doc.split("<!-- readers section (issue 9b) -->")[1].split("<!-- end readers section")[0]
    sub = build_parser()._subparsers._group_actions[0].choices["fairplay"]
    known = {o for a in sub._actions for o in a.option_strings}
    named = set(re.findall(r"(--[a-z][a-z-]+)", section)) - {"--embedded"}  # of `serve`
    assert named and named <= known, named - known


def test_a_server_that_stays_down_fails_the_run_honestly(tmp_path, capsys):
    from tension.testing.openai_server import LoopbackServer

    with LoopbackServer(model="test-judge") as srv:
        base = srv.base_url
    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record("s1", generator=False)])
    code = main(["fairplay", str(stories), "--out", str(tmp_path / "out"), "--reader-base-url", base,
                 "--reader-model", "test-judge", "--cache", str(tmp_path / "cache"), "--retries", "1",
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1
    assert "gave up after 1 attempt" in err and "rerun the same command" in err
    assert not (tmp_path / "out" / "readers.jsonl").exists()
    doc = json.loads((tmp_path / "out" / "fairplay_run.json").read_text())
    assert doc["status"] == "failed"


@pytest.mark.in_process
def test_a_second_run_on_the_same_out_folder_fails_fast_naming_fairplay(server, tmp_path, capsys):
    import fcntl

    stories = write_jsonl(tmp_path / "stories.jsonl", [story_record("s1", generator=False)])
    out = tmp_path / "out"
    out.mkdir()
    with (out / ".tension-run.lock").open("a+") as held:  # as a running fairplay holds it
        held.write("4242")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code = main(["fairplay", str(stories), "--out", str(out), "--base-url", server.base_url, "--model",
                     "test-judge", "--cache", str(tmp_path / "cache"), "--no-progress"])
    assert code == 1
    assert f"--out {out} is in use by another tension-run fairplay (pid 4242)" in capsys.readouterr().err
    assert server.count(path="/v1/chat/completions") == 0 and not (out / "readers.jsonl").exists()


@pytest.mark.in_process
def test_fairplay_and_fairplay_metrics_agree_on_the_same_readers(server, tmp_path):
    # One schedule for every reader; two experienced readers named by their setting;
    # the metrics `fairplay` writes are those `fairplay-metrics` computes from its
    # readers.jsonl, byte for byte.
    from tension.core.reports.fairplay_metrics import fairplay_metrics

    server.respond(scripted)
    rows = [story_record("a1"), story_record("a2")]
    stories = write_jsonl(tmp_path / "stories.jsonl", rows)
    cfg = cfg_for(server, tmp_path, previous_stories=[0, 1])
    run = tension.fairplay(stories, out=tmp_path / "out", **cfg, **FAST_KW).summary
    assert run.status == "complete" and run.reader_failures == 0
    a1, a2 = read_readers(tmp_path / "out")
    assert set(a2["readers"]) == {"gullible", "experienced_0", "experienced_1", "know_it_all"}
    for reader, values in a2["readers"].items():
        assert [i + 1 for i, v in enumerate(values) if v is not None] == [1, 3, 5], reader
    summary = fairplay_metrics(tmp_path / "out" / "readers.jsonl", tmp_path / "again", **FAST)
    assert summary.errors == []
    for name in ("stories.csv", "groups.csv", "steps.jsonl", "curves.csv"):
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "out" / name).read_bytes(), name
    header = (tmp_path / "out" / "stories.csv").read_text().splitlines()[0].split(",")
    assert {"C_ER_0", "FP_ER_0", "C_ER_1", "FP_ER_1", "steps_experienced_1"} <= set(header)
    # experienced_1 of a2 was shown a1; experienced_0 was shown nothing
    prompts = [user_text(r.body["messages"]) for r in server.requests if r.path == "/v1/chat/completions"]
    a2_prompts = [t.partition("STORY FOR PREDICTION ##") for t in prompts if "(PARTIAL) STORY FOR PREDICTION" in t
                  and "Scene 1 of a2" in t.partition("STORY FOR PREDICTION ##")[2]]
    assert {"Scene 1 of a1" in head for head, _, _ in a2_prompts} == {True, False}
