"""Runs to view, made once per session on the loopback server through the
CLI: two score runs of the same stories (two judge models) sharing one cache,
and a fairplay run with scripted readers (tests/fairplay_scripted.py);
and a `tension-run view` process serving them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import fairplay_scripted as fp  # tests/fairplay_scripted.py
import pytest

import tension
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

BIN = Path(sys.executable).parent / "tension-run"
ENDINGS = 5


def cli(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, env=env, **kw)


class Runs:
    """The folders the tests view: score runs `a` and `b`, fairplay run `fp`, their cache."""

    def __init__(self, root: Path):
        self.root = root
        self.cache = root / "cache"
        self.a, self.b, self.fp = root / "run-a", root / "run-b", root / "fp"
        self.env = {**os.environ, "HOME": str(root / "home"), "XDG_CACHE_HOME": str(root / "home" / ".cache")}

    def positions(self, run: Path) -> list[dict]:
        return [json.loads(x) for x in (run / "positions.jsonl").read_text().splitlines()]


def make_runs(tmp_path_factory) -> Runs:
    """The runs to view (conftest's session fixture `runs` makes them once)."""
    r = Runs(tmp_path_factory.mktemp("view-runs"))
    corpus = make_corpus(r.root / "corpus.jsonl", 3, seed=5)
    with LoopbackServer(model=["test-gen", "test-judge"]) as srv:
        for out, judge in ((r.a, "test-gen"), (r.b, "test-judge")):
            done = cli("score", str(corpus), "--out", str(out), "--base-url", srv.base_url, "--model", "test-gen",
                       "--judge-model", judge, "--endings", str(ENDINGS), "--cache", str(r.cache), "--no-progress",
                       "--no-report", env=r.env)
            assert done.returncode == 0, done.stderr
        srv.respond(fp.scripted)
        stories = fp.write_jsonl(r.root / "whodunits.jsonl", [fp.story_record("w1"), fp.story_record("w2")])
        run = tension.fairplay(stories, out=r.fp, **fp.cfg_for(srv, r.root), **fp.FAST_KW).summary
        assert run.status == "complete", run.error
    return r


class Viewer:
    """A `tension-run view` process on a free port."""

    def __init__(self, *dirs: Path, env: dict, extra: tuple[str, ...] = (), cwd: Path | None = None):
        self.proc = subprocess.Popen([str(BIN), "view", *map(str, dirs), "--port", "0", *extra], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
        lines = []
        for line in self.proc.stdout:
            lines.append(line)
            m = re.search(r"view: (http://(?:127\.0\.0\.1|\[[0-9a-f:]+\]|[0-9.]+):\d+/)", line)
            if m:
                self.url = m.group(1)
                self.startup = "".join(lines)
                return
        raise AssertionError(f"view did not start: {''.join(lines)} {self.proc.stderr.read()}")

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def json(self, path: str):
        status, body = self.get(path)
        return status, json.loads(body)

    def stop(self) -> str:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=20)
        return err


# --- the browser (slow tests): Debian's Chromium under Selenium -----------------------

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def chromium():
    """Headless Chromium under Selenium, quit when the generator closes (the
    `browser` fixture of test_view_browser.py and of test_view_hostile_ground.py)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        pytest.fail("Chromium is not installed: apt-get install -y chromium chromium-driver (.ci/run does)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800",
                "--disable-gpu"):
        opts.add_argument(arg)
    drv = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield drv
    drv.quit()


def wait(browser, css: str, timeout: float = 20):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout).until(lambda b: b.find_elements("css selector", css))
