"""The view's labelling page of an audit (issue 60, core/view/labelling.py) by its HTTP answers:
blind (no judge's answer in the page or an item), writes refused without the view's token,
from a foreign Host or another origin, too large or not JSON; labels kept across a restart of
the view; two annotators at once get the shared items both and different other items. The
browser test of the same page is test_audit_browser.py (slow)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from audit_run import scored_run  # tests/audit_run.py
from view_fixtures import ViewHere

from tension.core.inputs import labels as lab
from tension.testing.cli import run_here


@pytest.fixture(scope="module")
def audited(tmp_path_factory) -> Path:
    run = scored_run(tmp_path_factory.mktemp("audit-view"))
    r = run_here("audit", "sample", run, "--size", 40, "--shared", 10)
    assert r.returncode == 0, r.stderr
    return run


def call(url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, {"text": raw.decode()}


def page_data(v: ViewHere) -> dict:
    status, body = v.get("r0/audit.html")
    assert status == 200
    return json.loads(re.search(rb'<script id="data" type="application/json">(.*?)</script>', body, re.S).group(1))


def post(v: ViewHere, label: dict, token: str | None, headers: dict | None = None) -> tuple[int, dict]:
    h = {"Content-Type": "application/json", **({"X-Tension-Token": token} if token is not None else {}),
         **(headers or {})}
    return call(v.url + "api/r0/audit/label", json.dumps(label).encode(), h)


def test_the_page_is_blind_and_writes_need_the_token_host_and_origin(audited):
    s = lab.read_sample(audited)
    v = ViewHere(audited)
    try:
        d = page_data(v)
        assert d["kind"] == "label" and d["items"] == 40 and d["shared"] == 10 and len(d["token"]) >= 32
        status, body = v.get("r0/audit.html")
        assert b"judge_raw" not in body and b'"judge"' not in body
        _, item = v.json("api/r0/audit/item/0.json")
        assert set(item) == {"index", "key", "story", "k", "pct", "shared", "prefix", "continuation", "predicted"}
        _, st = v.json("api/r0/audit/ann/state.json")
        assert st["next"] == 0 and st["done"] == 0 and st["left"] == 40
        key = s.items[0].key
        good = {"annotator": "ann", "key": key, "label": "matches"}
        port = v.url.rsplit(":", 1)[1].rstrip("/")
        refused = [post(v, good, None), post(v, good, "x" * 32),
                   post(v, good, d["token"], {"Origin": "http://evil.example"}),
                   post(v, good, d["token"], {"Origin": "null"}),
                   post(v, good, d["token"], {"Host": f"evil.example:{port}"}),
                   post(v, good, d["token"], {"Content-Type": "text/plain"}),
                   call(v.url + "api/r0/audit/label", b"{" + b" " * 5000 + b"}",
                        {"Content-Type": "application/json", "X-Tension-Token": d["token"]})]
        assert [r[0] for r in refused] == [403, 403, 403, 403, 421, 415, 413]
        assert "token" in refused[0][1]["error"]
        assert not lab.labels_path(audited).exists()  # nothing written
        bad = [post(v, {**good, "label": "maybe"}, d["token"]), post(v, {**good, "key": "00"}, d["token"]),
               post(v, {**good, "annotator": "a/b"}, d["token"]), post(v, {"annotator": "ann"}, d["token"])]
        assert [r[0] for r in bad] == [400, 400, 400, 400]
        assert "expected one of matches" in bad[0][1]["error"]
        status, st = post(v, good, d["token"], {"Origin": v.url.rstrip("/")})
        assert status == 200 and st["done"] == 1 and st["labelled"] == [{"index": 0, "label": "matches"}]
        got, _ = lab.read_labels(audited)
        assert [(g.key, g.annotator, g.label, g.source) for g in got] == [(key, "ann", "matches", "view")]
    finally:
        v.stop()
    # another view (a restart) has another token, and the label is still there
    v2 = ViewHere(audited)
    try:
        assert page_data(v2)["token"] != d["token"]
        assert post(v2, good, d["token"])[0] == 403
        _, st = v2.json("api/r0/audit/ann/state.json")
        assert st["done"] == 1 and st["next"] == 1
        assert page_data(v2)["annotators"] == {"ann": 1}
    finally:
        v2.stop()


def test_two_annotators_share_the_shared_items_and_split_the_rest(audited, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(audited, run)
    lab.labels_path(run).unlink(missing_ok=True)
    s = lab.read_sample(run)
    v = ViewHere(run)
    try:
        token = page_data(v)["token"]
        seen = {"ann": [], "bo": []}
        states = {who: v.json(f"api/r0/audit/{who}/state.json")[1] for who in seen}
        while any(st["next"] is not None for st in states.values()):
            for who, st in states.items():  # turn by turn, as two people at once
                if st["next"] is None:
                    continue
                it = s.items[st["next"]]
                seen[who].append(st["next"])
                status, states[who] = post(v, {"annotator": who, "key": it.key,
                                               "label": "does-not-match" if st["next"] % 3 else "cant-tell"}, token)
                assert status == 200
        assert set(seen["ann"]) & set(seen["bo"]) == set(range(10))  # the shared items, both
        assert set(seen["ann"]) | set(seen["bo"]) == set(range(40))  # every item, the others once
        assert len(seen["ann"]) + len(seen["bo"]) == 50
    finally:
        v.stop()


def test_a_run_without_a_sample_and_the_export_have_no_labelling_page(audited, tmp_path):
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(audited, bare, ignore=shutil.ignore_patterns("audit"))
    v = ViewHere(bare, audited)
    try:
        status, body = v.get("r0/audit.html")
        assert status == 404 and b"audit sample" in body
        _, runs = v.get("index.html")
        data = json.loads(re.search(rb'<script id="data" type="application/json">(.*?)</script>', runs, re.S).group(1))
        assert [r["audit"] for r in data["runs"]] == [False, True]
    finally:
        v.stop()
    out = tmp_path / "site"
    r = run_here("view", audited, "--export", out)
    assert r.returncode == 0, r.stderr
    assert not (out / "r0" / "audit.html").exists()
