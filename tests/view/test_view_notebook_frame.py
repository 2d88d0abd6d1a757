"""The view a notebook's `result.view()` serves may be framed by that notebook and by
nothing else (issue 58 item 4; review 2026-12-07 A8: the inline frame it promised
was blocked by its own `X-Frame-Options: DENY` / `frame-ancestors 'none'`).

The view started for a notebook has a per-view token: what is asked under /TOKEN/
may be framed by the notebook's origins alone (`frame-ancestors` names them);
without the token, with another, or by another origin: DENY and 'none' as before.
The Host check holds either way. The notebook's origin is given (`view(origin=…)`)
or read from the Jupyter server that started the kernel (core/api/notebook.py);
unknown, the view is a link and says why.

Fast: the headers of every route with and without the token (view_fixtures.ViewHere,
the server of `result.view()`), the origins read from a Jupyter runtime folder, what
a notebook shows. Slow (Chromium, as test_view_browser.py): a page at the notebook's
origin frames the view and follows its links in the frame; a hostile page given the
same URL cannot; and JupyterLab itself, started here, runs a cell that shows the view
inline, in Chromium."""

from __future__ import annotations

import http.server
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from view_fixtures import ViewHere, wait

from tension.core.api.notebook import notebook_origins
from tension.core.api.results import serve_view
from tension.core.errors import ConfigError
from tension.core.view.app import HEADERS, frame_origin, framed_headers, framing

NOTEBOOK = "http://127.0.0.1:8888"
PATHS = ["", "index.html", "r0/index.html", "r0/story/story-000.html", "compare/r0-r1.html",
         "api/r0/corpus.json", "api/r2/fairplay.json", "api/r0/endings/story-000/1.json", "static/view.js",
         "no/such/page.html"]


@pytest.fixture(scope="module")
def framed(runs):
    v = ViewHere(runs.a, runs.b, runs.fp, frame_origins=(NOTEBOOK,))
    yield v
    v.stop()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _get(url: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.build_opener(_NoRedirect).open(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _closed(headers: dict[str, str]) -> bool:
    return all(headers.get(k) == v for k, v in HEADERS.items())


# --- the headers ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_with_the_token_the_notebook_origin_alone_may_frame_every_route(framed, path):
    status, headers, _ = _get(framed.embed_url + path)
    assert status in (200, 302, 404), (path, status)
    csp = headers["Content-Security-Policy"]
    assert csp.endswith(f"frame-ancestors {NOTEBOOK}") and csp.count("frame-ancestors") == 1
    assert "X-Frame-Options" not in headers  # it cannot name an origin: DENY would refuse the notebook too
    assert headers == {**headers, **framed_headers((NOTEBOOK,))}  # the rest of the hardening as before
    assert headers["Cross-Origin-Resource-Policy"] == "same-origin" and headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("path", PATHS)
def test_without_the_token_nothing_may_frame_it(framed, path):
    status, headers, _ = _get(framed.url + path)
    assert status in (200, 302, 404), (path, status)
    assert _closed(headers) and headers["X-Frame-Options"] == "DENY"
    assert headers["Content-Security-Policy"].endswith("frame-ancestors 'none'")


def test_another_token_is_a_page_not_found_and_framed_by_nothing(framed):
    token = framed.embed_url.rstrip("/").rsplit("/", 1)[1]
    others = [secrets.token_urlsafe(24), token[:-1], token.upper() if token.upper() != token else token.lower(),
              token + "x", token[:-1] + "%2F"]
    for other in others:
        for path in ("", "index.html", "api/r0/corpus.json"):
            status, headers, body = _get(f"{framed.url}{other}/{path}")
            assert status == 404, (other, path, status)
            assert _closed(headers), (other, path)
            assert b"story-000" not in body


def test_the_token_opens_no_host_check(framed):
    port = framed.url.rsplit(":", 1)[1].rstrip("/")
    for host in (f"evil.example:{port}", f"127.0.0.1.evil.example:{port}"):
        status, headers, body = _get(framed.embed_url + "api/r0/corpus.json", host)
        assert status == 421 and _closed(headers) and b"story-000" not in body


def test_the_token_alone_redirects_into_its_pages(framed):
    base = framed.embed_url.rstrip("/")
    for url in (base, base + "/"):
        status, headers, _ = _get(url)
        assert status == 302 and headers["Location"] == base[len(framed.url) - 1:] + "/index.html"
        assert headers["Content-Security-Policy"].endswith(f"frame-ancestors {NOTEBOOK}")
    status, headers, _ = _get(framed.url)
    assert status == 302 and headers["Location"] == "/index.html" and _closed(headers)


def test_the_framed_pages_are_the_same_bytes_and_link_under_the_token(framed):
    for path in ("index.html", "r0/index.html", "r0/story/story-000.html", "api/r0/corpus.json", "static/view.js"):
        assert _get(framed.embed_url + path)[2] == _get(framed.url + path)[2], path
    page = _get(framed.embed_url + "r0/story/story-000.html")[2].decode()
    assert 'href="../../index.html"' in page and "http" not in page.split("<main")[0]  # relative: under /TOKEN/


def test_a_view_without_origins_has_no_token_and_each_view_its_own(runs, framed):
    plain = ViewHere(runs.a)
    other = ViewHere(runs.a, frame_origins=(NOTEBOOK,))
    try:
        assert plain.embed_url is None
        assert other.embed_url != framed.embed_url
        token = framed.embed_url.rstrip("/").rsplit("/", 1)[1]
        status, headers, _ = _get(f"{other.url}{token}/index.html")  # view 1's token at view 2
        assert status == 404 and _closed(headers)
    finally:
        plain.stop()
        other.stop()


@pytest.mark.parametrize("given,source", [
    ("http://localhost:8888", "http://localhost:8888"),
    ("http://LOCALHOST:8888/lab/tree/a.ipynb?token=abc", "http://localhost:8888"),
    ("https://hub.example.org/user/x/", "https://hub.example.org"),
    ("http://[::1]:8888", "http://[::1]:8888"),
    ("http://127.0.0.1:80", "http://127.0.0.1"),
])
def test_an_origin_given_is_written_as_the_one_source_it_is(given, source):
    assert frame_origin(given) == source


@pytest.mark.parametrize("given", [
    "*", "http://*:8888", "http://*.example.org", "localhost:8888", "ftp://x", "file:///tmp", "'self'",
    "http://a.example http://b.example", "http://x;script-src *", "http://x' 'unsafe-inline", "http://u:p@x",
    "http://x:99999", "javascript:alert(1)", "data:text/html,x", "http://fe80::1%eth0", "",
])
def test_anything_but_one_web_origin_is_refused(given):
    with pytest.raises(ConfigError, match="expected a web origin"):
        frame_origin(given)


def test_a_token_is_new_for_each_framing_and_long():
    a, b = framing([NOTEBOOK]), framing([NOTEBOOK, "http://localhost:8888"])
    assert a.token != b.token and len(a.token) >= 32
    assert b.origins == (NOTEBOOK, "http://localhost:8888")


# --- the notebook's origin -------------------------------------------------------------------


def _server_file(tmp_path: Path, pid: int, url: str, hostname: str = "localhost", name: str = "jpserver") -> Path:
    (tmp_path / f"{name}-{pid}.json").write_text(json.dumps({"url": url, "hostname": hostname, "port": 1,
                                                            "pid": pid, "token": "secret"}))
    return tmp_path


LOOPBACK = ("http://localhost:8888", "http://127.0.0.1:8888", "http://[::1]:8888")


@pytest.mark.parametrize("url,hostname,name,expected", [
    ("http://localhost:8888/", "localhost", "jpserver", LOOPBACK),
    ("http://127.0.0.1:8888/", "127.0.0.1", "jpserver", LOOPBACK),
    ("http://127.0.0.1:8888/", "127.0.0.1", "nbserver", LOOPBACK),  # classic Notebook
    ("http://box:8888/", "0.0.0.0", "jpserver", ("http://box:8888",) + LOOPBACK),
    ("https://lab.example.org:9443/base/", "lab.example.org", "jpserver", ("https://lab.example.org:9443",)),
], ids=["localhost", "127.0.0.1", "classic-notebook", "every-interface", "elsewhere"])
def test_the_origin_is_the_address_of_the_jupyter_server_that_started_the_kernel(tmp_path, url, hostname, name,
                                                                                   expected):
    runtime = _server_file(tmp_path, 4242, url, hostname, name)
    _server_file(tmp_path, 4343, "http://localhost:9999/")  # another server: not this kernel's
    assert notebook_origins({"JPY_PARENT_PID": "4242"}, str(runtime), parent=1) == (expected, "")
    # no JPY_PARENT_PID (on Windows it holds a handle): the kernel's parent process
    assert notebook_origins({"JPY_PARENT_PID": "123456789"}, str(runtime), parent=4242) == (expected, "")


@pytest.mark.parametrize("env,why", [
    ({}, "no Jupyter server started this kernel"),
    ({"JPY_PARENT_PID": "4343"}, "none of its parent processes 4343, 1 left a jpserver-PID.json"),
    ({"JPY_PARENT_PID": "4242", "JUPYTERHUB_SERVICE_PREFIX": "/user/x/"}, "JupyterHub"),
], ids=["no-jupyter", "another-pid", "jupyterhub"])
def test_no_origin_known_says_why_and_what_to_pass(tmp_path, env, why):
    runtime = _server_file(tmp_path, 4242, "http://localhost:8888/")
    origins, said = notebook_origins(env, str(runtime), parent=1)
    assert origins == () and why in said and "view(origin='http://localhost:8888')" in said


# --- what the notebook shows -------------------------------------------------------------------


def _frame_src(html: str) -> str | None:
    if "<iframe" not in html:
        return None
    return html.split('<iframe src="', 1)[1].split('"', 1)[0]


def test_view_with_an_origin_is_an_inline_frame_under_its_token(runs):
    v = serve_view(str(runs.a), "127.0.0.1", 0, origin="http://localhost:8888/lab")
    try:
        html = v._repr_html_()
        assert v.frame_origins == ("http://localhost:8888",) and v.url == v.server.embed_url
        assert _frame_src(html) == v.url and f'href="{v.url}"' in html
        status, headers, _ = _get(v.url + "index.html")
        assert status == 200 and headers["Content-Security-Policy"].endswith("frame-ancestors http://localhost:8888")
        assert _closed(_get(v.server.url + "index.html")[1])
    finally:
        v.stop()


def test_view_in_a_kernel_of_a_jupyter_server_is_framed_by_that_server(runs, tmp_path, monkeypatch):
    _server_file(tmp_path, 4242, "http://localhost:8890/")
    monkeypatch.setenv("JPY_PARENT_PID", "4242")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    for name in ("JUPYTERHUB_SERVICE_PREFIX", "JUPYTERHUB_API_URL"):
        monkeypatch.delenv(name, raising=False)
    v = serve_view(str(runs.a), "127.0.0.1", 0)
    try:
        assert v.frame_origins == ("http://localhost:8890", "http://127.0.0.1:8890", "http://[::1]:8890")
        assert _frame_src(v._repr_html_()) == v.url
        csp = _get(v.url + "index.html")[1]["Content-Security-Policy"]
        assert csp.endswith("frame-ancestors " + " ".join(v.frame_origins))
    finally:
        v.stop()


def test_view_with_no_origin_known_is_a_link_that_says_why(runs, monkeypatch):
    monkeypatch.delenv("JPY_PARENT_PID", raising=False)
    v = serve_view(str(runs.a), "127.0.0.1", 0)
    try:
        html = v._repr_html_()
        assert _frame_src(html) is None and v.frame_origins == () and v.server.embed_url is None
        assert f'href="{v.url}"' in html and "Not shown here: no Jupyter server started this kernel" in html
        assert "view(origin=&#x27;http://localhost:8888&#x27;)" in html
        assert _closed(_get(v.url + "index.html")[1])
    finally:
        v.stop()


def test_view_with_a_bad_origin_refuses_before_serving(runs):
    before = threading.active_count()
    with pytest.raises(ConfigError, match="expected a web origin"):
        serve_view(str(runs.a), "127.0.0.1", 0, origin="*")
    assert threading.active_count() == before


# --- in a real browser (slow) -------------------------------------------------------------------


class _Pages(http.server.ThreadingHTTPServer):
    """A web site on 127.0.0.1 or localhost: `pages` by path (text/html)."""

    def __init__(self, host: str, pages: dict[str, str]):
        self.pages = pages

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(h):  # noqa: N805
                body = self.pages.get(h.path.split("?")[0], "").encode()
                h.send_response(200 if body else 404)
                h.send_header("Content-Type", "text/html; charset=utf-8")
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                h.wfile.write(body)

            def log_message(h, *args):  # noqa: N805
                pass

        super().__init__((host, 0), Handler)
        self.origin = f"http://{host}:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def _framing_page(*srcs: str) -> str:
    return "<!doctype html><body>" + "".join(f'<iframe id="f{i}" src="{s}" width="800" height="400"></iframe>'
                                            for i, s in enumerate(srcs)) + "</body>"


def _frame_url(browser, frame_id: str) -> str:
    """The document the frame holds, as Chromium has it: the view's page, or
    chrome-error://chromewebdata/ where the view refused to be framed."""
    browser.switch_to.default_content()
    browser.switch_to.frame(browser.find_element("id", frame_id))
    try:
        return browser.execute_script("return document.URL")
    finally:
        browser.switch_to.default_content()


def _settle(browser, frame_ids: list[str], timeout: float = 20) -> dict[str, str]:
    """Each frame's URL once none is about:blank (still loading)."""
    end = time.monotonic() + timeout
    while True:
        urls = {f: _frame_url(browser, f) for f in frame_ids}
        if all(u != "about:blank" for u in urls.values()) or time.monotonic() > end:
            return urls
        time.sleep(0.2)


@pytest.mark.slow
def test_the_notebooks_page_frames_the_view_and_a_hostile_page_cannot(runs, browser):
    notebook = _Pages("127.0.0.1", {})
    hostile = _Pages("localhost", {})  # another origin of this machine: another port, another name
    v = ViewHere(runs.a, runs.b, runs.fp, frame_origins=(notebook.origin,))
    try:
        page = _framing_page(v.embed_url, v.url, v.embed_url + "r0/index.html")
        notebook.pages["/"] = hostile.pages["/"] = page
        browser.get(notebook.origin + "/")
        urls = _settle(browser, ["f0", "f1", "f2"])
        assert urls["f0"] == v.embed_url + "index.html", urls  # the token: framed (after the redirect)
        assert urls["f1"].startswith("chrome-error://"), urls  # no token: refused, as before
        assert urls["f2"] == v.embed_url + "r0/index.html", urls
        browser.switch_to.frame(browser.find_element("id", "f0"))
        link = wait(browser, 'main a[href^="r0/"]')[0]
        link.click()  # a link in the frame stays under the token, and framed
        wait(browser, "table.sortable tbody tr")
        assert browser.execute_script("return document.URL") == v.embed_url + "r0/index.html"
        browser.switch_to.default_content()

        browser.get(hostile.origin + "/")  # the same URLs, token and all, from another site
        urls = _settle(browser, ["f0", "f1", "f2"])
        assert all(u.startswith("chrome-error://") for u in urls.values()), urls
    finally:
        browser.switch_to.default_content()
        v.stop()
        notebook.stop()
        hostile.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_in_jupyterlab_a_cells_view_shows_inline(runs, browser, tmp_path):
    """JupyterLab started here (its server on 127.0.0.1, opened in Chromium as
    localhost: the loopback alias its kernel's view must allow too); a notebook's
    cell calls view() as result.view() does, and its output frame holds the view."""
    pytest.importorskip("jupyterlab")
    pytest.importorskip("ipykernel")
    root = tmp_path / "lab"
    root.mkdir()
    cell = (f"from tension.core.api.results import serve_view\n"
            f"v = serve_view({str(runs.a)!r}, '127.0.0.1', 0)  # what ScoreResult.view() calls\n"
            f"v")
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {}, "outputs": [],
                     "source": cell}],
          "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    (root / "view.ipynb").write_text(json.dumps(nb))
    token, port = secrets.token_hex(16), _free_port()
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTER_PLATFORM_DIRS": "1",
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"), "XDG_CACHE_HOME": str(home / ".cache")}
    for name in ("JPY_PARENT_PID", "JUPYTERHUB_SERVICE_PREFIX", "JUPYTERHUB_API_URL"):
        env.pop(name, None)
    log = (tmp_path / "lab.log").open("w")
    lab = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
                            "--expose-app-in-browser", "--ServerApp.port_retries=0", "--allow-root",
                            "--ServerApp.terminals_enabled=False", "--LabApp.news_url=None",
                            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
                           env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for(lambda: _get(f"{base}/api/status?token={token}")[0] == 200, lab, 90)
        browser.get(f"http://localhost:{port}/lab/tree/view.ipynb?token={token}")
        idle = ("const a = window.jupyterapp; const w = a && a.shell.currentWidget;"
                "const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;"
                "return !!(k && k.status === 'idle')")
        _wait_for(lambda: browser.execute_script(idle), lab, 120)
        browser.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        frames = wait(browser, ".jp-OutputArea-output iframe", timeout=90)
        src = frames[0].get_attribute("src")
        assert src.startswith("http://127.0.0.1:") and src.count("/") == 4, src  # http://127.0.0.1:P/TOKEN/
        browser.switch_to.frame(frames[0])
        try:
            rows = wait(browser, "main a", timeout=30)  # the view's page, drawn in the notebook's frame
            assert any(str(runs.a) in r.text for r in rows), [r.text for r in rows]
            assert browser.execute_script("return document.URL") == src + "index.html"
        finally:
            browser.switch_to.default_content()
    finally:
        lab.terminate()
        try:
            lab.wait(timeout=30)
        except subprocess.TimeoutExpired:
            lab.kill()
            lab.wait()
        log.close()
        print(f"jupyter lab's log: {tmp_path / 'lab.log'}")


def _wait_for(ready, proc: subprocess.Popen, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"jupyter lab exited {proc.returncode} (its log is printed below)")
        try:
            if ready():
                return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"not ready within {timeout} s")
