"""`tension-run view`: a local web app over run folders and their LMDB cache.

    score_run.py     a score run: corpus statistics, a story's text and curve, a position's endings
    fairplay_run.py  a fairplay run: reading curves per reader, know-it-all continuations
    compare_runs.py  two score runs of the same stories, B − A per story and position
    site.py          every page and JSON document by path (server and export alike)
    app.py           the aiohttp server (127.0.0.1)
    export.py        the same pages as static files
    background.py    the server in a thread of this process (the API's result.view())
    static/          the one script and style sheet the pages load

The view reads run folders, the reports layer and the cache; it imports no
pipeline. What it needs from a pipeline (rebuilding a run's requests to find its
cached records) it is given by the CLI as a `recall` factory.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tension.core.errors import InputError
from tension.core.view.fairplay_run import CheckpointRecallFactory, FairPlayRun
from tension.core.view.score_run import RecallFactory, ScoreRun, Stores

if TYPE_CHECKING:  # the export (and its imports) load only when exporting
    from tension.core.view.export import ExportSize

__all__ = ["open_runs"]


def open_runs(dirs: list[str], stores: Stores, score_recall: RecallFactory | None = None,
              fairplay_recall: CheckpointRecallFactory | None = None, cache: str | None = None,
              n_resamples: int = 10_000) -> list[ScoreRun | FairPlayRun]:
    """Each folder as a score or fairplay run; InputError names a folder that is neither."""
    runs: list[ScoreRun | FairPlayRun] = []
    for d in dirs:
        p = Path(d)
        if not p.is_dir():
            raise InputError(str(p), 0, None, "no such folder")
        if any((p / n).is_file() for n in ("readers.jsonl", "readers.partial.jsonl", "fairplay_run.json")):
            runs.append(FairPlayRun(p, stores, fairplay_recall, cache))
        elif any((p / n).is_file() for n in ("positions.jsonl", "positions.partial.jsonl")):
            runs.append(ScoreRun(p, stores, score_recall, cache, n_resamples))
        else:
            raise InputError(str(p), 0, None, "not a run folder: no positions.jsonl (score) or readers.jsonl "
                             "(fairplay) here")
    return runs


def view(dirs: list[str], *, host: str = "127.0.0.1", port: int = 8780, cache: str | None = None,
         export_dir: str | None = None, endings: bool = False, score_recall: RecallFactory | None = None,
         fairplay_recall: CheckpointRecallFactory | None = None, say=print) -> ExportSize | None:
    """Serve the runs' pages on host:port until interrupted, or with `export_dir`
    write them there as static files (`endings`: with the endings behind each point)
    and return what was exported."""
    import asyncio
    import sys

    from tension.core.view.export import export
    from tension.core.view.site import Site

    if export_dir is not None:
        from tension.core.view.export import check_target

        check_target(Path(export_dir))  # before the runs are read: a folder it must not replace
    stores = Stores()
    try:
        runs = open_runs(dirs, stores, score_recall, fairplay_recall, cache)
        for r in runs:
            for n in r.notes:
                say(f"note: {r.dir}: {n}")
        if export_dir is not None:
            size = export(Site(runs, "export", endings), export_dir, say)
            say(f"open {Path(export_dir) / 'index.html'} in a browser (no server needed)")
            return size
        # the server's modules only to serve (aiohttp: ≈ 0.2 s of an export's start)
        from tension.core.signals import python_sigint
        from tension.core.view.app import is_loopback, serve

        if not is_loopback(host):
            print(f"warning: --host {host} serves the story texts, every ending and verdict, and the run folders' "
                  "paths to anyone who can reach this address, without authentication; the default 127.0.0.1 "
                  "serves this machine only", file=sys.stderr, flush=True)
        with python_sigint():  # asyncio's Ctrl-C handler, over Python's (core/signals.py)
            asyncio.run(serve(Site(runs), host, port,
                              lambda url: say(f"view: {url}  ({len(runs)} run(s); Ctrl-C stops it)")))
        return None
    finally:
        stores.close()
