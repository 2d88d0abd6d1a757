"""The view in a real browser: Chromium from Debian's packages (`chromium`,
`chromium-driver`; `.ci/run` installs them), driven by Selenium, against runs
scored on the loopback server. Each page's screenshot is written to the test's
folder (printed); with TENSION_VIEW_SHOTS=DIR also into DIR (docs/view.md's
pictures come from there)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
from view_fixtures import ENDINGS, Viewer, cli, wait

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def site(runs):
    """The runs (shared with test_view_api.py) and a view process serving them."""
    served = Viewer(runs.a, runs.b, runs.fp, env=runs.env)
    try:
        yield runs, served
    finally:
        served.stop()


def shot(browser, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    browser.save_screenshot(str(path))
    print(f"screenshot: {path}")
    if os.environ.get("TENSION_VIEW_SHOTS"):
        out = Path(os.environ["TENSION_VIEW_SHOTS"])
        out.mkdir(parents=True, exist_ok=True)
        _small_png(path, out / f"view-{name}.png")
    assert path.stat().st_size > 1000
    return path


def _small_png(src: Path, dst: Path) -> None:
    """A screenshot in 64 colours: a small file to commit."""
    from PIL import Image

    with Image.open(src) as im:
        im.convert("RGB").quantize(64).save(dst, optimize=True)


def test_corpus_then_a_story_then_a_sentences_endings(browser, site, tmp_path):
    runs, viewer = site
    browser.get(viewer.url + "r0/index.html")
    rows = wait(browser, "table.sortable tbody tr")
    assert [r.get_attribute("data-id") for r in rows] == ["story-000", "story-001", "story-002"]
    assert len(browser.find_elements("css selector", "table.groups tr")) == 3  # header + groups a, b
    browser.find_element("css selector", 'th[data-key="mean_nr"]').click()
    firsts = [r.get_attribute("data-id") for r in browser.find_elements("css selector", "table.sortable tbody tr")]
    means = {s["id"]: s for s in viewer.json("api/r0/corpus.json")[1]["stories"]}
    assert firsts == sorted(means, key=lambda i: means[i]["stats"]["mean_nr"])
    # issue 27: each cell shows the story's 95% interval, the numbers of stories.csv
    rows_csv = {r["id"]: r for r in csv.DictReader((runs.a / "stories.csv").read_text().splitlines())}
    for row in browser.find_elements("css selector", "table.sortable tbody tr"):
        cell = row.find_elements("css selector", "td.num")[0]  # mean_nr
        r = rows_csv[row.get_attribute("data-id")]
        want = f"{float(r['mean_nr']):.3f} [{float(r['mean_nr_lo']):.3f}, {float(r['mean_nr_hi']):.3f}]"
        assert cell.text == want
        assert cell.find_element("css selector", "span.ci").get_attribute("title").startswith("95% interval")
    shot(browser, tmp_path, "corpus")

    browser.find_element("link text", "story-001").click()
    spans = wait(browser, "span.s.pos")
    stats = browser.find_element("css selector", "p.stats").text
    r = rows_csv["story-001"]
    assert f"mean_nr {float(r['mean_nr']):.3f} [{float(r['mean_nr_lo']):.3f}, {float(r['mean_nr_hi']):.3f}]" in stats
    assert any("resamples of this story's verdicts" in p.text for p in browser.find_elements("css selector",
                                                                                             "p.legend"))
    lines = [p for p in runs.positions(runs.a) if p["id"] == "story-001"]
    assert len(spans) == len(lines)
    line = lines[len(lines) // 2]
    span = browser.find_element("css selector", f'span.s.pos[data-k="{line["k"]}"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", span)
    span.click()
    items = wait(browser, f'ol.endings[data-k="{line["k"]}"] li.ending')
    assert len(items) == line["n_endings"] == ENDINGS
    verdicts = [li.get_attribute("data-verdict") for li in items]
    assert verdicts.count("match") == line["n_match"]
    assert verdicts.count("no match") + verdicts.count("malformed") == ENDINGS - line["n_match"] - line["n_empty"]
    selected = browser.find_elements("css selector", "circle.pt.sel")
    assert [c.get_attribute("data-k") for c in selected] == [str(line["k"])]
    # the judge's raw answer on demand
    items[0].find_element("css selector", "summary").click()
    assert items[0].find_element("css selector", "pre").text in ("Y", "N")
    shot(browser, tmp_path, "story")

    # hover a point: its sentence is outlined
    from selenium.webdriver import ActionChains

    other = lines[1]["k"]
    ActionChains(browser).move_to_element(browser.find_element("css selector", f'circle.pt[data-k="{other}"]')).perform()
    hovered = browser.find_element("css selector", f'span.s.pos[data-k="{other}"]')
    assert "hover" in hovered.get_attribute("class")


def test_compare_and_fairplay_pages_render_their_data(browser, site, tmp_path):
    runs, viewer = site
    browser.get(viewer.url + "compare/r0-r1.html")
    rows = wait(browser, "table.sortable tbody tr")
    assert len(rows) == 3
    assert len(browser.find_elements("css selector", "table.summary tr")) > 4
    # issue 27: each story's difference carries its interval
    assert all(r.find_elements("css selector", "td.num span.ci") for r in rows)
    rows[0].click()
    pos_rows = wait(browser, "#pair table.positions tr")
    n = sum(p["id"] == rows[0].get_attribute("data-id") for p in runs.positions(runs.a))
    assert len(pos_rows) == n + 1
    shot(browser, tmp_path, "compare")

    browser.get(viewer.url + "r2/index.html")
    sections = wait(browser, "section.fp")
    assert [s.get_attribute("data-id") for s in sections] == ["w1", "w2"]
    assert len(sections[0].find_elements("css selector", "path.reader")) == 6  # 3 readers × culprit, distractor
    sections[0].find_element("css selector", 'button[data-p="3"]').click()
    conts = wait(browser, "ol.conts li")
    assert [c.get_attribute("data-culprit") for c in conts] == ["Tobias Fenn", "Tobias Fenn", "Ines Harrow",
                                                              "Ines Harrow"]
    shot(browser, tmp_path, "fairplay")


def test_the_export_works_from_a_folder_without_a_server(browser, site, tmp_path):
    runs, _ = site
    out = tmp_path / "site"
    done = cli("view", str(runs.a), str(runs.fp), "--export", str(out), "--endings", env=runs.env, timeout=120)
    assert done.returncode == 0, done.stderr
    browser.get((out / "r0/index.html").as_uri())
    wait(browser, "table.sortable tbody tr")
    browser.get((out / "r0/story/story-000.html").as_uri())
    line = next(p for p in runs.positions(runs.a) if p["id"] == "story-000")
    span = wait(browser, f'span.s.pos[data-k="{line["k"]}"]')[0]
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", span)
    span.click()
    items = wait(browser, "ol.endings li.ending")
    assert [li.get_attribute("data-verdict") for li in items].count("match") == line["n_match"]
    browser.get((out / "r1/index.html").as_uri())
    wait(browser, "section.fp")[0].find_element("css selector", 'button[data-p="5"]').click()
    assert len(wait(browser, "ol.conts li")) == 4
