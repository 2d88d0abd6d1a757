"""The audit's labels walked as people give them (review of 2026-12-07; the findings' other half is
tests/core/test_audit_findings.py): a spreadsheet imported again over later answers, the page's own
words refused in a spreadsheet, one person under two spellings, an export to a folder."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from audit_run import sampled, scored_run, truth, write_csv  # tests/audit_run.py

from tension.core.inputs import labels as lab
from tension.core.reports.audit_report import audit_report
from tension.testing.cli import run_here


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> Path:
    return scored_run(tmp_path_factory.mktemp("audit-findings"))


@pytest.fixture
def run(scored, tmp_path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(scored, d)
    return d


def _export_filled(run: Path, out: Path, who: str, s: lab.Sample) -> list[dict]:
    assert run_here("audit", "export", run, "--out", out).returncode == 0
    rows = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))
    for i, row in enumerate(rows):
        row["annotator"], row["label"] = who, truth(s.items[i], i)
    write_csv(out, rows)
    return rows


def _flip(label: str) -> str:
    return {"matches": "does-not-match", "does-not-match": "matches", "cant-tell": "matches"}[label]


def test_importing_a_file_again_undoes_no_later_answer(run, tmp_path):
    """A spreadsheet imported, then answers changed by the same person in the labelling page and by
    another file; the first file imported again (a script that imports every CSV, a second click) put
    its old answers back over the later ones and said `imported N label(s)`. Now a row the file
    already gave is not news: nothing is added, the later answers stay, and the note says how many;
    a row the file itself changes since is imported."""
    from tension.core.view.labelling import Labelling

    s = sampled(run)
    a = tmp_path / "a.csv"
    rows = _export_filled(run, a, "ann", s)
    first = run_here("audit", "import", run, a)
    assert first.returncode == 0 and f"imported {len(rows)} label(s)" in first.stdout
    keys = [it.key for it in s.items]
    page = Labelling(run)
    for k in keys[:3]:  # in the page, as its script posts
        was = lab.latest(lab.read_labels(run, keys)[0])[k]["ann"].label
        page.write(json.dumps({"annotator": "ann", "key": k, "label": _flip(was)}).encode())
    b = tmp_path / "b.csv"
    rows_b = [dict(r) for r in rows[3:5]]
    for r in rows_b:
        r["label"] = _flip(r["label"])
    write_csv(b, rows_b)
    assert run_here("audit", "import", run, b).returncode == 0
    later = {k: v["ann"].label for k, v in lab.latest(lab.read_labels(run, keys)[0]).items()}
    lines = lab.labels_path(run).read_text().count("\n")
    again = run_here("audit", "import", run, a)
    assert again.returncode == 0 and "imported 0 label(s)" in again.stdout, again.stdout
    assert "note: 5 row(s) this file gave before were changed since by the same person" in again.stderr
    assert lab.labels_path(run).read_text().count("\n") == lines
    assert {k: v["ann"].label for k, v in lab.latest(lab.read_labels(run, keys)[0]).items()} == later
    # the file edited: its changed row is news, the others still are not
    rows[0]["label"] = next(x for x in lab.LABELS if x not in (rows[0]["label"], later[keys[0]]))
    write_csv(a, rows)
    edited = run_here("audit", "import", run, a)
    assert "imported 1 label(s)" in edited.stdout, edited.stdout
    assert lab.latest(lab.read_labels(run, keys)[0])[keys[0]]["ann"].label == rows[0]["label"]
    assert lab.latest(lab.read_labels(run, keys)[0])[keys[1]]["ann"].label == later[keys[1]]


def _page_words() -> dict[str, str]:
    """The labelling page's buttons: label -> the words it shows (core/view/static/label.js ANSWERS)."""
    import re

    import tension.core.view as view

    js = (Path(view.__file__).parent / "static" / "label.js").read_text(encoding="utf-8")
    block = js.split("const ANSWERS = ")[1].split(";")[0]
    return {value: words for value, _key, words in re.findall(r'\["([a-z-]+)", "([a-z])", "([^"]+)"\]', block)}


# as a person types them in a spreadsheet, autocorrect and all
WRITTEN = {"matches": ["Matches", "match", "Match ", "YES", "y"],
           "does-not-match": ["Does not match", "does  not match", "doesn't match", "Doesn’t match", "no match",
                              "does_not_match", "No "],
           "cant-tell": ["Can't tell", "can’t tell", "Cannot tell", "cant_tell", "S"]}


def test_the_pages_own_words_and_spreadsheet_spellings_are_read_as_their_label_everywhere(run, tmp_path):
    """The page's buttons say "does not match" and "can't tell"; a person filling the spreadsheet
    writes them so (or as autocorrect leaves them: "Doesn’t match"), and `audit import` refused
    "Does not match" while taking "can't tell". Every spelling below is its label through each door
    (`audit import`, labels.jsonl, the page's POST); what could mean either stays an error."""
    from tension.core.view.labelling import BadRequest, Labelling

    words = _page_words()
    assert set(words) == set(lab.LABELS)
    spellings = {k: [words[k], *v] for k, v in WRITTEN.items()}
    s = sampled(run, size=40)
    pairs = [(want, text) for want, texts in spellings.items() for text in texts]
    assert len(pairs) <= len(s.items)
    out = tmp_path / "filled.csv"
    assert run_here("audit", "export", run, "--out", out).returncode == 0
    rows = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))[:len(pairs)]
    for row, (_, text) in zip(rows, pairs):
        row["annotator"], row["label"] = "ann", text
    ambiguous = ["1", "0", "TRUE", "?", "maybe", "x", "no/yes"]
    extra = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))[len(pairs):len(pairs) + len(ambiguous)]
    for row, text in zip(extra, ambiguous):
        row["annotator"], row["label"] = "ann", text
    write_csv(out, rows + extra)
    r = run_here("audit", "import", run, out)
    assert f"imported {len(pairs)} label(s)" in r.stdout, (r.stdout, r.stderr)
    assert r.returncode == 1 and r.stderr.count("field `label`: expected one of") == len(ambiguous)
    got = lab.latest(lab.read_labels(run, [it.key for it in s.items])[0])
    assert [got[row["key"]]["ann"].label for row in rows] == [want for want, _ in pairs]
    # labels.jsonl and the page's POST read them alike
    for (want, text) in pairs:
        assert lab.check_label_value("t", 1, text) == want
    page = Labelling(run)
    for (_, text), it in zip(pairs, s.items):
        state = page.write(json.dumps({"annotator": "bo", "key": it.key, "label": text}).encode())
        assert state["annotator"] == "bo"
    got = lab.latest(lab.read_labels(run, [it.key for it in s.items])[0])
    assert [got[it.key]["bo"].label for it in s.items[:len(pairs)]] == [want for want, _ in pairs]
    for text in ambiguous:
        with pytest.raises(BadRequest):
            page.write(json.dumps({"annotator": "bo", "key": s.items[0].key, "label": text}).encode())


def test_one_person_is_one_annotator_whatever_the_case_and_apostrophes_are_names(run, tmp_path):
    """Anna labels in the page as "Anna", later exports with --annotator anna and fills the spreadsheet:
    she was two annotators, her export empty, the shared items labelled twice and "People against
    people" her agreement with herself. Now a name is its person's first spelling whatever its case
    or Unicode composition, through every door (the page, export, import, labels.jsonl); and a name
    with an apostrophe (O'Brien, D’Angelo) is a name (it was refused)."""
    from tension.core.view.labelling import Labelling

    s = sampled(run)
    page = Labelling(run)
    first = s.items[:6]
    for i, it in enumerate(first):
        state = page.write(json.dumps({"annotator": "Anna", "key": it.key, "label": truth(it, i)}).encode())
    assert state["annotator"] == "Anna" and state["done"] == 6
    assert page.state(" ANNA ")["annotator"] == "Anna" and page.state("anna")["done"] == 6
    out = tmp_path / "anna.csv"
    assert run_here("audit", "export", run, "--out", out, "--annotator", "anna").returncode == 0
    rows = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))
    assert [r["label"] for r in rows[:6]] == [truth(it, i) for i, it in enumerate(first)]
    for i, row in enumerate(rows):
        row["label"] = row["label"] or truth(s.items[i], i)
        row["annotator"] = ["anna", "ANNA", "Anna "][i % 3]
    write_csv(out, rows)
    r = run_here("audit", "import", run, out)
    assert r.returncode == 0 and f"imported {len(rows) - 6} label(s)" in r.stdout, (r.stdout, r.stderr)
    # a line a script wrote with another case, and a decomposed "Zoë" beside a composed one
    zoe_nfc, zoe_nfd = "Zo\u00eb", "Zoe\u0308"
    with lab.labels_path(run).open("a") as f:
        f.write(json.dumps({"key": s.items[0].key, "annotator": "aNNA", "label": truth(s.items[0], 0),
                            "time": "t"}) + "\n")
    page.write(json.dumps({"annotator": zoe_nfc, "key": s.items[1].key, "label": "matches"}).encode())
    page.write(json.dumps({"annotator": zoe_nfd, "key": s.items[2].key, "label": "matches"}).encode())
    report = audit_report(run, n_resamples=200)
    assert report.annotators == {"Anna": len(s.items), zoe_nfc: 2}, report.annotators
    assert all({p.a, p.b} != {"Anna", "anna"} for p in report.people)
    # apostrophes
    for name in ("O'Brien", "D\u2019Angelo"):
        assert page.state(name)["annotator"] == name
        page.write(json.dumps({"annotator": name, "key": s.items[3].key, "label": "cant-tell"}).encode())
    assert {"O'Brien", "D\u2019Angelo"} <= set(audit_report(run, n_resamples=200).annotators)
    assert run_here("audit", "export", run, "--out", tmp_path / "o.csv", "--annotator", "O'Brien").returncode == 0


def test_export_to_a_folder_names_the_flag_and_its_example_works(run, tmp_path):
    """`audit export RUN --out /tmp` said `error: Is a directory (/.tmp.e32aa8c2a712.tmp)`, naming a
    hidden file nobody made. Now it names --out, exit 2, and the example it gives writes the CSV."""
    sampled(run)
    r = run_here("audit", "export", run, "--out", tmp_path)
    assert r.returncode == 2 and f"--out {tmp_path}: a folder" in r.stderr and ".tmp" not in r.stderr
    example = r.stderr.split("(e.g. ")[1].split(")")[0]
    assert run_here("audit", "export", run, "--out", example).returncode == 0 and Path(example).is_file()


def test_a_cell_a_spreadsheet_would_read_as_a_formula_is_exported_as_text_and_imports_back(run, tmp_path):
    """`audit export` is opened in a spreadsheet by design; a text cell beginning with `=`, `+`,
    `-`, `@`, a tab or a carriage return is a formula there (`=HYPERLINK(…)` in an LLM's
    ending, a dialogue line `-Where…`), evaluated on opening. Such cells get the apostrophe
    spreadsheets take as "this is text" (OWASP's CSV-injection advice); the columns read back
    (key, label, annotator) are untouched, and the filled-in file imports."""
    import csv as csv_mod
    import io

    import msgspec

    sample = sampled(run)
    odd = ["=HYPERLINK(\"http://x\",\"y\")", "-Where were you?", "+1 more", "@sum", "\tTabbed", "plain"]
    items = [msgspec.structs.replace(it, predicted=odd[i % len(odd)], prefix=odd[(i + 1) % len(odd)])
             for i, it in enumerate(sample.items)]
    lab.write_sample(run, msgspec.structs.replace(sample, items=items))
    out = tmp_path / "a.csv"
    r = run_here("audit", "export", run, "--out", out, "--annotator", "ann")
    assert r.returncode == 0, r.stderr
    rows = list(csv_mod.DictReader(io.StringIO(out.read_text(encoding="utf-8-sig"))))
    by_key = {row["key"]: row for row in rows}
    for it in items:
        row = by_key[it.key]
        for col, text in (("predicted", it.predicted), ("prefix", it.prefix)):
            assert row[col] == (text if text == "plain" else "'" + text), (col, row[col])
    for row in rows:
        row["label"] = "matches"
    filled = tmp_path / "filled.csv"
    write_csv(filled, rows)
    done = run_here("audit", "import", run, filled)
    assert done.returncode == 0, done.stderr
    assert f"imported {len(items)} label(s)" in done.stdout
