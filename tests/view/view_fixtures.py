"""Runs to view, made once per session on the loopback server: two score runs of the
same stories (two judge models) sharing one cache, by the CLI's `main()` in this
process (`run_here`: the fixture's subject is the runs, not the command's process),
and a fairplay run with scripted readers (tests/fairplay_scripted.py); and the view
serving them, from a thread of this process (`ViewHere`) or as a `tension-run view`
process (`Viewer`: the slow browser tests, and the specs whose subject is the process)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import fairplay_scripted as fp  # tests/fairplay_scripted.py
import pytest

import tension
from tension.testing.cli import run_here
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer

BIN = Path(sys.executable).parent / "tension-run"
ENDINGS = 5


def cli(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """The console script in a process of its own (`env`: its whole environment)."""
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, env=env, **kw)


def private_home(root: Path) -> dict[str, str | None]:
    """The variables of a command run for a fixture: a home of its own under `root`, and
    no API key (the loopback server needs none; no test may touch the user's real one)."""
    return {"HOME": str(root / "home"), "XDG_CACHE_HOME": str(root / "home" / ".cache"), "OPENAI_API_KEY": None}


class Runs:
    """The folders the tests view: score runs `a` and `b`, fairplay run `fp`, their cache."""

    def __init__(self, root: Path):
        self.root = root
        self.cache = root / "cache"
        self.a, self.b, self.fp = root / "run-a", root / "run-b", root / "fp"
        self.home = private_home(root)  # over this process's environment (run_here, tension_run)
        self.env = {**os.environ, "HOME": str(root / "home"), "XDG_CACHE_HOME": str(root / "home" / ".cache")}

    def positions(self, run: Path) -> list[dict]:
        return [json.loads(x) for x in (run / "positions.jsonl").read_text().splitlines()]


def make_runs(tmp_path_factory) -> Runs:
    """The runs to view (conftest's session fixture `runs` makes them once)."""
    r = Runs(tmp_path_factory.mktemp("view-runs"))
    corpus = make_corpus(r.root / "corpus.jsonl", 3, seed=5)
    # the runs are the view's input, not the wire: the test server's in-process door
    with InProcessServer(["test-gen", "test-judge"]).serving() as srv:
        for out, judge in ((r.a, "test-gen"), (r.b, "test-judge")):
            done = run_here("score", str(corpus), "--out", str(out), "--base-url", srv.base_url, "--model",
                            "test-gen", "--judge-model", judge, "--endings", str(ENDINGS), "--cache", str(r.cache),
                            "--no-progress", "--no-report", env=r.home)
            assert done.returncode == 0, done.stderr
        srv.respond(fp.scripted)
        stories = fp.write_jsonl(r.root / "whodunits.jsonl", [fp.story_record("w1"), fp.story_record("w2")])
        run = tension.fairplay(stories, out=r.fp, **fp.cfg_for(srv, r.root), **fp.FAST_KW).summary
        assert run.status == "complete", run.error
    return r


class _Pages:
    """What a test asks of a view being served at `url`."""

    url: str

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def json(self, path: str):
        status, body = self.get(path)
        return status, json.loads(body)


class Viewer(_Pages):
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

    def stop(self) -> str:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=20)
        return err


class ViewHere(_Pages):
    """`tension-run view DIRS [--cache C] [--host H] --port 0` served from a thread of this
    process, as a notebook's `result.view()` serves a run (core/view/background.py
    `start_view`): the same runs (`open_runs`, with the recall factories the CLI gives),
    the same Site and aiohttp app, on a free port. What differs is only the CLI's printing
    (its notes and `view: URL` line): a spec of those, or of the process, takes `Viewer`.
    `env` (its own variables over this process's; None unsets one) and `cwd` (the folder
    it runs in) hold for its whole life, put back by `stop`. `frame_origins`: the
    notebook's origins that may frame it under its token (`embed_url`)."""

    def __init__(self, *dirs: Path, cache: Path | None = None, host: str = "127.0.0.1",
                 env: dict[str, str | None] | None = None, cwd: Path | None = None,
                 frame_origins: tuple[str, ...] = ()):
        from tension.core.pipelines.fairplay.recall import FairPlayRecall
        from tension.core.pipelines.score.recall import ScoreRecall
        from tension.core.view.background import start_view

        # What the process wrote to its stderr: the records logged at WARNING and above
        # (Python's last resort prints those; aiohttp's "Error handling request" with its
        # traceback), here caught from every thread while the view serves.
        self._said = io.StringIO()
        self._log = logging.StreamHandler(self._said)
        self._log.setLevel(logging.WARNING)
        logging.getLogger().addHandler(self._log)
        self._patched = pytest.MonkeyPatch()
        try:
            for name, value in (env or {}).items():
                if value is None:
                    self._patched.delenv(name, raising=False)
                else:
                    self._patched.setenv(name, value)
            if cwd is not None:
                self._patched.chdir(cwd)
            self.server = start_view([str(d) for d in dirs], host=host, port=0,
                                     cache=None if cache is None else str(cache),
                                     score_recall=ScoreRecall, fairplay_recall=FairPlayRecall,
                                     frame_origins=frame_origins)
        except BaseException:
            self._put_back()
            raise
        self.url = self.server.url
        self.embed_url = self.server.embed_url

    def stop(self) -> str:
        """Stop serving; what it said on stderr. A handler stuck past 20 s fails here
        (BackgroundView.stop would wait for it for ever)."""
        s = self.server
        try:
            if s.thread.is_alive():
                s.loop.call_soon_threadsafe(s.task.cancel)
                s.thread.join(timeout=20)
            assert not s.thread.is_alive(), "the view's thread did not stop within 20 s"
        finally:
            self._put_back()
        return self._said.getvalue()

    def _put_back(self) -> None:
        logging.getLogger().removeHandler(self._log)
        self._patched.undo()


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
