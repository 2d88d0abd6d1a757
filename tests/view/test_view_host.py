"""The view answers only the names it serves on (issue 36, S3: DNS rebinding), on
every route, and sends the hardening headers with every answer.

The view is served from a thread of this process (view_fixtures.ViewHere: the server
of a notebook's `result.view()`, the same aiohttp app and `Host` check as `tension-run
view`, bound to the host given): the subject is its answers, not the process."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from view_fixtures import ViewHere

from tension.core.view.app import HEADERS, served_names
from tension.core.view.site import _PATHS

# one path of each route the view serves (r0, r1: score runs; r2: the fair-play run)
ROUTES = {
    "runs": "index.html", "run": "r0/index.html", "story": "r0/story/story-000.html",
    "compare": "compare/r0-r1.html", "api_corpus": "api/r0/corpus.json", "api_fairplay": "api/r2/fairplay.json",
    "api_story": "api/r0/story/story-000.json", "api_endings": "api/r0/endings/story-000/1.json",
    "api_continuations": "api/r2/continuations/w1/3.json", "api_compare": "api/compare/r0-r1.json",
    "static": "static/view.js",
    # the audit's labelling page (issue 60): these runs have no audit sample, so each is a 404, refused first
    # for a foreign Host as every route is (tests/view/test_audit_view.py has a run with one)
    "audit": "r0/audit.html", "api_audit_state": "api/r0/audit/ann/state.json",
    "api_audit_item": "api/r0/audit/item/0.json",
}
PATHS = ["", *ROUTES.values(), "no/such/page.html", "api/r9/corpus.json"]  # the root's redirect, and not-founds


def test_the_routes_listed_are_every_route_the_view_serves():
    assert set(ROUTES) == {name for _, name in _PATHS}


def _get(viewer: ViewHere, path: str, host: str | None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(viewer.url + path, headers={"Host": host} if host else {})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.mark.parametrize("path", PATHS)
def test_every_route_refuses_a_foreign_host(viewer, path):
    port = viewer.url.rsplit(":", 1)[1].rstrip("/")
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", f"localhost.evil:{port}"):
        status, headers, body = _get(viewer, path, host)
        assert status == 421, (path, host, status)
        assert b"story" not in body and b"endings" not in body  # nothing of the run
        assert headers.get("X-Content-Type-Options") == "nosniff"
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST.:{port}", "localhost", None):
        status, headers, _ = _get(viewer, path, host)
        assert status != 421, (path, host)
        assert status in (200, 302, 404), (path, host, status)


@pytest.mark.parametrize("path", PATHS)
def test_every_answer_carries_the_hardening_headers(viewer, path):
    status, headers, _ = _get(viewer, path, None)
    for name, value in HEADERS.items():
        assert headers.get(name) == value, (path, status, name)
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]


def test_the_names_served_are_the_loopback_ones_and_the_host_given():
    assert served_names("127.0.0.1") == {"127.0.0.1", "localhost", "::1"}
    assert served_names("[::1]") == {"127.0.0.1", "localhost", "::1"}
    assert "view.lan" in served_names("view.lan.") and "evil.example" not in served_names("view.lan")
    assert "192.168.1.7" in served_names("192.168.1.7")


def test_a_view_on_another_host_answers_that_name(runs):
    v = ViewHere(runs.a, host="::1")
    try:
        port = v.url.rsplit(":", 1)[1].rstrip("/")
        assert _get(v, "index.html", f"[::1]:{port}")[0] == 200
        assert _get(v, "index.html", f"evil.example:{port}")[0] == 421
    finally:
        v.stop()
