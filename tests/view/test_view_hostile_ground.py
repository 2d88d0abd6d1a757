"""The view and report.md on hostile ground (review 2026-12-01; issue 25 findings 5
and 7): a run scored in one folder and viewed from another (9f), hostile ids,
groups and texts (9b, 9g), case-only ids in the export (6f), run.json's warnings
(the corpus page shows them as report.md does), `--host` (9d) and the export's
endings script (9h). The browser tests (slow) draw the pages in Chromium, as
test_view_browser.py does.

In this process: the hostile run (made by the CLI's `main()`, hostile_runs.py), the
view served from a thread started in another folder (view_fixtures.ViewHere, the
server of a notebook's `result.view()`: the same runs, site and aiohttp app as
`tension-run view`), and `view --export` by `main()` in that folder (`tension_run`):
their subject is the pages and files. A process still: `view --host`, whose subject is
what the serving command prints (its URL line and the off-loopback warning); the slow
browser tests' exports are left as they were (the console script; not the fast suite)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess

import pytest
from hostile_runs import CASE_IDS, HOSTILE_GROUP, HOSTILE_ID
from view_fixtures import BIN, ViewHere, cli, wait

from tension.core.reports.markdown import md_text


@pytest.fixture(scope="module")
def hr(hostile):
    return hostile


@pytest.fixture(scope="module")
def served(hr):
    # started from another folder than `score` ran in, with the run folder given absolute
    v = ViewHere(hr.run, env=hr.home, cwd=hr.elsewhere)
    yield v
    v.stop()


def _data(page: bytes) -> dict:
    """The inline JSON of a page, as the browser's JSON.parse reads it."""
    m = re.search(rb'<script id="data" type="application/json">(.*?)</script>', page, re.S)
    assert m, page[:300]
    return json.loads(m.group(1))


def _slug(corpus: dict, sid: str) -> str:
    return next(s["slug"] for s in corpus["stories"] if s["id"] == sid)


# --- 9f: the view started in another folder --------------------------------------


def test_run_json_records_the_corpus_absolute_and_as_typed(hr):
    record = json.loads((hr.run / "run.json").read_text())
    assert record["corpus"] == str(hr.scored_in / "hostile.jsonl") and record["corpus_given"] == "hostile.jsonl"
    assert record["config"]["cache"] == str(hr.scored_in / "cache") == record["cache"]["path"]
    md = (hr.run / "report.md").read_text()
    assert "Corpus `hostile.jsonl`" in md  # shown as typed


def test_the_served_view_from_another_folder_shows_texts_and_endings(hr, served):
    _, corpus = served.json("api/r0/corpus.json")
    slug = _slug(corpus, HOSTILE_ID)
    status, story = served.json(f"api/r0/story/{slug}.json")
    assert status == 200 and story["sentences"], story["notes"]
    assert not any("is not there" in n for n in story["notes"])
    k = story["positions"][0]["k"]
    status, endings = served.json(f"api/r0/endings/{slug}/{k}.json")
    assert status == 200 and endings["cached"] and len(endings["endings"]) == 3, endings


def test_the_export_from_another_folder_holds_texts_and_endings(hr, tmp_path, monkeypatch, tension_run):
    out = tmp_path / "site"
    monkeypatch.chdir(hr.elsewhere)
    done = tension_run("view", hr.run, "--export", out, "--endings", env=hr.home)
    assert done.returncode == 0, done.stderr
    corpus = _data((out / "r0/index.html").read_bytes())
    slug = _slug(corpus, HOSTILE_ID)
    story = _data((out / f"r0/story/{slug}.html").read_bytes())
    assert story["sentences"] and not any("is not there" in n for n in story["notes"])
    script = (out / f"r0/endings/{slug}.js").read_text()
    assert '"cached":true' in script and '"cached":false' not in script


def test_an_older_run_json_with_relative_paths_is_read_against_the_run_folder(hr, tmp_path, monkeypatch, tension_run):
    # a record written before issue 25: corpus and cache as typed, relative to where score ran
    old = tmp_path / "old run"
    shutil.copytree(hr.run, old)
    shutil.copy(hr.scored_in / "hostile.jsonl", tmp_path / "hostile.jsonl")
    record = json.loads((old / "run.json").read_text())
    record.pop("corpus_given")
    record["corpus"], record["config"]["cache"] = "../hostile.jsonl", "../cache"
    shutil.copytree(hr.scored_in / "cache", tmp_path / "cache")
    (old / "run.json").write_text(json.dumps(record))
    out = tmp_path / "site"
    monkeypatch.chdir(hr.elsewhere)
    done = tension_run("view", old, "--export", out, "--endings", env=hr.home)
    assert done.returncode == 0, done.stderr
    corpus = _data((out / "r0/index.html").read_bytes())
    story = _data((out / f"r0/story/{_slug(corpus, HOSTILE_ID)}.html").read_bytes())
    assert story["sentences"], story["notes"]
    assert '"cached":true' in (out / f"r0/endings/{_slug(corpus, HOSTILE_ID)}.js").read_text()


# --- 9b: hostile text in every inline JSON document -------------------------------


def _inline_blocks(page: bytes) -> list[bytes]:
    return re.findall(rb"<script[^>]*>(.*?)</script>", page, re.S)


def test_no_inline_json_of_any_page_holds_html_significant_characters(hr, tmp_path, monkeypatch, tension_run):
    out = tmp_path / "site"
    monkeypatch.chdir(hr.elsewhere)
    done = tension_run("view", hr.run, "--export", out, "--endings", env=hr.home)
    assert done.returncode == 0, done.stderr
    pages = sorted(out.rglob("*.html"))
    assert len(pages) >= 5  # index, corpus, three stories
    for page in pages:
        body = page.read_bytes()
        blocks = _inline_blocks(body)
        assert len(blocks) == 2 and blocks[1] == b"", page  # the data, then view.js (empty: src=)
        for ch in (b"<", b">", b"&", "\u2028".encode(), "\u2029".encode()):
            assert ch not in blocks[0], (page, ch)
        json.loads(blocks[0])  # still JSON
    ids = {s["id"] for s in _data((out / "r0/index.html").read_bytes())["stories"]}
    assert ids == {HOSTILE_ID, *CASE_IDS}  # the hostile strings come through whole
    groups = {s["group"] for s in _data((out / "r0/index.html").read_bytes())["stories"]}
    assert HOSTILE_GROUP in groups
    for script in (out / "r0" / "endings").iterdir():
        text = script.read_bytes()
        for ch in (b"<", b">", b"&"):
            assert ch not in text.split(b"(", 1)[1], (script, ch)


def test_the_served_pages_hold_no_html_significant_characters_in_their_data(hr, served):
    _, corpus = served.json("api/r0/corpus.json")
    for path in ["index.html", "r0/index.html", *(f"r0/story/{s['slug']}.html" for s in corpus["stories"])]:
        status, body = served.get(path)
        assert status == 200, path
        data = _inline_blocks(body)[0]
        assert b"<" not in data and b">" not in data and b"&" not in data, path


# --- 6f: ids that differ only in case get two files -------------------------------


def test_case_only_ids_get_files_that_differ_on_a_case_blind_file_system(hr, tmp_path, monkeypatch, tension_run):
    out = tmp_path / "site"
    monkeypatch.chdir(hr.elsewhere)
    done = tension_run("view", hr.run, "--export", out, "--endings", env=hr.home)
    assert done.returncode == 0, done.stderr
    for folder in ("story", "endings"):
        names = [p.name for p in (out / "r0" / folder).iterdir()]
        assert len(names) == 3 and len({n.casefold() for n in names}) == 3, names
    corpus = _data((out / "r0/index.html").read_bytes())
    for sid in CASE_IDS:
        assert _data((out / f"r0/story/{_slug(corpus, sid)}.html").read_bytes())["id"] == sid


# --- warnings on the corpus page ---------------------------------------------------


def test_the_corpus_page_holds_run_json_warnings_as_report_md_states_them(hr, served):
    record = json.loads((hr.run / "run.json").read_text())
    assert record["warnings"], "the always-Y judge gives a warning"
    _, corpus = served.json("api/r0/corpus.json")
    assert len(corpus["warnings"]) == len(record["warnings"])
    md = (hr.run / "report.md").read_text()
    for w in corpus["warnings"]:
        assert md_text(w) in md


# --- 9d: --host -------------------------------------------------------------------


def _ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize(("host", "warned"), [("0.0.0.0", True), ("::", True), ("::1", False),
                                              ("127.0.0.1", False)])
def test_view_host_warns_off_loopback_and_brackets_an_ipv6_url(hr, host, warned):
    if ":" in host and not _ipv6():
        pytest.skip("no IPv6 on this machine")
    p = subprocess.Popen([str(BIN), "view", str(hr.run), "--port", "0", "--host", host], env=hr.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
    finally:
        p.terminate()
        _, err = p.communicate(timeout=20)
    want = rf"view: http://\[{re.escape(host)}\]:\d+/" if ":" in host else rf"view: http://{re.escape(host)}:\d+/"
    assert re.search(want, line), line
    assert ("without authentication" in err) is warned, err


# --- 9g: report.md with hostile ids --------------------------------------------------


def test_report_md_holds_no_raw_html_and_its_tables_keep_their_columns(hr):
    md = (hr.run / "report.md").read_text()
    assert "<script" not in md and "<img" not in md and "<!--" not in md
    assert "&lt;!--&lt;script&gt;g\\|x" in md  # the group, escaped in its table cells
    for table in re.findall(r"(?:^\|.*\|$\n?)+", md, re.M):
        rows = table.strip().splitlines()
        widths = {len(re.findall(r"(?<!\\)\|", r)) for r in rows}
        assert len(widths) == 1, rows  # no cell was cut by a `|` in a name
    assert "Rebuild with `tension-run report '" in md and "out dir'`" in md  # shell-quoted


# --- in the browser (slow): the pages draw, served and exported ---------------------

def _draws_every_page(browser, base: str, corpus: dict) -> None:
    browser.get(base + "r0/index.html")
    rows = wait(browser, "table.sortable tbody tr")
    assert sorted(r.get_attribute("data-id") for r in rows) == sorted([HOSTILE_ID, *CASE_IDS])
    assert browser.find_elements("css selector", "section.warnings li"), "run.json's warnings are shown"
    assert browser.title != "pwned" and not browser.find_elements("css selector", "main img")
    for s in corpus["stories"]:
        browser.get(base + f"r0/story/{s['slug']}.html")
        assert wait(browser, "span.s.pos"), s["id"]
        assert browser.find_element("css selector", "h1").text.startswith(s["id"])
        assert browser.title != "pwned"


@pytest.mark.slow
def test_hostile_ids_groups_and_texts_draw_in_the_browser_served_and_exported(browser, hr, served, tmp_path):
    _, corpus = served.json("api/r0/corpus.json")
    _draws_every_page(browser, served.url, corpus)
    out = tmp_path / "site"
    done = cli("view", str(hr.run), "--export", str(out), "--endings", env=hr.env, cwd=hr.elsewhere, timeout=120)
    assert done.returncode == 0, done.stderr
    _draws_every_page(browser, out.as_uri() + "/", corpus)


@pytest.mark.slow
def test_an_exported_storys_endings_script_is_loaded_once_however_many_clicks(browser, hr, tmp_path):
    out = tmp_path / "site"
    done = cli("view", str(hr.run), "--export", str(out), "--endings", env=hr.env, cwd=hr.scored_in, timeout=120)
    assert done.returncode == 0, done.stderr
    corpus = _data((out / "r0/index.html").read_bytes())
    browser.get((out / f"r0/story/{_slug(corpus, CASE_IDS[1])}.html").as_uri())  # a page that drew before, too
    spans = wait(browser, "span.s.pos")
    for span in [spans[0], spans[1], spans[0], spans[-1], spans[1]]:
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", span)
        span.click()
        k = span.get_attribute("data-k")
        assert wait(browser, f'ol.endings[data-k="{k}"] li.ending')
    scripts = browser.execute_script(
        "return [...document.scripts].filter((s) => s.src.includes('/endings/')).length")
    assert scripts == 1
