"""What the verbs print that more than one of them prints: error lists, the
end-of-run line of a stopped run, replica events, the fair-play summary."""

from __future__ import annotations

import sys
from collections.abc import Iterable

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_INTERRUPTED", "print_errors", "print_stopped",
           "print_replica_events", "print_fairplay_summary"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def print_errors(errors: Iterable[object]) -> None:
    for e in errors:
        print(f"error: {e}", file=sys.stderr)


def print_stopped(error: str | None, kept: str) -> None:
    """A run that stopped on an error: the error, and that a rerun continues.
    ``kept`` says what the cache holds ("work is", "answers are")."""
    print(f"error: {error}\nCompleted {kept} in the cache; rerun the same command to continue where this run "
          "stopped.", file=sys.stderr)


def print_replica_events(summary) -> None:
    for event in summary.replica_events:
        print(f"warning: {event}", file=sys.stderr)
    for role, figs in summary.replicas.items():
        if len(figs) > 1:
            print(f"{role} servers: " + ", ".join(
                f"{f['url']} {f['requests']} req" + ("" if f["up"] else " (out)") for f in figs), file=sys.stderr)


def print_fairplay_summary(summary) -> int:
    """The fair-play metrics' warnings, errors, group table and files; the exit status."""
    for w in summary.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print_errors(summary.errors)
    md = summary.out / "groups.md"
    if md.exists():
        print(md.read_text())
    print(f"{summary.stories} stories -> {summary.out}/: " + ", ".join(summary.files)
          + f", fairplay.json, {summary.plots} plots in plots/")
    if summary.errors:
        print(f"{len(summary.errors)} line(s) failed; see the errors above", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
