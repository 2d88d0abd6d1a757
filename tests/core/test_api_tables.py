"""The API's tables as a notebook reads them: ids and groups stay the strings the
corpus gave ("007" is not "7", "NaN" is not a missing value, the group "2024" is
not a number), counts are integers, NaN only where a statistic is undefined; for
every verb that returns tables (score, metrics, fairplay metrics)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import tension
from tension.testing.corpus import make_corpus

ROOT = Path(__file__).resolve().parents[2]
IDS = ["007", "7", "NaN", "1_000", "Infinity"]
GROUPS = ["2024", "2025", "x", "x", "1e3"]
COUNTS = {"n_positions", "n", "n_nan", "L", "n_suspects", "n_failures"}


def numeric_ids_corpus(tmp_path: Path) -> Path:
    src = make_corpus(tmp_path / "plain.jsonl", len(IDS), seed=11)
    rows = [json.loads(line) for line in src.read_text().splitlines()]
    for row, i, g in zip(rows, IDS, GROUPS):
        row["id"], row["group"] = i, g
    out = tmp_path / "numids.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def check_table(table, ids: list[str] | None = None) -> None:
    records = table.records()
    assert records
    for r in records:
        if "id" in r:
            assert isinstance(r["id"], str), r["id"]
        assert isinstance(r["group"], str), r["group"]
        for name in COUNTS & set(r):
            assert isinstance(r[name], int) and not isinstance(r[name], bool), (name, r[name])
    if ids is not None:
        assert [r["id"] for r in records] == ids


def check_frame(table) -> None:
    pd = pytest.importorskip("pandas")
    df = table.to_pandas()
    for name in ("id", "group"):
        if name in df:
            assert all(isinstance(v, str) for v in df[name]), df[name].tolist()
    for name in COUNTS & set(df.columns):
        assert pd.api.types.is_integer_dtype(df[name].dtype), (name, df[name].dtype)
    floats = [c for c in df.columns if pd.api.types.is_float_dtype(df[c].dtype)]
    assert floats  # the statistics are numbers


@pytest.mark.in_process
def test_score_tables_keep_ids_and_groups_as_strings_and_counts_as_integers(server, tmp_path):
    corpus = numeric_ids_corpus(tmp_path)
    r = tension.score(corpus, out=tmp_path / "a", base_url=server.base_url, model="test-gen", endings=3, seed=1,
                      cache=str(tmp_path / "cache"), progress=False, report=False)
    assert r.status == "complete"
    check_table(r.stories, IDS)
    check_table(r.groups)
    assert {x["group"] for x in r.groups.records()} == set(GROUPS)
    check_frame(r.stories)
    check_frame(r.groups)
    df = r.to_pandas()
    assert df["id"].tolist() == IDS and df["group"].tolist() == GROUPS
    assert df["nan_reasons"].map(type).eq(str).all()
    # NaN only where a statistic is undefined: a statistic of every story here is defined
    assert not math.isnan(df["mean_nr"].iloc[0])

    m = tension.metrics(tmp_path / "a", out=tmp_path / "m")
    check_table(m.stories, IDS)
    check_table(m.groups)
    check_frame(m.stories)


def test_fairplay_metrics_tables_keep_ids_and_groups_as_strings(tmp_path):
    rows = [json.loads(line) for line in (ROOT / "examples" / "fairplay_readers.jsonl").read_text().splitlines()]
    ids = ["001", "1", "1e3"]
    for row, i in zip(rows, ids):
        row["id"], row["group"] = i, "2024"
    readers = tmp_path / "readers.jsonl"
    readers.write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    f = tension.fairplay_metrics(readers, out=tmp_path / "fp", progress=False, max_plots=0, resamples=100)
    assert f.exit_status == 0
    check_table(f.stories, ids)
    check_table(f.groups)
    check_frame(f.stories)
    check_frame(f.groups)
