"""The `tension-run` command. Each verb calls the library function of the same
name; the cli only parses flags, prints, and chooses the exit status.

Exit status (core/errors.exit_status for a run, core/errors.status_of for an
error: its kind alone decides, in every verb): 0 the run produced everything asked
for; 1 something asked for is missing (an input missing or malformed, a bad
record, a failed item, nothing to produce; the rest was done and written); 2 bad
usage or configuration (a damaged cache among them); 130 interrupted.

    flags.py      flags built from the settings Structs; one value per flag
    messages.py   what several verbs print; the exit statuses
    score.py      score, estimate, bench        generate.py   generate
    fairplay.py   fairplay, fairplay-metrics    reports.py    metrics, report, compare
    serve.py      serve, demo                   view.py       view
    route.py      route                         precision.py  subsample
    cache.py      cache stats; the five cache verbs (VERBS)
    cache_damage.py  cache verify, recover      cache_drop.py cache drop
    cache_merge.py   cache merge                cache_given.py the cache folder every cache verb is given
    network_fs.py --cache-on-network-fs, of every verb opening a cache
    audit.py      audit sample, label, export, import, report

Building the parser imports no numba, numpy, scipy or aiohttp: a verb imports
its library modules when it runs.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import textwrap
from collections.abc import Sequence

from tension.core.cli import audit, cache, fairplay, generate, precision, reports, route, score, serve, view
from tension.core.cli.flags import Once, Verb
from tension.core.cli.messages import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, print_error
from tension.core.cli.network_fs import OPENS_CACHE, network_fs_flag
from tension.core.errors import NO_ROOM, STOPPED, ConfigError, StopNote, TensionError, cannot_write, status_of
from tension.core.redact import redact_argv

__all__ = ["main", "build_parser", "VERBS", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_INTERRUPTED"]

VERBS: list[Verb] = [network_fs_flag(v) if v.name in OPENS_CACHE else v
                     for v in (*score.VERBS, *generate.VERBS, *fairplay.VERBS, *reports.VERBS, *serve.VERBS,
                               *route.VERBS, *cache.VERBS, *view.VERBS, *precision.VERBS, *audit.VERBS)]
# the help of the verbs that group others ("cache stats")
GROUPS = {"cache": "inspect, verify, recover, drop and merge records of the LMDB cache", "audit": audit.GROUP_HELP}

EPILOG = """\
Each command's --help lists its flags with their defaults (the papers' settings).

exit status, by the kind of error, the same in every command: 0 the run produced
everything asked for; 1 something asked for is missing (an input file or folder
missing or malformed, a bad record, a failed item, nothing to produce; the rest
was done and written); 2 bad usage or configuration (a bad flag or config value,
a file a flag names missing, a damaged cache); 130 interrupted.

environment: OPENAI_API_KEY holds the API key of the servers; XDG_CACHE_HOME
moves ~/.cache (the LMDB cache, the embedded server); OPENAI_BASE_URL names the
server when no --base-url is given (before a running embedded server)."""


class _Version(argparse.Action):
    """--version, with the version looked up only when asked for."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog} {_version()}")
        parser.exit()


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The CLI's parser. Given a command line that names a verb, only that verb is in it,
    with its flags, help and epilog: every verb's flags took 12 ms of each start, and a
    parser for each other verb's line of the top-level help 4 ms more (a test process that
    runs main() thousands of times paid it each time). Nothing a named verb's command line
    prints shows the other verbs; a line that names none gets them all (the top-level
    help, argparse's "invalid choice")."""
    named = _named_verb(argv)
    parser = argparse.ArgumentParser(
        prog="tension-run", description="Measure narrative tension in stories with the 100-Endings metric.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    nested = {}
    for verb in VERBS:
        if named is not None and named != verb.name:
            continue
        *group, name = verb.name.split()
        where = sub
        if group:
            if group[0] not in nested:
                p = sub.add_parser(group[0], help=GROUPS[group[0]], description=GROUPS[group[0]])
                nested[group[0]] = p.add_subparsers(dest=f"{group[0]}_command", metavar="SUBCOMMAND", required=True)
            where = nested[group[0]]
        doc = _docstring(verb.run)
        line = doc.split("\n\n")[0].replace("%", "%%")
        p = where.add_parser(name, help=line, description=doc,
                             epilog=textwrap.fill(verb.epilog, 79) if verb.epilog else None,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        p.register("action", None, Once)  # every flag that takes a value takes it once
        verb.add_flags(p)
        p.set_defaults(func=verb.run)
    return parser


def _named_verb(argv: Sequence[str] | None) -> str | None:
    """The verb a command line names ("score", "cache drop"), or None when it names none
    that exists (no words, an option first, a typo): argparse then says so, with every verb."""
    if not argv or argv[0].startswith("-"):
        return None
    name = " ".join(argv[:2]) if argv[0] in GROUPS and len(argv) > 1 else argv[0]
    return name if any(v.name == name for v in VERBS) else None


def _docstring(func) -> str:
    """A function's docstring without its indentation (inspect.cleandoc, without
    importing inspect at start-up)."""
    first, _, rest = func.__doc__.partition("\n")
    return (first.strip() + "\n" + textwrap.dedent(rest)).strip()


def _interrupts() -> tuple[type[BaseException], ...]:
    # A verb that runs asyncio can end in CancelledError; asyncio is not imported at
    # start-up, and a verb that never imported it cannot raise it.
    asyncio = sys.modules.get("asyncio")
    return (KeyboardInterrupt, asyncio.CancelledError) if asyncio else (KeyboardInterrupt,)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tension-run")
    except PackageNotFoundError:
        return "unknown"


# The verbs whose --out is a file, not a folder
_OUT_FILE = frozenset({"generate"})


def _check_out_folder(args: argparse.Namespace) -> None:
    """A --out (or view's --export) folder given as an existing file is one usage error,
    exit 2, in every verb, before any work (as `score` always said it); so is a --out
    on (or in) the cache folder of a verb that opens one (the API's own check)."""
    from tension.core.api.settings import check_out_folder

    if args.command in _OUT_FILE:
        return
    export = getattr(args, "export", None)
    if isinstance(export, str):
        check_out_folder(export, flag="export")
    out = getattr(args, "out", None)
    if isinstance(out, str):
        check_out_folder(out, _cache_of(args) if hasattr(args, "cache") else None)


def _cache_of(args: argparse.Namespace) -> str:
    """The cache a verb will open: --cache, else its --config file's `cache`, else the default."""
    if isinstance(args.cache, str):
        return os.path.expanduser(args.cache)
    config = getattr(args, "config", None)
    if isinstance(config, str):
        try:
            from tension.core.config import read_config_file

            given = read_config_file(config).get("cache")
            if isinstance(given, str):
                return os.path.expanduser(given)
        except ConfigError:
            pass  # the verb reports the file's problem
    from tension.cache.store import default_path

    return str(default_path())


def main(argv: Sequence[str] | None = None) -> int:
    from tension.core.signals import as_command, stop_wins

    stop = StopNote()  # a run that is stopped says here what it kept
    STOPPED.set(stop)
    try:
        if argv is None:  # the process's own command line: the console script, python -m
            as_command()  # Ctrl-C and SIGTERM from here on: the "interrupted" below, exit 130
        argv = sys.argv[1:] if argv is None else argv
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        from tension.core.api.calls import by_the_cli

        _check_out_folder(args)
        # the verbs' run records keep this command line as their argv; an error a library
        # made of the user's stop is the stop (core/signals.py)
        with by_the_cli(), stop_wins():
            return args.func(args)
    except TensionError as e:
        print_error(e)
        return status_of(e)  # its kind says the status, the same in every verb
    except OSError as e:
        if e.errno in NO_ROOM:  # the run record itself, or a file outside a run's outputs
            print_error(cannot_write(e))
            return status_of(e)
        where = f" ({e.filename})" if e.filename else ""
        print(f"error: {e.strerror or e}{where}", file=sys.stderr)
        return status_of(e)
    except _interrupts():
        # Ctrl-C or SIGTERM: the run committed what completed before stopping, and
        # says what that was (core/errors.py StopNote); never "kept" for what was not.
        from tension.core.signals import command_line, quiet_finalizers

        quiet_finalizers()  # before the interrupted frames go (core/signals.py)
        argv = command_line()  # under `python -m` too, as it can be typed again
        shown = redact_argv(argv)
        if stop.kept is None:
            said = "interrupted. Resume with the same command:"
        elif stop.anything:
            said = f"interrupted: {stop.kept}. Resume with the same command; it asks only for what is missing:"
        else:
            said = ("interrupted: this run kept nothing (no answer had come back, nothing was complete; what earlier "
                    "runs kept is still in the cache). Resume with the same command:")
        print(said + "\n  " + " ".join(shlex.quote(a) for a in shown)
              + ("\n(its secrets are shown as ***: give them again)" if shown != argv else ""), file=sys.stderr)
        return EXIT_INTERRUPTED
