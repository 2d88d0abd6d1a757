"""The view's JSON documents and pages over HTTP: the numbers are those of stories.csv
and positions.jsonl, the endings and verdicts those the loopback server gave, and bad
input gets a clear page, never a traceback.

All in this process: the view is served from a thread (view_fixtures.ViewHere, the
server of a notebook's `result.view()`: the same runs, site and aiohttp app as
`tension-run view`; what it logs is its stderr), and `view --export` and the refused
folder run by the CLI's `main()` (`tension_run`). The subject is the documents, not
the process: none of these is a spec of a signal or of the console script."""

from __future__ import annotations

import csv
import json
import math
import shutil

from view_fixtures import ENDINGS, ViewHere

from tension.core.reports.figures import sharp_reversals
from tension.kernels.curves import CurveSettings, smooth


def _close(a, b) -> bool:
    return (a is None and b == "") or (a is not None and b != "" and math.isclose(a, float(b), rel_tol=1e-6,
                                                                                  abs_tol=1e-9))


def test_corpus_json_has_the_numbers_of_stories_csv(runs, viewer):
    status, corpus = viewer.json("api/r0/corpus.json")
    assert status == 200 and corpus["notes"] == []
    rows = list(csv.DictReader((runs.a / "stories.csv").read_text().splitlines()))
    assert [s["id"] for s in corpus["stories"]] == [r["id"] for r in rows]
    for s, r in zip(corpus["stories"], rows):
        assert s["n_positions"] == int(r["n_positions"])
        for col in corpus["columns"]:
            assert _close(s["stats"][col], r[col]), (s["id"], col)
            # issue 27: the story's interval, as stories.csv holds it (the run's settings and seed)
            iv = s["intervals"][col]
            assert _close(None if iv is None else iv[0], r[f"{col}_lo"]), (s["id"], col)
            assert _close(None if iv is None else iv[1], r[f"{col}_hi"]), (s["id"], col)
    assert any(s["intervals"]["mean_nr"] for s in corpus["stories"])
    groups = list(csv.DictReader((runs.a / "groups.csv").read_text().splitlines()))
    for g in groups:
        got = corpus["groups"][g["statistic"]][g["group"]]
        assert got["n"] == int(g["n"]) and _close(got["mean"], g["mean"]) and _close(got["lo"], g["boot_lo"])


def test_story_json_is_positions_jsonl_with_the_report_curve(runs, viewer):
    lines = [p for p in runs.positions(runs.a) if p["id"] == "story-001"]
    status, story = viewer.json("api/r0/story/story-001.json")
    assert status == 200
    assert [(p["k"], p["no_rate"], p["n_match"]) for p in story["positions"]] == \
        [(p["k"], p["no_rate"], p["n_match"]) for p in lines]
    x, y = [p["pct"] for p in lines], [p["no_rate"] for p in lines]
    ys = smooth(y, CurveSettings().window)
    assert all(math.isclose(p["smoothed"], v, abs_tol=1e-9) for p, v in zip(story["positions"], ys))
    marked = [j for j, p in enumerate(story["positions"]) if p["mark"]]
    assert marked == list(sharp_reversals(x, y))
    # sentence k-1 is the anchor of position k: the text is the corpus story's
    corpus = {json.loads(x)["id"]: json.loads(x) for x in (runs.root / "corpus.jsonl").read_text().splitlines()}
    assert " ".join(story["sentences"]).split() == corpus["story-001"]["text"].split()
    row = next(r for r in csv.DictReader((runs.a / "stories.csv").read_text().splitlines()) if r["id"] == "story-001")
    lo, hi = story["intervals"]["mean_nr"]
    assert _close(lo, row["mean_nr_lo"]) and _close(hi, row["mean_nr_hi"]) and lo <= story["stats"]["mean_nr"] <= hi
    assert story["interval_resamples"] == CurveSettings().interval_resamples


def test_endings_json_lists_each_ending_with_the_verdict_the_judge_gave(runs, viewer):
    line = [p for p in runs.positions(runs.b) if p["id"] == "story-002"][3]
    status, e = viewer.json(f"api/r1/endings/story-002/{line['k']}.json")
    assert status == 200 and e["cached"] is True and e["judge_model"] == "test-judge"
    assert len(e["endings"]) == line["n_endings"] == ENDINGS
    assert sum(x["verdict"] == "match" for x in e["endings"]) == line["n_match"]
    assert sum(x["verdict"] == "empty" for x in e["endings"]) == line["n_empty"]
    assert all(x["raw"] in ("Y", "N") for x in e["endings"] if x["verdict"] != "empty")


def test_compare_json_pairs_stories_and_positions(runs, viewer):
    status, c = viewer.json("api/compare/r0-r1.json")
    assert status == 200 and len(c["stories"]) == 3 and c["unpaired_a"] == c["unpaired_b"] == 0
    a = {(p["id"], p["k"]): p["no_rate"] for p in runs.positions(runs.a)}
    b = {(p["id"], p["k"]): p["no_rate"] for p in runs.positions(runs.b)}
    for s in c["stories"]:
        for p in s["positions"]:
            assert math.isclose(p["diff"], b[s["id"], p["k"]] - a[s["id"], p["k"]], abs_tol=1e-6)
    assert {r["stat"] for r in c["summary"]} >= {"mean_nr", "late_nr"}
    # issue 27: each story's difference with its interval over both runs' verdicts
    for s in c["stories"]:
        lo, hi = s["diff_ci"]["mean_nr"]
        assert lo <= s["diff"]["mean_nr"] <= hi and hi - lo > 0


def test_fairplay_json_and_the_know_it_alls_continuations(runs, viewer):
    status, page = viewer.json("api/r2/fairplay.json")
    assert status == 200 and [s["id"] for s in page["stories"]] == ["w1", "w2"]
    w1 = page["stories"][0]
    assert w1["checkpoints"] == [1, 3, 5] and w1["revelation"] == fp_L()
    # every reader is read on the run's one schedule (1, 3, 5 here), None elsewhere
    assert w1["readers"]["gullible"]["culprit"] == [0.1 if p in (1, 3, 5) else None for p in range(1, fp_L() + 1)]
    status, c = viewer.json("api/r2/continuations/w1/3.json")
    assert status == 200 and c["cached"] is True and len(c["continuations"]) == 4
    # the scripted generator: continuations k < c - 1 end with the culprit (tests/fairplay_scripted.py)
    assert [x["culprit"] for x in c["continuations"]] == ["Tobias Fenn", "Tobias Fenn", "Ines Harrow", "Ines Harrow"]
    assert c["continuations"][0]["paragraphs"][-1] == "In the end, Tobias Fenn is unmasked as the culprit."


def fp_L() -> int:
    from fairplay_scripted import L

    return L


def test_an_unknown_story_gets_a_clear_page_and_json(viewer):
    status, body = viewer.get("r0/story/no-such-story.html")
    assert status == 404 and b"no story 'no-such-story'" in body and b"Traceback" not in body
    status, e = viewer.json("api/r0/endings/no-such-story/3.json")
    assert status == 404 and "no story 'no-such-story'" in e["error"]
    status, e = viewer.json("api/r0/endings/story-000/99999.json")
    assert status == 404 and "no position k=99999" in e["error"]
    status, body = viewer.get("r9/index.html")
    assert status == 404 and b"no run r9" in body


def test_a_run_without_its_cache_shows_everything_but_the_endings(runs, tmp_path):
    moved = tmp_path / "run-a"
    shutil.copytree(runs.a, moved)
    v = ViewHere(moved, cache=tmp_path / "nowhere")
    try:
        status, corpus = v.json("api/r0/corpus.json")
        assert status == 200 and len(corpus["stories"]) == 3
        k = runs.positions(runs.a)[0]["k"]
        status, e = v.json(f"api/r0/endings/story-000/{k}.json")
        assert status == 200 and e["cached"] is False and "no cache at" in e["message"]
        status, body = v.get("r0/story/story-000.html")
        assert status == 200
    finally:
        assert "Traceback" not in v.stop()


def test_a_half_written_run_is_shown_from_its_partial_file(runs, tmp_path):
    half = tmp_path / "half"
    half.mkdir()
    lines = (runs.a / "positions.jsonl").read_text().splitlines()
    # a run stopped mid-write: no positions.jsonl, the partial file's last line cut short
    (half / "positions.partial.jsonl").write_text("\n".join(lines[:20]) + "\n" + lines[20][:30] + "\n")
    record = json.loads((runs.a / "run.json").read_text())
    (half / "run.json").write_text(json.dumps({**record, "status": "interrupted"}))
    v = ViewHere(half)
    try:
        status, corpus = v.json("api/r0/corpus.json")
        assert status == 200
        assert sum(s["n_positions"] for s in corpus["stories"]) == 20
        assert any("not finished (status: interrupted)" in n for n in corpus["notes"])
        assert any("positions.partial.jsonl:21" in n for n in corpus["notes"])
        status, body = v.get("r0/index.html")
        assert status == 200 and b"not finished" in body
    finally:
        assert "Traceback" not in v.stop()


def test_a_folder_that_is_no_run_is_an_error_naming_it(tmp_path, runs, tension_run):
    done = tension_run("view", tmp_path, "--port", "0", env=runs.home)
    assert done.returncode == 1
    assert f"error: {tmp_path}: not a run folder" in done.stderr and "Traceback" not in done.stderr


def test_export_writes_the_pages_and_says_how_large_the_endings_are(runs, tmp_path, tension_run):
    out = tmp_path / "site"
    done = tension_run("view", runs.a, "--export", out, env=runs.home)
    assert done.returncode == 0, done.stderr
    assert "endings left out" in done.stdout
    assert (out / "index.html").is_file() and (out / "r0/story/story-000.html").is_file()
    assert not (out / "r0/endings").exists()
    done = tension_run("view", runs.a, "--export", out, "--endings", env=runs.home)
    assert done.returncode == 0, done.stderr
    files = list((out / "r0/endings").iterdir())
    size = sum(f.stat().st_size for f in files)
    assert f"and 3 endings files ({size / 1e6:.1f} MB)" in done.stdout


def _endings_through_a_viewer(run, sid: str, k: int) -> dict:
    v = ViewHere(run)
    try:
        status, e = v.json(f"api/r0/endings/{sid}/{k}.json")
        assert status == 200
        return e
    finally:
        assert "Traceback" not in v.stop()


def test_the_view_finds_a_runs_endings_by_the_keys_positions_jsonl_names(runs, tmp_path):
    """Issue 24: a run whose settings no longer rebuild its requests (here its
    run.json says another temperature and continuation length, as a run made by an
    older prompt or request would) still shows its endings: positions.jsonl names
    the cache keys each position was scored from."""
    moved = tmp_path / "run-a"
    shutil.copytree(runs.a, moved)
    record = json.loads((moved / "run.json").read_text())
    record["config"]["temperature"] = 0.123
    record["config"]["continuation_words"] = 7
    (moved / "run.json").write_text(json.dumps(record))
    line = next(p for p in runs.positions(runs.a) if p["id"] == "story-001")
    assert line["endings_key"] and line["judged_key"]
    e = _endings_through_a_viewer(moved, "story-001", line["k"])
    assert e["cached"] is True and len(e["endings"]) == line["n_endings"]
    assert sum(x["verdict"] == "match" for x in e["endings"]) == line["n_match"]

    # a run written before the lines named their keys is read by rebuilding its
    # requests, as before; with the changed settings those miss, and the page says so
    (moved / "positions.jsonl").write_text("".join(
        json.dumps({k: v for k, v in p.items() if not k.endswith("_key")}) + "\n" for p in runs.positions(runs.a)))
    e = _endings_through_a_viewer(moved, "story-001", line["k"])
    assert e["cached"] is False and "not in the cache" in e["message"]


def test_an_old_run_without_keys_is_read_by_rebuilding_its_requests(runs, tmp_path):
    moved = tmp_path / "run-b"
    shutil.copytree(runs.b, moved)
    lines = runs.positions(runs.b)
    (moved / "positions.jsonl").write_text("".join(
        json.dumps({k: v for k, v in p.items() if not k.endswith("_key")}) + "\n" for p in lines))
    line = lines[0]
    e = _endings_through_a_viewer(moved, line["id"], line["k"])
    assert e["cached"] is True and len(e["endings"]) == line["n_endings"]
    assert sum(x["verdict"] == "match" for x in e["endings"]) == line["n_match"]
