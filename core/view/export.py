"""`view RUN --export DIR`: the same pages as static files (HTML with inline JSON,
the script and the style sheet), to open from a folder without a server. The
endings behind each point (and the know-it-all's continuations) go in only when
asked, one script file per story, since a paper-scale run holds 100 endings per
position: their size is measured and reported before anything is written."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path

import msgspec

from tension.core.errors import ConfigError
from tension.core.inputs.jsonl import atomic_write
from tension.core.signals import raise_if_stopped
from tension.core.view.site import STATIC, Site, inline_json

__all__ = ["ExportSize", "export", "endings_files", "check_target", "EXPORT_MARKS"]

EXPORT_MARKS = ("index.html", "static/view.js")  # files every export holds


class ExportSize(msgspec.Struct, kw_only=True):
    pages: int
    page_bytes: int
    endings_files: int
    endings_bytes: int
    # score positions whose endings were exported, and how many of them the cache could
    # give (fewer: `view --export --endings` says how many it could not, in which
    # stories, and why, the first reason: `unread`; and exits 1, core/cli/view.py)
    positions: int = 0
    positions_read: int = 0
    unread: str | None = None
    # the stories with positions whose endings could not be read: story (its run folder
    # first when the export holds several score runs) -> how many positions
    unread_stories: dict[str, int] = {}


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
    several = sum(r.kind == "score" for r in site.runs) > 1
    for i, r in enumerate(site.runs):
        if r.kind == "score":
            for sid, slug in r.slug.items():
                endings = r.all_endings(sid)
                if size is not None:
                    unread = [e for e in endings.values() if not e["cached"]]
                    size.positions += len(endings)
                    size.positions_read += len(endings) - len(unread)
                    if unread:
                        size.unread = size.unread or unread[0].get("message")
                        size.unread_stories[f"{r.dir}: {sid}" if several else sid] = len(unread)
                out[f"r{i}/endings/{slug}.js"] = _script("endings", slug, endings)
        else:
            for s in r.page()["stories"]:
                data = {p: await r.continuations(s["id"], p) for p in s["checkpoints"]}
                out[f"r{i}/continuations/{s['slug']}.js"] = _script("continuations", s["slug"], data)
    return out


def check_target(out: Path) -> None:
    """Refuse a folder an export must not replace: one that holds files and is no
    export (an export is written beside it and renamed into its place whole)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--export {out}: not a folder")
    if out.is_dir() and any(out.iterdir()) and not all((out / f).is_file() for f in EXPORT_MARKS):
        raise ConfigError(f"--export {out}: the folder holds files and is no view export (no index.html and "
                          "static/view.js in it), which the export would replace: give a new or empty folder")


def export(site: Site, out_dir: str | Path, say: Callable[[str], None] = print) -> ExportSize:
    """Write the site into `out_dir`; `site.with_endings` adds the endings files.

    Written whole or not at all: the files go into a hidden sibling folder,
    renamed to `out_dir` once every one is written (an earlier export there is
    replaced then). Interrupted, the sibling is removed and `out_dir` is as it was:
    no folder ever looks like a whole export that is not one."""
    out = Path(out_dir)
    check_target(out)
    pages = asyncio.run(_pages(site))
    size = ExportSize(pages=len(pages), page_bytes=sum(map(len, pages.values())), endings_files=0, endings_bytes=0)
    extra = asyncio.run(endings_files(site, size)) if site.with_endings else {}
    size.endings_files, size.endings_bytes = len(extra), sum(map(len, extra.values()))
    say(f"writing {size.pages} pages ({size.page_bytes / 1e6:.1f} MB)"
        + (f" and {size.endings_files} endings files ({size.endings_bytes / 1e6:.1f} MB)" if extra else
           "; endings left out (--endings adds them)") + f" to {out}/")
    partial = out.with_name(f".{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)  # what an earlier interrupted export left
    try:
        for p, body in {**pages, **extra}.items():
            atomic_write(partial / p, body)
        raise_if_stopped()  # a stop whose KeyboardInterrupt was lost (in an import): the export is not whole
        _replace(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return size


def _replace(new: Path, out: Path) -> None:
    """Put the folder `new` at `out`, in place of the export (or empty folder) there."""
    if not out.exists():
        new.rename(out)
        return
    old = out.with_name(f".{out.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    out.rename(old)
    new.rename(out)
    shutil.rmtree(old, ignore_errors=True)
