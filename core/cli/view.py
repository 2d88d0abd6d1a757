"""`view`: a local web app over run folders and their cache, or its static export."""

from __future__ import annotations

import contextlib
import signal
import sys

from tension.core.cli.flags import PORT, Number, Verb
from tension.core.cli.messages import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from tension.core.errors import status_of
from tension.core.signals import quiet_finalizers, stops_raise

__all__ = ["VERBS", "cmd_view", "DEFAULT_PORT"]

DEFAULT_PORT = 8780


def cmd_view(args) -> int:
    """Look at runs in a browser: corpus, stories with their curves and the endings behind each point,
    comparisons of two runs, fair-play reading curves. Serves 127.0.0.1 and prints the URL."""
    # An export is a task that stops part-way: Ctrl-C and SIGTERM alike, from the verb's first
    # statement on, each recorded, so that one whose KeyboardInterrupt an import swallowed still
    # stops it before its last rename (core/view/export.py). The server runs until it is stopped.
    try:
        with stops_raise(signal.SIGINT, signal.SIGTERM) if args.export is not None else contextlib.nullcontext():
            from tension.core.pipelines.recalls import fairplay_recall, score_recall
            from tension.core.view import view

            size = view(args.runs, host=args.host, port=args.port, cache=args.cache, export_dir=args.export,
                        endings=args.endings, score_recall=score_recall, fairplay_recall=fairplay_recall,
                        say=lambda m: print(m, flush=True))
    except BaseException as e:
        if status_of(e) != EXIT_INTERRUPTED:  # (KeyboardInterrupt, or asyncio's CancelledError)
            raise
        quiet_finalizers()  # before the interrupted frames go (core/signals.py)
        if args.export is None:
            print("view stopped", file=sys.stderr)
            return EXIT_OK
        # the export writes nothing to the cache: no "completed work is in the cache" here
        print(f"export interrupted: the export into {args.export} is incomplete and was not written ({args.export} "
              "is left as it was: an export is written whole or not at all); run the same command again",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if size is not None and size.positions_read < size.positions:
        # asked for the endings, and some (or all) could not be read: the export is not all that was asked
        print(f"error: {_unread(size)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


SHOWN_STORIES = 5  # the stories an export names whose positions' endings it could not read; the rest counted


def _unread(size) -> str:
    """What an export with endings could not read: how many positions, in which stories, the first reason."""
    if not size.positions_read:
        return (f"none of the {size.positions} positions' endings could be read ({size.unread}); the export holds "
                "the pages without them")
    lost = size.positions - size.positions_read
    stories = [f"{sid!r} ({n})" for sid, n in list(size.unread_stories.items())[:SHOWN_STORIES]]
    if len(size.unread_stories) > SHOWN_STORIES:
        stories.append(f"and {len(size.unread_stories) - SHOWN_STORIES} more")
    n = len(size.unread_stories)
    return (f"{lost} of {size.positions} positions' endings could not be read, in {n} "
            f"stor{'y' if n == 1 else 'ies'}: {', '.join(stories)} ({size.unread}); the export holds the other "
            f"{size.positions_read} positions' endings; each of these says why at its point")


def _view_flags(p) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="the --out folder of a score or fairplay run; two score runs of the same stories "
                        "also get a compare page")
    p.add_argument("--port", type=Number(int, PORT), default=DEFAULT_PORT,
                   help="port to serve on (default: %(default)s; "
                   "0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default: %(default)s, this machine only)")
    p.add_argument("--cache", metavar="PATH",
                   help="LMDB cache holding the runs' endings (default: the one each run.json names)")
    p.add_argument("--export", metavar="DIR", help="write the pages as static files into DIR instead of serving")
    p.add_argument("--endings", action="store_true",
                   help="with --export: include every position's endings and verdicts (the size is printed first)")


VERBS = [Verb("view", cmd_view, _view_flags, (), frozenset({"runs", "port", "host", "cache", "export", "endings"}))]
