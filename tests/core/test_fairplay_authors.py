"""`fairplay-metrics --from authors`: the fair-play authors' result files (their
format, written here by hand: one JSON per story named by its command line, the
experienced readers in with_prev/) give the scores their analysis gives —
split ties, short rows as ties, their story filter, 20 samples before 5."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.core.inputs.authors import file_params, read_authors, story_key

IDS = [1, 3, 5, 7, 9, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25]
SUSPECTS = ["Ann", "Bo", "Cy", "Di"]
CULPRIT = [0.0, 0.9, 0.1, 0.0]  # Bo (index 1)
DISTRACTOR = [0.0, 0.0, 1.0, 0.0]  # Cy
HIT = [0.1, 0.7, 0.1, 0.1]
MISS = [0.1, 0.1, 0.7, 0.1]
TIE2 = [0.4, 0.4, 0.2, 0.0]  # Bo tied with Ann: half a hit
TIE4 = [0.25, 0.25, 0.25, 0.25]  # a quarter
ONE = [0.0, 1.0, 0.0, 0.0]


def name(model: str, sid: int, tail: str = "-es -tc -nsamp 20") -> str:
    return f"-mn {model} -mn2 o3-mini -st {model} -ld -mt llama -mt2 openai -np 25 --id {sid} {tail}.json"


def result(gullible, sampling, **kw) -> dict:
    return {"paragraphs": [f"paragraph {i}" for i in range(1, 26)], "ids": IDS,
            "direct": {"0": [HIT] * 19, "1": gullible, "2": [HIT] * 19}, "sampling": sampling,
            "predict": {"0": [], "1": [], "2": []}, "suspects": SUSPECTS, "real_probs": CULPRIT,
            "distractor_probs": DISTRACTOR, "para_fill": [], **kw}


def write(folder: Path, filename: str, data) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / filename).write_text(json.dumps(data) if not isinstance(data, str) else data)
    return folder / filename


# Story "M 0": gullible rows: 4-way tie, 2-way tie with the culprit, a row of 3
# values (a tie for their code), then misses and a final hit; know-it-all: an
# all-zero row (no continuation named anyone: a tie), 2-way tie, then hits.
G0 = [TIE4, TIE2, [0.5, 0.5, 0.0]] + [MISS] * 15 + [ONE]
K0 = [[0.0, 0.0, 0.0, 0.0], TIE2] + [HIT] * 16 + [ONE]
S0 = 1 - (0.25 + 0.5 + 0.25 + 1) / 19  # the 3-value row is a 4-way tie too
C0 = (0.25 + 0.5 + 17) / 19


@pytest.fixture
def results(tmp_path) -> Path:
    d = tmp_path / "for eval2"
    write(d, name("M", 0), result(G0, K0))
    # the same story with 5 samples: their analysis uses the 20-sample file
    write(d, name("M", 0, "-es -tc"), result([ONE] * 19, [ONE] * 19))
    # left out by their filter: the know-it-all ends below 0.7 on the culprit
    write(d, name("M", 1), result([HIT] * 19, [HIT] * 18 + [[0.0, 0.6, 0.4, 0.0]]))
    # experienced readers of story 0: -es2 (0, 9, 3 previous stories), -es3 (0 alt, 2, 5)
    prev = {"ids": IDS, "suspects": SUSPECTS, "real_probs": CULPRIT, "sampling": K0,
            "direct": {"0": [MISS] * 19, "1": [HIT] * 19, "2": [TIE2] * 19}}
    write(d / "with_prev", "-mn M -mn2 g3 -st M -ld -mt gemini -mt2 gemini -np 25 --id 0 -es2 -ns.json", prev)
    write(d / "with_prev", "-mn M -mn2 g3 -st M -ld -mt gemini -mt2 gemini -np 25 --id 0 -es3 -ns.json",
          {**prev, "direct": {"0": [TIE4] * 19, "1": [], "2": [HIT] * 19}})
    return d


def stories(out: Path) -> dict[str, dict]:
    with (out / "stories.csv").open() as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def test_their_files_give_their_scores(results, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["fairplay-metrics", str(results), "--from", "authors", "--out", str(out), "--max-plots", "0",
                 "--no-progress", "--resamples", "100"]) == 0
    printed = capsys.readouterr()
    rows = stories(out)
    assert list(rows) == ["M 0"]  # story 1 left out, the 5-sample copy of story 0 skipped
    r = rows["M 0"]
    assert r["group"] == "M" and r["L"] == "25" and r["steps_gullible"] == "19" and r["steps_know_it_all"] == "19"
    assert float(r["S"]) == pytest.approx(S0)
    assert float(r["C_UB"]) == pytest.approx(C0)
    assert float(r["FP_UB"]) == pytest.approx(C0 - (1 - S0))
    assert r["insufficient_gap"] == "0" and r["zero_rows"] == "2"  # the all-zero and the 3-value row
    # early convergence at paragraphs 1, 3, 5: the raw know-it-all culprit share > 0.5
    assert (r["early_1"], r["early_3"], r["early_5"]) == ("0", "0", "1")
    # experienced readers by setting: miss, hit, half; quarter, (2 prev: empty in the file), hit
    assert float(r["C_ER_0"]) == 0.0 and float(r["C_ER_9"]) == 1.0 and float(r["C_ER_3"]) == 0.5
    assert float(r["C_ER_0alt"]) == 0.25 and float(r["C_ER_5"]) == 1.0 and "C_ER_2" not in r
    assert float(r["FP_ER_9"]) == pytest.approx(1 - (1 - S0))
    assert "left out, as in the authors' analysis" in printed.err and "20 samples" in printed.err
    run = json.loads((out / "fairplay.json").read_text())
    assert run["from"] == "authors" and run["settings"]["ties"] == "split"


def test_ties_as_misses(results, tmp_path):
    out = tmp_path / "out"
    assert main(["fairplay-metrics", str(results), "--from", "authors", "--ties", "miss", "--out", str(out),
                 "--max-plots", "0", "--no-progress", "--resamples", "100"]) == 0
    r = stories(out)["M 0"]
    assert float(r["S"]) == pytest.approx(1 - 1 / 19)
    assert float(r["C_UB"]) == pytest.approx(17 / 19)
    assert float(r["C_ER_3"]) == 0.0 and float(r["C_ER_0alt"]) == 0.0


def test_a_bad_file_is_named_and_the_rest_computed(results, tmp_path, capsys):
    write(results, name("M", 2), {**result([HIT] * 19, [ONE] * 19), "ids": "1,3,5"})
    write(results, name("M", 3), {**result([HIT] * 18, [ONE] * 19)})
    write(results, name("M", 4), "{not json")
    out = tmp_path / "out"
    assert main(["fairplay-metrics", str(results), "--from", "authors", "--out", str(out), "--max-plots", "0",
                 "--no-progress", "--resamples", "100"]) == 1
    err = capsys.readouterr().err
    assert "--id 2 -es -tc -nsamp 20.json field `ids`: expected a list of paragraph numbers" in err
    assert '--id 3 -es -tc -nsamp 20.json field `direct["1"]`: expected 19 rows (one per id), got 18' in err
    assert "--id 4 -es -tc -nsamp 20.json: unreadable result file" in err
    assert "Traceback" not in err
    assert list(stories(out)) == ["M 0"]


def test_not_a_folder(tmp_path, capsys):
    assert main(["fairplay-metrics", str(tmp_path / "nope"), "--from", "authors", "--out",
                 str(tmp_path / "out")]) == 1
    assert "expected the folder of the authors' result files" in capsys.readouterr().err


def test_file_names_are_read_as_their_analysis_reads_them():
    p = file_params("-mn gemini-2.5-flash -tb -1 -mn2 o3-mini -st gemini-2.5-flash -ld -np 25 --id 4 -es -tc.json")
    assert p["tb"] == "-1" and p["id"] == "4" and p["es"] is True and p["ld"] is True
    assert story_key(p) == ("gemini-2.5-flash-tb-1", "gemini-2.5-flash", "4")
    real = story_key(file_params("-mn gemini-1.5-flash -mn2 o1-mini -st poirot --id 3 -ld -es -tc.json"))
    assert real == ("gemini-1.5-flash", "poirot", "3")


def test_without_paragraphs_L_is_the_last_id(tmp_path):
    data = result([HIT] * 19, [ONE] * 19)
    del data["paragraphs"]
    write(tmp_path, name("M", 0), data)
    got = read_authors(tmp_path)
    assert got.errors == [] and [s.L for s in got.stories] == [25]
    assert got.stories[0].group == "M" and got.stories[0].suspects[got.stories[0].distractor] == "Cy"
