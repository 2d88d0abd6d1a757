"""Input files and paths on hostile ground (review 2026-12-01, 6c, 6e, 6g, 6h, 2e,
2h, 11d; issue 25 finding 11): control characters in ids and groups, a JSON array
for a corpus, an empty file, `~` in path settings, a cache given as its data.mdb,
CJK ids in figures, and a hand-edited positions.jsonl.

Every command runs in this process (`tension_run`): the subject is what it says,
writes and exits with. The CJK figures' warnings, which the console script would
print on stderr, are recorded and told with its stderr."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from tension.core.errors import InputError
from tension.core.inputs.corpus import read_corpus
from tension.core.inputs.ideas import read_ideas
from tension.core.reports.metrics import read_curves, read_run_positions
from tension.testing.corpus import make_corpus, write_story


def _score(server, tmp_path, corpus: Path, *extra: str) -> list[str]:
    return ["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", server.base_url, "--model",
            "test-gen", "--endings", "2", "--cache", str(tmp_path / "cache"), "--no-progress", *extra]


# --- 6c: control characters in ids and groups, in every file that names stories ----------


CONTROLS = ["\x00", "\x07", "\n", "\x1b", "\x7f", "\x85", "\u2028"]


def _good(rng_seed: int = 1) -> dict:
    import random

    return {"id": "good", "text": write_story(random.Random(rng_seed), 600)}


@pytest.mark.parametrize("ch", CONTROLS)
@pytest.mark.parametrize("field", ["id", "group"])
def test_a_control_character_in_any_id_or_group_is_refused_with_file_line_and_field(tmp_path, ch, field):
    bad = {**_good(2), "id": "bad", field: f"a{ch}b"}
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps(_good()) + "\n" + json.dumps(bad) + "\n")
    want = f"{corpus}:2 field `{field}`: holds a control character (U+{ord(ch):04X} at character 2)"
    got = read_corpus(corpus, min_words=0)
    assert [s.id for s in got.stories] == ["good"] and [str(e) for e in got.errors][0].startswith(want)
    # the ideas of generate, the curves of metrics, the readers of fairplay-metrics: the same rule
    ideas = tmp_path / "ideas.jsonl"
    ideas.write_text(json.dumps({"id": "i", "idea": "x"}) + "\n"
                     + json.dumps({"id": "j", "idea": "y", field: f"a{ch}b"}) + "\n")
    _, errors = read_ideas(ideas)
    assert str(errors[0]).startswith(f"{ideas}:2 field `{field}`: holds a control character")
    curves = tmp_path / "curves.jsonl"
    curves.write_text(json.dumps({"id": "c", "x": [0.1], "y": [0.5], field: f"a{ch}b"}) + "\n")
    _, errors = read_curves(curves)
    assert str(errors[0]).startswith(f"{curves}:1 field `{field}`: holds a control character")
    run = tmp_path / "run"
    run.mkdir()
    (run / "positions.jsonl").write_text(json.dumps({"id": "s", "k": 1, "pct": 0.5, "no_rate": 0.5, field: f"a{ch}b"})
                                         + "\n")
    _, errors = read_run_positions(run)
    assert str(errors[0]).startswith(f"{run / 'positions.jsonl'}:1 field `{field}`: holds a control character")
    from tension.core.inputs.readers import ReaderRecord, check_record

    with pytest.raises(InputError, match=rf"r.jsonl:3 field `{field}`: holds a control character"):
        check_record("r.jsonl", 3, ReaderRecord(id="x" if field == "group" else f"a{ch}b", suspects=["A", "B"],
                                                culprit="A", readers={}, **({"group": f"a{ch}b"}
                                                                           if field == "group" else {})))


@pytest.mark.in_process
def test_a_nul_in_an_id_never_reaches_stories_csv(server, tmp_path, tension_run):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    lines = corpus.read_text().splitlines()
    rec = json.loads(lines[1])
    rec["id"] = "nul\x00id"
    corpus.write_text(lines[0] + "\n" + json.dumps(rec) + "\n")
    r = tension_run(*_score(server, tmp_path, corpus))
    assert r.returncode == 1 and f"{corpus}:2 field `id`: holds a control character (U+0000 at character 4)" in r.stderr
    for f in (tmp_path / "out").iterdir():
        if f.is_file():
            assert b"\x00" not in f.read_bytes(), f


# --- 6g, 6h: a JSON array, an empty file ---------------------------------------


@pytest.mark.parametrize("layout", ["pretty", "one line"])
@pytest.mark.in_process
def test_a_json_array_corpus_is_one_message_not_one_per_line(server, tmp_path, tension_run, layout):
    stories = [json.loads(x) for x in make_corpus(tmp_path / "src.jsonl", 3, seed=4).read_text().splitlines()]
    array = tmp_path / "array.json"
    array.write_text(json.dumps(stories, indent=2 if layout == "pretty" else None) + "\n")
    r = tension_run(*_score(server, tmp_path, array))
    assert r.returncode == 1
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {array}:1: a JSON array; the corpus is JSON Lines, one object per line "
                      "(convert with jq -c '.[]')"], r.stderr
    assert "stories failed" not in r.stderr


def test_a_jsonl_file_with_an_array_line_still_names_that_line(tmp_path):
    # one array line among objects is a bad line, not a JSON-array file
    good = make_corpus(tmp_path / "src.jsonl", 1, seed=4).read_text()
    p = tmp_path / "c.jsonl"
    p.write_text('["story-x", "some text"]\n' + good)
    got = read_corpus(p, min_words=0)
    assert len(got.stories) == 1 and str(got.errors[0]) == f"{p}:1: Expected `object`, got `array`"


@pytest.mark.parametrize("content", [b"", b"\n  \n"])
@pytest.mark.in_process
def test_an_empty_corpus_says_so_once(server, tmp_path, tension_run, content):
    p = tmp_path / "empty.jsonl"
    p.write_bytes(content)
    r = tension_run(*_score(server, tmp_path, p))
    assert r.returncode == 1 and f"error: {p}: no stories (the file is empty)" in r.stderr
    assert "stories failed" not in r.stderr and "no story to score" not in r.stderr


# --- 2h, 2e: `~` in path settings, a cache given as its data.mdb ------------------------


@pytest.mark.in_process
def test_tilde_in_a_config_files_cache_and_a_cache_flag_is_the_home_folder(server, tmp_path, tension_run, monkeypatch):
    home = Path(os.environ["HOME"])
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=5)
    cfg = tmp_path / "cfg.toml"
    cfg.write_text('cache = "~/tr-cache"\n')
    monkeypatch.chdir(tmp_path)
    argv = ["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", server.base_url, "--model",
            "test-gen", "--endings", "2", "--no-progress", "--config", str(cfg)]
    r = tension_run(*argv)
    assert r.returncode == 0, r.stderr
    assert (home / "tr-cache" / "data.mdb").is_file() and not (tmp_path / "~").exists()
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["config"]["cache"] == str(home / "tr-cache")
    # the same from a flag given as --cache=~/… (no shell expands that)
    r = tension_run("score", str(corpus), "--out", str(tmp_path / "out2"), "--base-url", server.base_url,
                    "--model", "test-gen", "--endings", "2", "--no-progress", "--cache=~/tr-cache2")
    assert r.returncode == 0, r.stderr
    assert (home / "tr-cache2" / "data.mdb").is_file() and not (tmp_path / "~").exists()


@pytest.mark.parametrize("verb", ["score", "generate", "fairplay"])
@pytest.mark.in_process
def test_a_cache_given_as_its_data_mdb_file_says_give_the_folder(server, tmp_path, tension_run, verb):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "data.mdb").write_bytes(b"\0" * 4096)
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=5)
    argv = {"score": ["score", str(corpus), "--out", str(tmp_path / "out")],
            "generate": ["generate", str(corpus), "--out", str(tmp_path / "s.jsonl")],
            "fairplay": ["fairplay", str(corpus), "--out", str(tmp_path / "fp")]}[verb]
    r = tension_run(*argv, "--base-url", server.base_url, "--cache", str(cache / "data.mdb"))
    assert r.returncode == 2 and f"give the folder that holds data.mdb ({cache})" in r.stderr, r.stderr
    assert "Not a directory" not in r.stderr and not server.requests


# --- 6e: CJK ids and groups in figures --------------------------------------------------


# the categories Python's default warning filters do not show (a process started without -W)
QUIET = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


@pytest.mark.in_process
def test_cjk_ids_and_groups_draw_without_glyph_warnings(server, tmp_path, tension_run):
    import random

    rng = random.Random(8)
    corpus = tmp_path / "cjk.jsonl"
    corpus.write_text("".join(json.dumps({"id": sid, "group": "日本の物語", "text": write_story(rng, 600)}) + "\n"
                              for sid in ("日本-1", "物語-2")))
    # In process a warning is not printed on stderr as the console script prints it (pytest
    # takes it, as an error): every warning is recorded instead, to be told as stderr would.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = tension_run("score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", server.base_url,
                        "--model", "test-gen", "--endings", "2", "--cache", str(tmp_path / "cache"), "--no-progress")
    said = r.stderr + "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in caught
                              if not issubclass(w.category, QUIET))
    assert r.returncode == 0, said
    assert list((tmp_path / "out" / "figures" / "curves").iterdir())  # the curves were drawn
    assert "Glyph" not in said and "UserWarning" not in said, said


# --- 11d: metrics on a hand-edited positions.jsonl: one rule ----------------------------


EDITS = {"NaN": "NaN", "Infinity": "Infinity", "null": "null", '"0.5"': '"0.5"', "1e309": "1e309", "1.5": "1.5",
         "-0.1": "-0.1"}


@pytest.mark.parametrize("value", list(EDITS))
def test_a_hand_edited_no_rate_drops_its_line_with_its_number_whatever_the_fault(tmp_path, tension_run, value):
    run = tmp_path / "run"
    run.mkdir()
    lines = [json.dumps({"id": sid, "group": "g", "k": k, "pct": k / 10, "no_rate": 0.5})
             for sid in ("s1", "s2") for k in range(1, 6)]
    lines[3] = lines[3].replace('"no_rate": 0.5', f'"no_rate": {EDITS[value]}')  # line 4: s1, k = 4
    (run / "positions.jsonl").write_text("\n".join(lines) + "\n")
    curves, errors = read_run_positions(run)
    assert [str(e).split(": ", 1)[0] for e in errors] in ([f"{run / 'positions.jsonl'}:4 field `no_rate`"],
                                                          [f"{run / 'positions.jsonl'}:4"]), errors
    assert str(errors[0]).endswith("(line left out)")
    assert {c.id: len(c.x) for c in curves} == {"s1": 4, "s2": 5}  # the story is kept, without that line
    r = tension_run("metrics", str(run), "--out", str(tmp_path / "m"))
    assert r.returncode == 1 and f"{run / 'positions.jsonl'}:4" in r.stderr
    assert (tmp_path / "m" / "stories.csv").read_text().count("\n") == 3  # header, s1, s2


@pytest.mark.parametrize("verb", ["report", "compare"])
def test_report_and_compare_of_a_hand_edited_positions_file_say_they_wrote_nothing(tmp_path, tension_run, verb):
    """`report` and `compare` read every line of a run's positions.jsonl: one bad line stops
    them, exit 1, nothing written. They said so with metrics' words, `… got 1.5 (line left
    out)`, as if the line had been left out and the work done; and named the first bad line
    only. Now they name every bad line and what to do; the advice (metrics leaves bad lines
    out), run as printed, computes the run without them."""
    run = tmp_path / "run"
    run.mkdir()
    lines = [json.dumps({"id": sid, "group": "g", "k": k, "pct": k / 10, "no_rate": 0.5})
             for sid in ("s1", "s2") for k in range(1, 6)]
    lines[3] = lines[3].replace('"no_rate": 0.5', '"no_rate": 1.5')
    lines[7] = lines[7].replace('"no_rate": 0.5', '"no_rate": NaN')
    (run / "positions.jsonl").write_text("\n".join(lines) + "\n")
    argv = ["report", str(run)] if verb == "report" else ["compare", str(run), str(run), "--out", str(tmp_path / "c")]
    r = tension_run(*argv, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "line left out" not in r.stderr, r.stderr
    assert f"{run / 'positions.jsonl'}:4 field `no_rate`: expected a no-rate in [0, 1], got 1.5" in r.stderr
    assert f"{run / 'positions.jsonl'}:8" in r.stderr
    assert not (run / "report.md").exists() and not (tmp_path / "c").exists()
    advice = "nothing written: report and compare read every line of positions.jsonl; correct or remove the 2 bad " \
             "line(s) above (`tension-run metrics "
    assert advice in r.stderr, r.stderr
    command = r.stderr.split("(`", 1)[1].split("`", 1)[0]
    assert command == f"tension-run metrics {run} --out {run}-metrics"
    again = tension_run(*command.split()[1:], cwd=tmp_path)
    assert again.returncode == 1 and (tmp_path / "run-metrics" / "stories.csv").is_file()  # exit 1: lines left out


def test_a_pct_that_does_not_increase_drops_its_line_with_its_number(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"id": "s1", "k": k, "pct": p, "no_rate": 0.5} for k, p in ((1, 0.1), (2, 0.3), (3, 0.2), (4, 0.4))]
    (run / "positions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curves, errors = read_run_positions(run)
    assert str(errors[0]).startswith(f"{run / 'positions.jsonl'}:3 field `pct`: expected the story's pct to increase")
    assert curves[0].x == [0.1, 0.3, 0.4]
