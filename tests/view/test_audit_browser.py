"""Issue 60's "Done when", in a real browser (Chromium from Debian's packages under Selenium;
`.ci/run` installs them): on a run scored against the test server, two people label a
stratified sample of 40 verdicts sharing 10, by keyboard, in `tension-run audit label`'s page;
one reloads mid-way and goes back to change a label, the view is restarted and both resume;
no label is lost; a foreign Host and a write without the token are refused; then `tension-run
audit report` prints κ with its interval, sensitivity and specificity, people's agreement and
the corrected group statistics beside the uncorrected ones."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.error
import urllib.request

import pytest
from audit_run import scored_run  # tests/audit_run.py
from view_fixtures import BIN, cli, private_home

from tension.core.inputs import labels as lab
from tension.testing.cli import run_here

pytestmark = pytest.mark.slow


class Labelling:
    """`tension-run audit label RUN --port 0` in a process of its own; its printed label URL."""

    def __init__(self, run, env):
        self.proc = subprocess.Popen([str(BIN), "audit", "label", str(run), "--port", "0"], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in self.proc.stdout:
            if m := re.match(r"label: (http://127\.0\.0\.1:\d+/)r0/audit\.html", line):
                self.root = m.group(1)
                self.url = m.group(0).split(" ", 1)[1]
                return
        raise AssertionError(f"audit label did not start: {self.proc.stderr.read()}")

    def stop(self) -> str:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=20)
        return err


def state(browser) -> tuple[str | None, str]:
    """(the shown item's index, the progress line)."""
    return browser.execute_script(
        "const i = document.getElementById('item'); const p = document.getElementById('progress');"
        "return [i ? i.dataset.index : (document.getElementById('done') ? 'done' : null), p ? p.textContent : ''];")


def press(browser, key: str) -> None:
    """A key, then wait until the page shows another item (or says it is done)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import WebDriverWait

    before = state(browser)
    ActionChains(browser).send_keys(key).perform()
    WebDriverWait(browser, 20).until(lambda b: state(b) != before and state(b)[0] is not None)


def shown(browser):
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 20).until(lambda b: state(b)[0] is not None)
    return state(browser)


def answer_for(judge: dict[str, str], browser, flip: set[str]) -> str:
    """y when the judge said match, else n (people mostly agree with it), the other way round for `flip`."""
    key = browser.find_element("css selector", "#item").get_attribute("data-key")
    agree = judge[key] == "match"
    return "y" if agree != (key in flip) else "n"


def test_two_people_label_a_sample_by_keyboard_through_reload_and_restart(tmp_path):
    from view_fixtures import chromium

    run = scored_run(tmp_path)
    r = run_here("audit", "sample", run, "--size", 40, "--shared", 10, "--seed", 2)
    assert r.returncode == 0, r.stderr
    sample = lab.read_sample(run)
    judge = {it.key: it.judge for it in sample.items}
    flip = {sample.items[i].key for i in (3, 17, 29)}  # people disagree with the judge on these
    import os

    env = {**os.environ, **{k: v for k, v in private_home(tmp_path).items() if v is not None}}
    view = Labelling(run, env)
    gen = chromium()
    browser = next(gen)
    try:
        browser.get(view.url)
        from view_fixtures import wait

        wait(browser, "#annotator")[0].send_keys("ann\n")
        index, progress = shown(browser)
        assert index == "0" and progress.startswith("ann: 0 labelled, 40 left")
        page = browser.page_source
        assert "judge_raw" not in page and '"judge"' not in page  # blind
        for _ in range(12):
            press(browser, answer_for(judge, browser, flip))
        ann_tab = browser.current_window_handle
        browser.switch_to.new_window("tab")
        browser.get(view.url + "#bo")
        shown(browser)
        for _ in range(8):
            press(browser, answer_for(judge, browser, flip))
        # ann reloads mid-way: she resumes at her 13th, goes back to her 12th and changes it
        browser.switch_to.window(ann_tab)
        browser.refresh()
        index, progress = shown(browser)
        assert progress.startswith("ann: 12 labelled")
        press(browser, "b")
        key_back = browser.find_element("css selector", "#item").get_attribute("data-key")
        given = browser.find_element("css selector", "button.answer.given").get_attribute("data-label")
        press(browser, "s")  # can't tell, this time
        assert state(browser)[1].startswith("ann: 12 labelled")
        # the view restarts (a new port, a new token): both resume where they stopped
        view.stop()
        view = Labelling(run, env)
        for who, tab in (("ann", ann_tab), ("bo", browser.window_handles[1])):
            browser.switch_to.window(tab)
            browser.get(view.url + "#" + who)
            _, progress = shown(browser)
            assert progress.startswith(f"{who}: {12 if who == 'ann' else 8} labelled"), progress
        # then both to the end, turn by turn
        tabs = {"ann": ann_tab, "bo": browser.window_handles[1]}
        done = set()
        while len(done) < 2:
            for who, tab in tabs.items():
                if who in done:
                    continue
                browser.switch_to.window(tab)
                if state(browser)[0] == "done":
                    done.add(who)
                    continue
                press(browser, answer_for(judge, browser, flip))
        # a write without the token, and one from a foreign Host, are refused
        token = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>',
                                     browser.page_source, re.S).group(1))["token"]
        body = json.dumps({"annotator": "eve", "key": sample.items[0].key, "label": "matches"}).encode()
        for headers, want in (({}, 403), ({"X-Tension-Token": token, "Host": "evil.example"}, 421)):
            req = urllib.request.Request(view.root + "api/r0/audit/label", data=body, method="POST",
                                         headers={"Content-Type": "application/json", **headers})
            with pytest.raises(urllib.error.HTTPError) as ei:
                urllib.request.urlopen(req, timeout=20)
            assert ei.value.code == want
            ei.value.close()
    finally:
        gen.close()
        view.stop()

    labels, errors = lab.read_labels(run, judge)
    assert errors == [] and "eve" not in {x.annotator for x in labels}
    have = lab.latest(labels)
    ann = {k for k, by in have.items() if "ann" in by}
    bo = {k for k, by in have.items() if "bo" in by}
    shared = {it.key for it in sample.items if it.shared}
    assert ann & bo == shared and ann | bo == set(judge)  # the shared items by both, every item labelled
    assert len(labels) == len(ann) + len(bo) + 1  # every key press kept, the changed label too
    assert have[key_back]["ann"].label == "cant-tell" and given in ("matches", "does-not-match")

    r = cli("audit", "report", str(run), env=env)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert re.search(r"\| all \| (39|40) \(\d+ / \d+\) \| [\d,]+ / [\d,]+ \| [\d.]+ \[[\d.]+, [\d.]+\] \| "
                     r"[\d.]+ \[[\d.]+, [\d.]+\] \| [\d.]+ \[[\d.]+, [\d.]+\] \| [\d.]+ \[[\d.]+, [\d.]+\] \|", out), out
    assert re.search(r"\| ann / bo \| \d+ \| \d+ \| [\d.]+ \[[\d.]+, [\d.]+\] \|", out)
    for g in {it.group for it in sample.items}:
        assert re.search(rf"\| {g} \| mean_nr \| \d+ \| [\d.]+ \[[\d.]+, [\d.]+\] \| [\d.]+ \[[\d.]+, [\d.]+\] \|",
                         out), out
    assert (run / "audit.md").is_file() and (run / "audit.csv").is_file()
