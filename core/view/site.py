"""Every page and JSON document of the view, by path, for the server and the
static export alike (so both show the same bytes):

    index.html                       the runs, and the pairs of score runs to compare
    rI/index.html                    run I: the corpus page (score) or the fair-play page
    rI/story/SLUG.html               a story of score run I
    compare/rI-rJ.html               score runs I (A) and J (B) side by side
    api/rI/corpus.json, api/rI/story/SLUG.json, api/rI/endings/SLUG/K.json,
    api/rI/fairplay.json, api/rI/continuations/SLUG/P.json, api/compare/rI-rJ.json
    static/view.js, static/view.css
    rI/audit.html, api/rI/audit/NAME/state.json, api/rI/audit/item/N.json, POST api/rI/audit/label
                                     the labelling page of a run's audit (labelling.py; served only)

A page is an HTML shell holding its data as inline JSON and the one script that
draws it: one request paints it, and it works from a file:// folder. Endings are
fetched when a position is opened (server), or read from a script file written
by `--export --endings`.
"""

from __future__ import annotations

import html
import re
import secrets
from importlib.resources import files
from typing import Any

import msgspec

from tension.core.errors import InputError, TensionError
from tension.core.view.compare_runs import comparison
from tension.core.view.fairplay_run import FairPlayRun
from tension.core.view.labelling import BadRequest, Labelling, label_page
from tension.core.view.score_run import NotFound, ScoreRun

__all__ = ["Site", "Document", "STATIC", "inline_json"]

STATIC = ("view.js", "view.css", "label.js", "label.css")
_json = msgspec.json.Encoder()
_PATHS = [
    (re.compile(r"^index\.html$"), "runs"),
    (re.compile(r"^r(\d+)/index\.html$"), "run"),
    (re.compile(r"^r(\d+)/story/([^/]+)\.html$"), "story"),
    (re.compile(r"^compare/r(\d+)-r(\d+)\.html$"), "compare"),
    (re.compile(r"^api/r(\d+)/corpus\.json$"), "api_corpus"),
    (re.compile(r"^api/r(\d+)/fairplay\.json$"), "api_fairplay"),
    (re.compile(r"^api/r(\d+)/story/([^/]+)\.json$"), "api_story"),
    (re.compile(r"^api/r(\d+)/endings/([^/]+)/(\d+)\.json$"), "api_endings"),
    (re.compile(r"^api/r(\d+)/continuations/([^/]+)/(\d+)\.json$"), "api_continuations"),
    (re.compile(r"^api/compare/r(\d+)-r(\d+)\.json$"), "api_compare"),
    (re.compile(r"^static/([a-z]+\.(?:js|css))$"), "static"),
    (re.compile(r"^r(\d+)/audit\.html$"), "audit"),
    (re.compile(r"^api/r(\d+)/audit/item/(\d+)\.json$"), "api_audit_item"),
    (re.compile(r"^api/r(\d+)/audit/([^/]+)/state\.json$"), "api_audit_state"),
]
_POSTS = [(re.compile(r"^api/r(\d+)/audit/label$"), "post_label")]


class Document(msgspec.Struct):
    status: int
    content_type: str
    body: bytes


# Inside a <script> element the HTML tokenizer, not JSON, decides where the data
# ends: `</script>` closes it and `<!--<script>` makes the next `</script>` not
# close it (the page goes blank). Escaped as \uXXXX, these characters mean the
# same to JSON.parse and nothing to the tokenizer; U+2028/2029 end a line in
# older JavaScript.
_INLINE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_INLINE_RE = re.compile("[<>&\u2028\u2029]")


def inline_json(data: Any) -> str:
    """`data` as JSON that is safe inside an HTML <script> element or a script file."""
    return _INLINE_RE.sub(lambda m: _INLINE[m.group()], _json.encode(data).decode())


def _json_doc(data: Any, status: int = 200) -> Document:
    return Document(status, "application/json", _json.encode(data))


class Site:
    """The pages of some run folders. `mode` is "server" (endings fetched from the
    api) or "export" (endings from script files, when `with_endings`)."""

    def __init__(self, runs: list[ScoreRun | FairPlayRun], mode: str = "server", with_endings: bool = False):
        self.runs = runs
        self.mode = mode
        self.with_endings = with_endings
        # the per-view write token (192 bits, new each start): the labelling page holds it, and
        # every write must carry it (core/view/app.py); a page of another site cannot read it
        self.token = secrets.token_urlsafe(24)
        self._labelling: dict[int, Labelling] = {}

    # -- dispatch ---------------------------------------------------------------------

    async def get(self, path: str) -> Document:
        """The document at `path` (relative, without the leading slash); a clear
        page (HTML) or JSON error for anything it does not have."""
        path = path.lstrip("/") or "index.html"
        for pattern, name in _PATHS:  # noqa: B007 (name is used after the break)
            m = pattern.match(path)
            if m:
                break
        else:
            return self.error(path, 404, f"there is no page {path!r} in this view")
        try:
            return await getattr(self, "_" + name)(*m.groups())
        except (NotFound, InputError) as e:
            return self.error(path, 404, str(e))
        except TensionError as e:
            return self.error(path, 500, str(e))

    async def post(self, path: str, body: bytes) -> Document:
        """A write (the view's only ones: labels); the app has checked the Host, the token and
        the size. JSON answers, errors included."""
        path = path.lstrip("/")
        for pattern, name in _POSTS:
            if m := pattern.match(path):
                try:
                    return await getattr(self, "_" + name)(*m.groups(), body)
                except BadRequest as e:
                    return _json_doc({"error": str(e)}, 400)
                except (NotFound, InputError) as e:
                    return _json_doc({"error": str(e)}, 404)
                except TensionError as e:
                    return _json_doc({"error": str(e)}, 500)
        return _json_doc({"error": f"nothing to write at {path!r}"}, 404)

    def error(self, path: str, status: int, message: str) -> Document:
        if path.endswith(".json"):
            return _json_doc({"error": message}, status)
        depth = path.count("/")
        return self.page("not found" if status == 404 else "error", {"kind": "error", "message": message}, depth,
                         status)

    def run(self, i: str, kind: str | None = None):
        n = int(i)
        if n >= len(self.runs):
            raise NotFound(f"there is no run r{n} in this view ({len(self.runs)} run(s) given)")
        if kind and self.runs[n].kind != kind:
            raise NotFound(f"run r{n} ({self.runs[n].dir}) is a {self.runs[n].kind} run, not a {kind} run")
        return self.runs[n]

    # -- pages ----------------------------------------------------------------------------

    def page(self, title: str, data: dict[str, Any], depth: int, status: int = 200) -> Document:
        root = "../" * depth
        data = {**data, "root": root, "mode": self.mode, "with_endings": self.with_endings}
        payload = inline_json(data)
        body = (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
                f'<meta name="viewport" content="width=device-width, initial-scale=1">'
                f"<title>{html.escape(title)} · tension-run view</title>"
                f'<link rel="stylesheet" href="{root}static/view.css"></head>\n'
                f'<body><nav><a href="{root}index.html">runs</a></nav><main id="main"></main>\n'
                f'<script id="data" type="application/json">{payload}</script>\n'
                f'<script src="{root}static/view.js"></script></body></html>\n')
        return Document(status, "text/html", body.encode())

    async def _runs(self) -> Document:
        runs: list[dict[str, Any]] = [
            {"i": i, "kind": r.kind, "dir": str(r.dir), "stories": len(r.stories if r.kind == "fairplay" else r.curves),
             "unscored": 0 if r.kind == "fairplay" else len(r.unscored()), "notes": r.notes,
             "audit": self.mode == "server" and r.kind == "score" and Labelling.available(r.dir)}
            for i, r in enumerate(self.runs)]
        score = [r["i"] for r in runs if r["kind"] == "score"]
        pairs = [[a, b] for a in score for b in score if a < b]
        return self.page("runs", {"kind": "runs", "runs": runs, "pairs": pairs}, 0)

    async def _run(self, i: str) -> Document:
        r = self.run(i)
        if r.kind == "fairplay":
            return self.page(f"fair play: {r.dir.name}", {**r.page(), "run": int(i)}, 1)
        return self.page(f"corpus: {r.dir.name}", {**r.corpus(), "run": int(i)}, 1)

    async def _story(self, i: str, slug: str) -> Document:
        r = self.run(i, "score")
        data = {**r.story(slug), "run": int(i), "run_dir": str(r.dir)}
        return self.page(f"{data['id']}: {r.dir.name}", data, 2)

    async def _compare(self, i: str, j: str) -> Document:
        a, b = self.run(i, "score"), self.run(j, "score")
        return self.page(f"compare {a.dir.name} / {b.dir.name}", {**comparison(a, b), "run_a": int(i),
                                                                   "run_b": int(j)}, 1)

    # -- JSON ------------------------------------------------------------------------------

    async def _api_corpus(self, i: str) -> Document:
        return _json_doc(self.run(i, "score").corpus())

    async def _api_fairplay(self, i: str) -> Document:
        return _json_doc(self.run(i, "fairplay").page())

    async def _api_story(self, i: str, slug: str) -> Document:
        return _json_doc(self.run(i, "score").story(slug))

    async def _api_endings(self, i: str, slug: str, k: str) -> Document:
        return _json_doc(self.run(i, "score").endings(slug, int(k)))

    async def _api_continuations(self, i: str, slug: str, p: str) -> Document:
        return _json_doc(await self.run(i, "fairplay").continuations(slug, int(p)))

    async def _api_compare(self, i: str, j: str) -> Document:
        return _json_doc(comparison(self.run(i, "score"), self.run(j, "score")))

    # -- the audit's labelling page (labelling.py) -------------------------------------------

    def labelling(self, i: str) -> Labelling:
        if self.mode != "server":
            raise NotFound("the labelling page is served by a running view only (tension-run audit label RUN_DIR)")
        r = self.run(i, "score")
        if int(i) not in self._labelling:
            if not Labelling.available(r.dir):
                raise NotFound(f"run r{i} ({r.dir}) has no audit sample: draw one with `tension-run audit sample "
                               f"{r.dir}`")
            self._labelling[int(i)] = Labelling(r.dir)
        return self._labelling[int(i)]

    async def _audit(self, i: str) -> Document:
        data = {**self.labelling(i).page(), "run": int(i), "token": self.token, "root": "../", "mode": self.mode}
        return Document(200, "text/html", label_page(f"label: {self.run(i).dir.name}", data, inline_json(data), 1))

    async def _api_audit_state(self, i: str, name: str) -> Document:
        return _json_doc(self.labelling(i).state(name))

    async def _api_audit_item(self, i: str, n: str) -> Document:
        return _json_doc(self.labelling(i).item(int(n)))

    async def _post_label(self, i: str, body: bytes) -> Document:
        return _json_doc(self.labelling(i).write(body))

    async def _static(self, name: str) -> Document:
        if name not in STATIC:
            raise NotFound(f"no file static/{name}")
        kind = "text/javascript" if name.endswith(".js") else "text/css"
        return Document(200, kind, files("tension.core.view").joinpath("static", name).read_bytes())
