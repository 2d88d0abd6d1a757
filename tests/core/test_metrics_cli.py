"""`tension-run metrics`: exact outputs on a small file, errors on bad ones."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tension.core.cli import main

ROOT = Path(__file__).resolve().parents[2]

SMALL = [
    {"id": "s1", "group": "A", "x": [0.1, 0.3, 0.5, 0.7, 0.9], "y": [0.5, 0.9, 0.3, 0.6, 0.4]},
    {"id": "s2", "group": "A", "x": [0.2, 0.5, 0.85], "y": [0.5, 0.5, 0.5]},
    {"id": "s3", "group": "B", "x": [0.4], "y": [0.7], "extra": "ignored"},
]

# Worked by hand with --window 1 (no smoothing):
# s1: mean (0.5+0.9+0.3+0.6+0.4)/5 = 0.54; late = y at x=0.9 = 0.4.
#     raw peaks at j=1 (low of the next ten 0.3 -> 1/3) and j=3 (low 0.4 -> 2/3):
#     retain 100·mean(1/3, 2/3) = 50, convergence 100·mean(-2/3, -1/3) = -50.
#     Unit square X = [0, .25, .5, .75, 1], Y = (y-0.3)/0.6; reversals at j=1,2,3
#     with angles 34.6°, 40.6°, 63.4° -> IR30 = 0/5, IR60 = 2/5, IR120 = 3/5.
# s2: flat: no peak (NaN), no reversal (IR 0).
# s3: one position: only the mean is defined.
# The curves carry no verdict counts, so the interval columns (issue 27, appended
# after nan_reasons) are empty, and so are the comparable statistics and their
# intervals (issue 57, appended after them: they need each position's counts).
NO_INTERVALS = "," * 14 + "," * 15
STORIES_CSV = f"""\
id,group,n_positions,mean_nr,late_nr,retain,convergence,ir30,ir60,ir120,nan_reasons,\
mean_nr_lo,mean_nr_hi,late_nr_lo,late_nr_hi,retain_lo,retain_hi,convergence_lo,convergence_hi,\
ir30_lo,ir30_hi,ir60_lo,ir60_hi,ir120_lo,ir120_hi,\
retain_comparable,convergence_comparable,ir30_comparable,ir60_comparable,ir120_comparable,\
retain_comparable_lo,retain_comparable_hi,convergence_comparable_lo,convergence_comparable_hi,\
ir30_comparable_lo,ir30_comparable_hi,ir60_comparable_lo,ir60_comparable_hi,ir120_comparable_lo,ir120_comparable_hi
s1,A,5,0.54,0.4,50,-50,0,0.4,0.6,{NO_INTERVALS}
s2,A,3,0.5,0.5,,,0,0,0,no peak (retain/convergence undefined){NO_INTERVALS}
s3,B,1,0.7,,,,,,,fewer than 3 positions (no inflection rate); no late position (late NR undefined); no peak \
(retain/convergence undefined){NO_INTERVALS}
"""

# Group A mean_nr: mean(0.54, 0.5) = 0.52, sd = 0.02·√2 = 0.02828427125,
# ci95 = 1.96·sd/√2 = 0.0392. late_nr: mean(0.4, 0.5) = 0.45, same sd.
# Bootstrap of two values a < b: resampled means are a (p=1/4), (a+b)/2, b (p=1/4),
# so with 10,000 resamples the 2.5th/97.5th percentiles are a and b.
GROUPS_CSV = """\
group,statistic,mean,sd,ci95,boot_lo,boot_hi,n,n_nan
A,mean_nr,0.52,0.02828427125,0.0392,0.5,0.54,2,0
A,late_nr,0.45,0.07071067812,0.098,0.4,0.5,2,0
A,retain,50,,,,,1,1
A,convergence,-50,,,,,1,1
A,ir30,0,0,0,0,0,2,0
A,ir60,0.2,0.2828427125,0.392,0,0.4,2,0
A,ir120,0.3,0.4242640687,0.588,0,0.6,2,0
A,retain_comparable,,,,,,0,2
A,convergence_comparable,,,,,,0,2
A,ir30_comparable,,,,,,0,2
A,ir60_comparable,,,,,,0,2
A,ir120_comparable,,,,,,0,2
B,mean_nr,0.7,,,,,1,0
B,late_nr,,,,,,0,1
B,retain,,,,,,0,1
B,convergence,,,,,,0,1
B,ir30,,,,,,0,1
B,ir60,,,,,,0,1
B,ir120,,,,,,0,1
B,retain_comparable,,,,,,0,1
B,convergence_comparable,,,,,,0,1
B,ir30_comparable,,,,,,0,1
B,ir60_comparable,,,,,,0,1
B,ir120_comparable,,,,,,0,1
"""


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_exact_csv_content(tmp_path, capsys):
    curves = write_jsonl(tmp_path / "curves.jsonl", SMALL)
    rc = main(["metrics", str(curves), "--out", str(tmp_path / "out"), "--window", "1"])
    assert rc == 0
    assert (tmp_path / "out" / "stories.csv").read_text() == STORIES_CSV
    assert (tmp_path / "out" / "groups.csv").read_text() == GROUPS_CSV
    table = capsys.readouterr().out
    assert "0.520±0.039" in table and "3 stories" in table


def test_bad_lines_are_reported_and_the_rest_computed(tmp_path, capsys):
    rows = [
        SMALL[0],
        "{not json",
        {"id": "short", "x": [0.1, 0.2], "y": [0.5]},
        {"id": "word", "x": [0.1, 0.2], "y": [0.5, "high"]},
        {"id": "back", "x": [0.1, 0.3, 0.2], "y": [0.5, 0.5, 0.5]},
        {"id": "big", "x": [0.1, 0.2], "y": [0.5, 1.3]},
        {"x": [0.1], "y": [0.5]},
        "",
        SMALL[0],
        SMALL[1],
    ]
    curves = write_jsonl(tmp_path / "bad.jsonl", rows)
    rc = main(["metrics", str(curves), "--out", str(tmp_path / "out"), "--window", "1"])
    err = capsys.readouterr().err
    assert rc == 1
    p = str(curves)
    assert f"{p}:2: not valid JSON" in err
    assert f"{p}:3 field `y`: expected 2 values (as many as `x`), got 1" in err
    assert f"{p}:4 field `y[1]`: Expected `float`, got `str`" in err
    assert f"{p}:5 field `x[2]`: expected x to increase strictly, got 0.2 after 0.3" in err
    assert f"{p}:6 field `y[1]`: expected a no-rate in [0, 1], got 1.3" in err
    assert f"{p}:7 field `id`: missing required field" in err
    assert f"{p}:9 field `id`: duplicate id 's1' (first on line 1)" in err
    assert "7 line(s) failed" in err
    # The good stories are still computed.
    lines = (tmp_path / "out" / "stories.csv").read_text().splitlines()
    assert [ln.split(",")[0] for ln in lines[1:]] == ["s1", "s2"]


def test_non_utf8_line(tmp_path, capsys):
    curves = tmp_path / "c.jsonl"
    curves.write_bytes(json.dumps(SMALL[0]).encode() + b"\n" + b'{"id": "\xff"}\n')
    rc = main(["metrics", str(curves), "--out", str(tmp_path / "o")])
    assert rc == 1
    assert f"{curves}:2: not valid UTF-8 (byte 0xff at column 9)" in capsys.readouterr().err


def test_missing_file_and_bad_flags(tmp_path, capsys):
    assert main(["metrics", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")]) == 1
    assert "nope.jsonl: cannot open" in capsys.readouterr().err
    curves = write_jsonl(tmp_path / "c.jsonl", SMALL)
    assert main(["metrics", str(curves), "--out", str(tmp_path / "o"), "--window", "4"]) == 2
    assert "--window: expected an odd integer >= 1, got 4" in capsys.readouterr().err
    assert main(["metrics", str(curves), "--out", str(tmp_path / "o"), "--thresholds", "30,200"]) == 2
    assert "--thresholds: expected angles in (0, 180], got 200.0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["metrics", str(curves), "--out", str(tmp_path / "o"), "--thresholds", "a,b"])
    assert exc.value.code == 2


def test_out_is_a_file(tmp_path, capsys):
    curves = write_jsonl(tmp_path / "c.jsonl", SMALL)
    (tmp_path / "file").write_text("x")
    assert main(["metrics", str(curves), "--out", str(tmp_path / "file")]) == 2  # a usage error, as in every verb (N15)
    assert "error:" in capsys.readouterr().err


def test_custom_thresholds_name_columns(tmp_path):
    curves = write_jsonl(tmp_path / "c.jsonl", SMALL[:1])
    assert main(["metrics", str(curves), "--out", str(tmp_path / "o"), "--window", "1",
                 "--thresholds", "45,90"]) == 0
    header, row = (tmp_path / "o" / "stories.csv").read_text().splitlines()
    assert header.split(",")[7:9] == ["ir45", "ir90"]
    # angles 34.6, 40.6, 63.4: two are <= 45, all three <= 90
    assert row.split(",")[7:9] == ["0.4", "0.6"]


@pytest.mark.parametrize("argv0", [["tension-run"], [sys.executable, str(ROOT / "bin" / "tension-run")]])
def test_commands_run_as_processes(tmp_path, argv0):
    """The console script and the checkout shim both work and set the exit status."""
    curves = write_jsonl(tmp_path / "c.jsonl", SMALL + ["{oops"])
    exe = Path(sys.executable).parent / "tension-run" if argv0 == ["tension-run"] else None
    cmd = ([str(exe)] if exe else argv0) + ["metrics", str(curves), "--out", str(tmp_path / "o"), "--window", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert ":4: not valid JSON" in r.stderr
    assert (tmp_path / "o" / "stories.csv").read_text() == STORIES_CSV


@pytest.mark.parametrize("content", [b"", b'{"id": "x", "x": [0.1], "y": [1.5]}\n', b"not json\n"])
def test_curves_of_no_readable_story_keep_the_earlier_outputs(tmp_path, capsys, content):
    # an empty (or wholly bad) curves file wrote empty stories.csv and groups.csv over the earlier ones in --out
    out = tmp_path / "out"
    assert main(["metrics", str(write_jsonl(tmp_path / "good.jsonl", SMALL)), "--out", str(out)]) == 0
    kept = {f: (out / f).read_bytes() for f in ("stories.csv", "groups.csv")}
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    capsys.readouterr()
    assert main(["metrics", str(bad), "--out", str(out)]) == 1
    said = capsys.readouterr()
    assert {f: (out / f).read_bytes() for f in kept} == kept
    assert f"nothing written to {out}: no curve could be read" in said.out
    assert "0 stories ->" not in said.out


@pytest.mark.parametrize("given", ["60,60", "30,60,30", "60,60.0"])
def test_an_angle_given_twice_is_refused_in_every_verb_and_the_api(tmp_path, capsys, given):
    """`--thresholds 60,60` wrote stories.csv with two columns named ir60 (and their
    interval and comparable columns twice), groups.csv one of them, and report.md a
    Table 6 with IR60 twice: a CSV whose readers keep one of two same-named columns. An
    angle is one column: a repeated one is a usage error, in every verb that takes the
    flag, the config file's key and the API."""
    import tension
    from tension.core.errors import ConfigError

    curves = write_jsonl(tmp_path / "c.jsonl", SMALL[:1])
    (tmp_path / "t.toml").write_text(f"thresholds = [{given}]\n")
    for argv in (["metrics", str(curves), "--out", str(tmp_path / "o")],
                 ["report", str(tmp_path / "nope")],
                 ["score", str(curves), "--out", str(tmp_path / "s"), "--base-url", "http://127.0.0.1:9"]):
        for how in (["--thresholds", given], ["--config", str(tmp_path / "t.toml")]):
            if how[0] == "--config" and argv[0] != "score":
                continue  # only score reads a settings file
            capsys.readouterr()
            assert main([*argv, *how]) == 2, (argv, how)
            err = capsys.readouterr().err
            assert "thresholds: the angle 60" in err or "thresholds: the angle 30" in err, err
            assert "Traceback" not in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(ConfigError, match="given twice"):
        tension.metrics(curves, out=tmp_path / "api", thresholds=tuple(float(a) for a in given.split(",")))
    assert not (tmp_path / "api").exists()
