"""`view RUN --export DIR`: the same pages as static files (HTML with inline JSON,
the script and the style sheet), to open from a folder without a server. The
endings behind each point (and the know-it-all's continuations) go in only when
asked, one script file per story, since a paper-scale run holds 100 endings per
position: their size is measured and reported before anything is written."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import msgspec

from tension.core.inputs.jsonl import atomic_write
from tension.core.view.site import STATIC, Site, inline_json

__all__ = ["ExportSize", "export", "endings_files"]


class ExportSize(msgspec.Struct, kw_only=True):
    pages: int
    page_bytes: int
    endings_files: int
    endings_bytes: int
    # score positions whose endings were exported, and how many of them the cache could
    # give (none read: `view --export --endings` fails, saying why: `unread`)
    positions: int = 0
    positions_read: int = 0
    unread: str | None = None


def _script(name: str, key: str, data: object) -> bytes:
    # A script, not JSON: a page opened from file:// may load scripts but not fetch files.
    return f"window.tensionView.loaded({inline_json(name)}, {inline_json(key)}, {inline_json(data)});\n".encode()


async def _pages(site: Site) -> dict[str, bytes]:
    paths = ["index.html"] + [f"static/{n}" for n in STATIC]
    for i, r in enumerate(site.runs):
        paths.append(f"r{i}/index.html")
        if r.kind == "score":
            paths += [f"r{i}/story/{s}.html" for s in r.slug.values()]
    score = [i for i, r in enumerate(site.runs) if r.kind == "score"]
    paths += [f"compare/r{a}-r{b}.html" for a in score for b in score if a < b]
    out = {}
    for p in paths:
        doc = await site.get(p)
        out[p] = doc.body
    return out


async def endings_files(site: Site, size: ExportSize | None = None) -> dict[str, bytes]:
    """One script per score story (its positions' endings) and per fair-play story
    (its checkpoints' continuations); `size` counts the score positions and those
    whose endings the cache gave."""
    out = {}
    for i, r in enumerate(site.runs):
        if r.kind == "score":
            for sid, slug in r.slug.items():
                endings = r.all_endings(sid)
                if size is not None:
                    size.positions += len(endings)
                    size.positions_read += sum(bool(e["cached"]) for e in endings.values())
                    size.unread = size.unread or next((e.get("message") for e in endings.values()
                                                       if not e["cached"]), None)
                out[f"r{i}/endings/{slug}.js"] = _script("endings", slug, endings)
        else:
            for s in r.page()["stories"]:
                data = {p: await r.continuations(s["id"], p) for p in s["checkpoints"]}
                out[f"r{i}/continuations/{s['slug']}.js"] = _script("continuations", s["slug"], data)
    return out


def export(site: Site, out_dir: str | Path, say: Callable[[str], None] = print) -> ExportSize:
    """Write the site into `out_dir`; `site.with_endings` adds the endings files."""
    out = Path(out_dir)
    pages = asyncio.run(_pages(site))
    size = ExportSize(pages=len(pages), page_bytes=sum(map(len, pages.values())), endings_files=0, endings_bytes=0)
    extra = asyncio.run(endings_files(site, size)) if site.with_endings else {}
    size.endings_files, size.endings_bytes = len(extra), sum(map(len, extra.values()))
    say(f"writing {size.pages} pages ({size.page_bytes / 1e6:.1f} MB)"
        + (f" and {size.endings_files} endings files ({size.endings_bytes / 1e6:.1f} MB)" if extra else
           "; endings left out (--endings adds them)") + f" to {out}/")
    for p, body in {**pages, **extra}.items():
        atomic_write(out / p, body)
    return size
