"""`tension-run fairplay-metrics`: exact scores on a small hand-made READERS.jsonl,
the human-guess CSV, and clear errors for bad lines while the rest is computed."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.core.reports.fairplay_metrics import fairplay_metrics
from tension.core.reports.filenames import safe_filename

U4 = [0.25, 0.25, 0.25, 0.25]
SUSPECTS = ["Ada", "Ben", "Cal", "Dora"]

# "fair": gullible a 4-way tie at 1 (1/4 of a hit), hits at 5 -> S = 1 − 1.25/5 = 0.75;
# know-it-all at 2, 4, 5 hits all three -> C_UB = 1; FP_UB over the shared paragraphs
# 2, 4, 5 = (1 + 1 + 0)/3 = 2/3 >= 1/5.
FAIR = {
    "id": "fair", "group": "gen-A", "suspects": SUSPECTS, "culprit": "Cal", "distractor": "Ben",
    "revelation": 5, "L": 5,
    "readers": {
        "gullible": [U4, [0.1, 0.7, 0.1, 0.1], [0.1, 0.6, 0.2, 0.1], [0.1, 0.5, 0.3, 0.1], [0.0, 0.1, 0.9, 0.0]],
        "know_it_all": [None, [0.2, 0.2, 0.4, 0.2], None, [0, 0, 1, 0], [0, 0, 1, 0]],
    },
}
# "deus": the gullible reader is misled until 5 (S = 0.8); the know-it-all ties at 1
# (1/4) and only knows at 5 (C_UB = 0.25): FP_UB = 0.25/5 = 0.05 < 1/5 -> insufficient gap.
DEUS = {
    "id": "deus", "group": "gen-A", "suspects": SUSPECTS, "culprit": ["Ada"], "distractor": ["Ben"],
    "revelation": 5, "L": 5,
    "readers": {
        "gullible": [[0.1, 0.7, 0.1, 0.1]] * 4 + [[1, 0, 0, 0]],
        "know_it_all": [U4] + [[0.25, 0.5, 0.125, 0.125]] * 3 + [[1, 0, 0, 0]],
    },
}
# "plain": two suspects, no distractor, no revelation, L left out (the readers give it);
# everyone right at once: S = 0, C_UB = 1, FP_UB = 0 < 1/3. Probabilities given as
# counts (renormalised).
PLAIN = {
    "id": "plain", "group": "gen-B", "suspects": ["X", "Y"], "culprit": "Y",
    "readers": {"gullible": [[2, 3]] * 3, "know_it_all": [[0, 1]] * 3, "experienced": [[1, 1], [0, 1], None]},
}

# Human guesses for "fair": ¶1 Ada/Ben tie (the culprit out of it: 0), ¶2 Cal 2 of 3
# (hit), ¶3 Cal 2 of 3 with a lower-case name (hit), ¶4 nobody names anyone (null),
# ¶5 all Cal (hit): C_AR = 3/4; FP_AR over 1, 2, 3, 5 = (−1/4 + 1 + 1 + 0)/4 = 0.4375.
ACTUAL_ROWS = [
    ("fair", "r1", 1, "Ada"), ("fair", "r2", 1, "Ben"), ("fair", "r3", 1, "not sure"),
    ("fair", "r1", 2, "Cal"), ("fair", "r2", 2, "Cal"), ("fair", "r3", 2, "Ben"),
    ("fair", "r1", 3, "cal"), ("fair", "r2", 3, "Cal"), ("fair", "r3", 3, "Dora"),
    ("fair", "r1", 4, ""), ("fair", "r2", 4, "Not sure"),
    ("fair", "r1", 5, "Cal"), ("fair", "r2", 5, "Cal"), ("fair", "r3", 5, "Cal"),
]

HEADER = ("id,group,L,S,C_UB,FP_UB,C_ER,FP_ER,C_AR,FP_AR,insufficient_gap")


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def write_csv(path: Path, rows, header=("id", "reader", "paragraph", "guess")) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def read_stories(out: Path) -> dict[str, dict]:
    with (out / "stories.csv").open() as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def test_scores_by_hand_end_to_end(tmp_path, capsys):
    readers = write_jsonl(tmp_path / "readers.jsonl", [FAIR, DEUS, PLAIN])
    actual = write_csv(tmp_path / "guesses.csv", ACTUAL_ROWS)
    out = tmp_path / "out"
    rc = main(["fairplay-metrics", str(readers), "--out", str(out), "--actual", str(actual), "--no-progress",
               "--max-plots", "0"])
    assert rc == 0
    text = (out / "stories.csv").read_text().splitlines()
    assert text[0].startswith(HEADER + ",")
    assert text[1].startswith("fair,gen-A,5,0.75,1,0.6666666667,,,0.75,0.4375,0,")
    assert text[2].startswith("deus,gen-A,5,0.8,0.25,0.05,,,,,1,")
    # experienced on "plain": a 2-way tie at 1 (1/2), a hit at 2, null at 3:
    # C_ER = 0.75, FP_ER over 1 and 2 = (−1/2 + 0)/2 = −0.25
    assert text[3].startswith("plain,gen-B,3,0,1,0,0.75,-0.25,,,1,")
    rows = read_stories(out)
    assert rows["fair"]["steps_know_it_all"] == "3" and rows["fair"]["steps_actual"] == "4"
    assert rows["fair"]["steps_experienced"] == ""  # absent reader: empty, not 0
    assert rows["plain"]["renormalised"] == "4"  # [2, 3] x 3 and [1, 1]
    # early convergence of "fair": M*(1) unknown, M*(3) unknown, no paragraph 5? (L = 5: M*(5) = 1)
    assert (rows["fair"]["early_1"], rows["fair"]["early_3"], rows["fair"]["early_5"]) == ("", "", "1")
    assert (rows["deus"]["early_1"], rows["deus"]["early_3"]) == ("0", "0")
    table = capsys.readouterr().out
    assert "| gen-A | 2 | 0.775 [0.750, 0.800] | 0.625 [0.250, 1.000] | 0.358 [0.050, 0.667]" in table


def test_group_table_and_curves(tmp_path):
    readers = write_jsonl(tmp_path / "readers.jsonl", [FAIR, DEUS, PLAIN])
    out = tmp_path / "out"
    summary = fairplay_metrics(readers, out, max_plots=0)
    assert not (out / "plots").exists()  # max_plots=0: no figures at all
    assert summary.stories == 3 and summary.errors == [] and summary.out == out
    with (out / "groups.csv").open() as f:
        g = {(r["group"], r["statistic"]): r for r in csv.DictReader(f)}
    # gen-A: FP_UB = mean(2/3, 0.05), bootstrap of two values spans them
    assert float(g[("gen-A", "FP_UB")]["mean"]) == pytest.approx((2 / 3 + 0.05) / 2)
    assert g[("gen-A", "FP_UB")]["interval"] == "bootstrap"
    assert (g[("gen-A", "FP_UB")]["lo"], g[("gen-A", "FP_UB")]["hi"]) == ("0.05", "0.6666666667")
    ins = g[("gen-A", "insufficient_gap")]
    assert ins["mean"] == "0.5" and ins["interval"] == "clopper-pearson" and ins["n"] == "2"
    assert float(ins["lo"]) == pytest.approx(0.0125791, abs=1e-6)  # CP 95% for 1 of 2
    assert g[("gen-B", "C_AR")]["n"] == "0" and g[("gen-B", "C_AR")]["mean"] == ""
    with (out / "curves.csv").open() as f:
        curves = list(csv.DictReader(f))
    # pooled over all three stories at the last relative position (bin 25 = i/L = 1):
    # gullible hits in fair, deus, plain -> 3 of 3
    last = [r for r in curves if r["group"] == "(all)" and r["reader"] == "gullible" and r["bin"] == "25"][0]
    assert (last["n"], last["hits"], last["hit_rate"]) == ("3", "3", "1")
    assert float(last["cp_lo"]) == pytest.approx(0.025 ** (1 / 3))
    assert {r["group"] for r in curves} == {"(all)", "gen-A", "gen-B"}


def test_steps_and_distributions(tmp_path):
    readers = write_jsonl(tmp_path / "readers.jsonl", [FAIR, PLAIN])
    out = tmp_path / "out"
    fairplay_metrics(readers, out, max_plots=1)
    lines = [json.loads(x) for x in (out / "steps.jsonl").read_text().splitlines()]
    assert [(x["id"], x["reader"]) for x in lines] == [
        ("fair", "gullible"), ("fair", "know_it_all"),
        ("plain", "gullible"), ("plain", "experienced"), ("plain", "know_it_all")]
    g = lines[0]
    assert g["i"] == [1, 2, 3, 4, 5]
    assert g["U"][0] is None and g["U"][2] is None  # no M* at 1 and 3
    assert g["U"][1] == pytest.approx(-(0.8 * math.log(0.1) + 0.2 * math.log(0.7)))
    assert g["U"][4] == pytest.approx(-math.log(0.9))
    assert g["dcoh"][4] == pytest.approx(math.log(4) + math.log(0.9))
    assert "M1" in g["note"] and "M*" in g["note"]
    d = [json.loads(x) for x in (out / "distributions.jsonl").read_text().splitlines()]
    assert d[1]["readers"]["gullible"][0] == [0.4, 0.6]  # counts 2:3 renormalised
    assert d[1]["readers"]["experienced"][2] is None
    assert d[1]["distractor"] is None and d[0]["culprit"] == "Cal"
    assert (out / "plots" / "stories" / "fair.png").read_bytes()[:4] == b"\x89PNG"
    assert not (out / "plots" / "stories" / "plain.png").exists()  # max_plots=1
    # "(all)" is no safe file name: cleaned, with its hash (core/reports/filenames.py, issue 16)
    assert (out / "plots" / f"pooled_{safe_filename('(all)')}.png").exists()
    run = json.loads((out / "fairplay.json").read_text())
    assert run["settings"]["eps"] == 1e-6 and run["stories"] == 2


def bad(**changes):
    rec = json.loads(json.dumps(FAIR))
    rec["id"] = "bad"
    for k, v in changes.items():
        if v is None:
            rec.pop(k)
        else:
            rec[k] = v
    return rec


BAD_LINES = [
    ("{not json", None, "not valid JSON"),
    (json.dumps(bad(readers={"gullible": [[0.25, 0.25, 0.25, float("nan")]] * 5})),
     "readers.gullible[0][3]", "finite"),
    (json.dumps(bad(readers={"gullible": [[0.5, -0.1, 0.3, 0.3]] * 5})), "readers.gullible[0][1]", ">= 0"),
    (json.dumps(bad(readers={"gullible": [U4] * 4})), "readers.gullible", "expected 5 entries"),
    (json.dumps(bad(readers={"gullible": [U4, U4, [0.5, 0.5], U4, U4]})), "readers.gullible[2]",
     "paragraph 3: expected 4 probabilities"),
    (json.dumps(bad(L=None, readers={"gullible": [U4] * 5, "know_it_all": [U4] * 4})), "readers.know_it_all",
     "expected 5 entries like the first reader"),
    (json.dumps(bad(readers={"brilliant": [U4] * 5})), "readers.brilliant", "unknown reader"),
    (json.dumps(bad(culprit="Eve")), "culprit", "one of the suspects"),
    (json.dumps(bad(culprit=["Cal", "Ada"])), "culprit", "one-element list"),
    (json.dumps(bad(distractor="Cal")), "distractor", "is the culprit"),
    (json.dumps(bad(revelation=6)), "revelation", "1..5"),
    (json.dumps(bad(L=0)), "L", "at least 1"),
    (json.dumps(bad(suspects=["Ada"], culprit="Ada", distractor=None)), "suspects", "at least 2"),
    (json.dumps(bad(suspects=["Ada", "Ben", "ada", "Dora"])), "suspects[2]", "duplicate"),
    (json.dumps(bad(suspects=None)), "suspects", "missing required field"),
    (json.dumps(bad(L="five")), "L", "Expected `int"),
    (json.dumps(dict(FAIR)), "id", "duplicate id 'fair'"),
]


@pytest.mark.parametrize("line, field, message", BAD_LINES, ids=[f"bad{i}" for i in range(len(BAD_LINES))])
def test_bad_line_is_named_and_the_rest_computed(tmp_path, capsys, line, field, message):
    readers = write_jsonl(tmp_path / "readers.jsonl", [FAIR, line, PLAIN])
    out = tmp_path / "out"
    rc = main(["fairplay-metrics", str(readers), "--out", str(out), "--no-progress", "--max-plots", "0"])
    assert rc == 1
    err = capsys.readouterr().err
    where = f"readers.jsonl:2 field `{field}`" if field else "readers.jsonl:2:"
    assert where in err and message in err, err
    assert list(read_stories(out)) == ["fair", "plain"]


def test_bad_guesses_are_named_and_the_good_ones_kept(tmp_path, capsys):
    readers = write_jsonl(tmp_path / "readers.jsonl", [FAIR, PLAIN])
    rows = ACTUAL_ROWS + [("fair", "r4", 2, "Eve"), ("nobody", "r1", 1, "Ada"), ("fair", "r1", 9, "Ada"),
                          ("fair", "r1", "two", "Ada"), ("fair", "r1", 1, "Cal")]
    actual = write_csv(tmp_path / "guesses.csv", rows)
    out = tmp_path / "out"
    rc = main(["fairplay-metrics", str(readers), "--out", str(out), "--actual", str(actual), "--no-progress",
               "--max-plots", "0"])
    assert rc == 1
    err = capsys.readouterr().err
    n = len(ACTUAL_ROWS) + 1  # header on line 1
    assert f"guesses.csv:{n + 1} field `guess`: expected one of the suspects" in err
    assert f"guesses.csv:{n + 2} field `id`: no story 'nobody'" in err
    assert f"guesses.csv:{n + 3} field `paragraph`: expected a paragraph in 1..5, got 9" in err
    assert f"guesses.csv:{n + 4} field `paragraph`: expected a paragraph number" in err
    assert f"guesses.csv:{n + 5} field `reader`: reader 'r1' already guessed paragraph 1" in err
    assert read_stories(out)["fair"]["C_AR"] == "0.75"


def test_csv_without_the_columns_fails_alone(tmp_path, capsys):
    readers = write_jsonl(tmp_path / "readers.jsonl", [FAIR])
    actual = write_csv(tmp_path / "guesses.csv", [("fair", 1, "Cal")], header=("id", "paragraph", "guess"))
    rc = main(["fairplay-metrics", str(readers), "--out", str(tmp_path / "out"), "--actual", str(actual),
               "--no-progress", "--max-plots", "0"])
    assert rc == 1
    assert "guesses.csv:1 field `reader`: missing column" in capsys.readouterr().err
    assert read_stories(tmp_path / "out")["fair"]["S"] == "0.75"


@pytest.mark.parametrize("flag, value", [("--eps", "0"), ("--bins", "0"), ("--early-steps", "1,2.5"),
                                         ("--eps-surprise", "nan")])
def test_bad_flags_exit_2(tmp_path, capsys, flag, value):
    readers = write_jsonl(tmp_path / "readers.jsonl", [FAIR])
    rc = main(["fairplay-metrics", str(readers), "--out", str(tmp_path / "out"), flag, value])
    assert rc == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_file_exits_1(tmp_path, capsys):
    rc = main(["fairplay-metrics", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "out")])
    assert rc == 1
    assert "nope.jsonl: cannot open" in capsys.readouterr().err


def test_plots_of_stories_with_nothing_to_draw(tmp_path):
    # every value a parse failure, and a story with no reader at all: the plots are
    # drawn (axes, uniform line) without a legend and without a warning
    empty = {"id": "empty", "suspects": ["X", "Y"], "culprit": "X", "L": 3, "readers": {"gullible": [None] * 3}}
    none = {"id": "none", "suspects": ["X", "Y"], "culprit": "X", "L": 2}
    readers = write_jsonl(tmp_path / "readers.jsonl", [empty, none])
    summary = fairplay_metrics(readers, tmp_path / "out", max_plots=5)
    assert summary.errors == [] and summary.plots == 3  # two stories, one pooled figure
    assert (tmp_path / "out" / "plots" / "stories" / "empty.png").read_bytes()[:4] == b"\x89PNG"
    rows = read_stories(tmp_path / "out")
    assert rows["empty"]["S"] == "" and rows["empty"]["steps_gullible"] == "0"


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("doc, start, end", [
    ("docs/fairplay.md", "<!-- metrics section (issue 9a) -->", "<!-- end metrics section"),
    ("README.md", "<!-- fairplay metrics (issue 9a) -->", "<!-- end fairplay metrics"),
])
def test_docs_name_only_real_flags(doc, start, end):
    import re

    from tension.core.cli import build_parser

    section = (ROOT / doc).read_text().split(start)[1].split(end)[0]
    sub = build_parser()._subparsers._group_actions[0].choices["fairplay-metrics"]
    known = {o for a in sub._actions for o in a.option_strings}
    named = set(re.findall(r"(--[a-z][a-z-]+)", section))
    assert named and named <= known, named - known


def test_the_readme_example_runs(tmp_path, capsys):
    ex = ROOT / "examples"
    rc = main(["fairplay-metrics", str(ex / "fairplay_readers.jsonl"), "--actual", str(ex / "fairplay_guesses.csv"),
               "--out", str(tmp_path / "out"), "--max-plots", "0", "--resamples", "200"])
    assert rc == 0, capsys.readouterr().err
    rows = read_stories(tmp_path / "out")
    # the synthetic "deus" stories lack an intelligence gap far more often than the "fair" ones
    fair = [r for r in rows.values() if r["group"] == "fair"]
    deus = [r for r in rows.values() if r["group"] == "deus"]
    assert sum(r["insufficient_gap"] == "1" for r in deus) > sum(r["insufficient_gap"] == "1" for r in fair)
    assert all(r["C_AR"] for r in fair[:3]) and not any(r["C_AR"] for r in fair[3:])


@pytest.mark.parametrize("module", ["tension.core.reports.fairplay_metrics", "tension.core.reports.fairplay_figures",
                                    "tension.kernels.fairplay"])
def test_exported_members(module):
    import importlib

    mod = importlib.import_module(module)
    for name in mod.__all__:
        assert hasattr(mod, name), name
    public = {n for n, v in vars(mod).items() if not n.startswith("_") and getattr(v, "__module__", None) == module}
    assert public <= set(mod.__all__), public - set(mod.__all__)


def test_a_fairplay_run_folder_is_read(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "readers.jsonl", [FAIR])
    summary = fairplay_metrics(run, tmp_path / "out", max_plots=0)
    assert summary.stories == 1 and read_stories(tmp_path / "out")["fair"]["FP_UB"] == "0.6666666667"


def test_empty_rows_are_missing_and_all_zero_rows_a_tie(tmp_path, capsys):
    # gullible: [] at 1 (missing), all zeros at 2 (a 4-way tie: 1/4), a hit at 3;
    # the story is scored, not rejected, and both are counted and warned about
    rec = {"id": "gaps", "suspects": SUSPECTS, "culprit": "Cal",
           "readers": {"gullible": [[], [0, 0, 0, 0], [0, 0, 1, 0]], "know_it_all": [None, U4, [0, 0, 1, 0]]}}
    readers = write_jsonl(tmp_path / "readers.jsonl", [rec])
    rc = main(["fairplay-metrics", str(readers), "--out", str(tmp_path / "out"), "--no-progress", "--max-plots", "0"])
    assert rc == 0
    r = read_stories(tmp_path / "out")["gaps"]
    assert r["L"] == "3" and r["steps_gullible"] == "2" and (r["empty_rows"], r["zero_rows"]) == ("1", "1")
    assert float(r["S"]) == pytest.approx(1 - 1.25 / 2)
    assert float(r["FP_UB"]) == 0.0  # paragraphs 2 and 3: 1/4 − 1/4, 1 − 1
    err = capsys.readouterr().err
    assert "gaps: 1 empty reader value(s) ([]), counted as missing" in err
    assert "gaps: 1 all-zero reader value(s), read as a tie of every suspect" in err
    rc = main(["fairplay-metrics", str(readers), "--out", str(tmp_path / "miss"), "--ties", "miss", "--no-progress",
               "--max-plots", "0"])
    assert rc == 0 and float(read_stories(tmp_path / "miss")["gaps"]["S"]) == 0.5


@pytest.mark.parametrize("content", [b"", b"\n\n", b'{"id": "x"}\n', b"not json\n"])
def test_readers_of_no_readable_story_fail_and_keep_the_earlier_outputs(tmp_path, capsys, content):
    # an empty readers file was a warning, exit 0, and wrote empty tables over --out's earlier ones
    out = tmp_path / "out"
    ex = ROOT / "examples"
    assert main(["fairplay-metrics", str(ex / "fairplay_readers.jsonl"), "--out", str(out), "--no-progress",
                 "--max-plots", "0"]) == 0
    kept = {f.name: f.read_bytes() for f in out.iterdir() if f.is_file()}
    bad = tmp_path / "readers.jsonl"
    bad.write_bytes(content)
    capsys.readouterr()
    assert main(["fairplay-metrics", str(bad), "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert {f.name: f.read_bytes() for f in out.iterdir() if f.is_file()} == kept
    assert f"error: {bad}" in err and err.endswith(f"nothing written to {out}: no story could be read\n")
