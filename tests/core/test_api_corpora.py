"""Corpora from where a notebook holds them: a list of dicts, a pandas DataFrame,
a datasets.Dataset (columns named as the JSON Lines fields, or renamed by
`columns=`), and CSV or Parquet files for the CLI; the same stories as from JSON
Lines, so the same cache keys (nothing sent the second time), and bad rows told
as JSON Lines rows are (row number, field)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

import tension
from tension.core.errors import ConfigError
from tension.core.inputs.corpus import read_corpus
from tension.testing.corpus import make_corpus

OUTPUTS = ("positions.jsonl", "stories.csv", "groups.csv")


def settings(server, cache: Path) -> dict:
    return {"base_url": server.base_url, "model": "test-gen", "endings": 3, "seed": 1, "cache": str(cache),
            "progress": False, "report": False}


def rows(corpus: Path) -> list[dict]:
    return [json.loads(line) for line in corpus.read_text().splitlines()]


@pytest.fixture
def from_jsonl(server, tmp_path):
    """A corpus with string ids that look like numbers, scored from JSON Lines: (corpus, out, cache)."""
    src = make_corpus(tmp_path / "plain.jsonl", 3, seed=21)
    recs = rows(src)
    for r, i, g in zip(recs, ["007", "7", "NaN"], ["2024", "2024", "x"]):
        r["id"], r["group"] = i, g
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = tension.score(corpus, out=tmp_path / "jsonl", **settings(server, tmp_path / "cache"))
    assert r.status == "complete"
    return corpus, tmp_path / "jsonl", tmp_path / "cache"


def same_outputs(a: Path, b: Path) -> None:
    for name in OUTPUTS:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def frame(corpus: Path):
    pd = pytest.importorskip("pandas")
    return pd.DataFrame(rows(corpus))


def dataset(corpus: Path):
    datasets = pytest.importorskip("datasets")
    recs = rows(corpus)
    return datasets.Dataset.from_dict({k: [r[k] for r in recs] for k in recs[0]})


@pytest.mark.parametrize("kind", ["list", "dataframe", "dataset"])
@pytest.mark.in_process
def test_a_corpus_in_memory_scores_as_its_json_lines_and_sends_nothing_again(server, tmp_path, from_jsonl, kind):
    corpus, jsonl_out, cache = from_jsonl
    given = {"list": rows, "dataframe": frame, "dataset": dataset}[kind](corpus)
    server.reset_records()
    r = tension.score(given, out=tmp_path / kind, **settings(server, cache))
    assert r.status == "complete", r.summary
    assert server.count() == 0  # every answer from the cache: the same stories, the same keys
    same_outputs(jsonl_out, tmp_path / kind)
    assert [x["id"] for x in r.stories.records()] == ["007", "7", "NaN"]


@pytest.mark.in_process
def test_columns_renames_a_frames_columns(server, tmp_path, from_jsonl):
    corpus, jsonl_out, cache = from_jsonl
    df = frame(corpus).rename(columns={"id": "story_id", "text": "body", "group": "year"})
    r = tension.score(df, out=tmp_path / "renamed", columns={"id": "story_id", "text": "body", "group": "year"},
                      **settings(server, cache))
    assert r.status == "complete"
    same_outputs(jsonl_out, tmp_path / "renamed")
    with pytest.raises(ConfigError, match="no column 'story'"):
        tension.score(df, out=tmp_path / "bad", columns={"id": "story"}, **settings(server, cache))


@pytest.mark.in_process
def test_a_bad_row_in_memory_is_named_by_row_and_field(server, tmp_path):
    good = rows(make_corpus(tmp_path / "c.jsonl", 2, seed=3))
    bad = [good[0], {"id": "b", "text": 17}, good[1]]
    r = tension.score(bad, out=tmp_path / "out", **settings(server, tmp_path / "cache"))
    assert r.exit_status == 1
    errors = [str(e) for e in r.summary.input_errors] if hasattr(r.summary, "input_errors") else []
    text = " ".join(errors) + " " + json.dumps(r.run)
    assert "corpus.jsonl:2 field `text`" in text, text


def test_no_corpus_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="`corpus` is None"):
        tension.score(None, out=tmp_path / "o", base_url="http://127.0.0.1:9", model="m")


def write_csv(corpus: Path, path: Path) -> Path:
    recs = rows(corpus)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(recs[0]))
        w.writeheader()
        w.writerows(recs)
    return path


def test_the_cli_reads_a_csv_corpus_as_its_json_lines(server, tmp_path, from_jsonl):
    corpus, jsonl_out, cache = from_jsonl
    table = write_csv(corpus, tmp_path / "c.csv")
    assert [s.id for s in read_corpus(table, 0, 10**9).stories] == [s.id for s in read_corpus(corpus, 0, 10**9).stories]
    exe = str(Path(sys.executable).parent / "tension-run")
    server.reset_records()
    p = subprocess.run([exe, "score", str(table), "--out", str(tmp_path / "csv"), "--base-url", server.base_url,
                        "--model", "test-gen", "--endings", "3", "--seed", "1", "--cache", str(cache),
                        "--no-progress", "--no-report"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert server.count() == 0
    same_outputs(jsonl_out, tmp_path / "csv")


def test_a_bad_csv_row_is_named_by_line_and_field(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("id,text,group\na,some text here,g\n,no id,g\n")
    c = read_corpus(path, 0, 10**9)
    assert [s.id for s in c.stories] == ["a"]
    assert [str(e) for e in c.errors] == [f"{path}:3 field `id`: missing required field"]  # as a .jsonl line


def test_a_parquet_corpus_reads_as_its_json_lines(tmp_path, from_jsonl):
    corpus, _, _ = from_jsonl
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    recs = rows(corpus)
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "c.parquet")
    got = read_corpus(tmp_path / "c.parquet", 0, 10**9)
    want = read_corpus(corpus, 0, 10**9)
    assert [(s.id, s.group, s.text) for s in got.stories] == [(s.id, s.group, s.text) for s in want.stories]


def test_a_parquet_corpus_without_pyarrow_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    (tmp_path / "c.parquet").write_bytes(b"PAR1")
    c = read_corpus(tmp_path / "c.parquet", 0, 10**9)
    assert len(c.errors) == 1 and "pip install 'tension-run[parquet]'" in str(c.errors[0])


@pytest.mark.in_process
@pytest.mark.parametrize("form", ["dataframe", "parquet", "jsonl"])
def test_number_ids_are_told_how_to_become_text_and_the_advice_works(server, tmp_path, form):
    # a column of number ids (a Parquet file's, a DataFrame's) refused every row with only
    # "expected a string, got a number"
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(rows(make_corpus(tmp_path / "plain.jsonl", 2, seed=21)))
    df["id"] = [7, 8]
    given: object = df
    if form == "parquet":
        pytest.importorskip("pyarrow")
        given = tmp_path / "c.parquet"
        df.to_parquet(given)
    elif form == "jsonl":
        given = tmp_path / "c.jsonl"
        df.to_json(given, orient="records", lines=True)
    r = tension.score(given, out=tmp_path / "a", **settings(server, tmp_path / "cache"))
    assert r.status == "failed" and len(r.summary.input_errors) == 2
    advice = "make the column text (pandas: df['id'] = df['id'].astype(str))"
    assert r.summary.input_errors[0].endswith(f"field `id`: expected a string, got a number (7); an id is text: "
                                              f"write it as \"7\", or {advice}")
    exec(advice.split("pandas: ", 1)[1][:-1], {"df": df})  # as printed (the closing paren is the message's)
    r = tension.score(df, out=tmp_path / "b", **settings(server, tmp_path / "cache"))
    assert (r.status, r.summary.input_errors, [x["id"] for x in r.stories.records()]) == ("complete", [], ["7", "8"])
