"""What the verbs print that more than one of them prints: error lists, the
end-of-run line of a stopped run, replica events, the fair-play summary."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from tension.core.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_INTERRUPTED", "print_errors", "print_error", "print_stopped",
           "print_replica_events", "print_fairplay_summary", "print_answer_warnings"]



def print_errors(errors: Iterable[object]) -> None:
    for e in errors:
        print_error(e)


def print_error(error: object) -> None:
    """One error line on stderr, redacted (core/redact.py): server text may be in it."""
    from tension.core.redact import redact

    print(f"error: {redact(str(error))}", file=sys.stderr)


def print_stopped(error: str | None, kept: str) -> None:
    """A run that stopped on an error during its work: the error, and that the same
    command continues once the cause is gone. Errors no rerun can cure (a refused
    key, a missing model or endpoint, bad settings) are ConfigErrors and end with
    exit status 2 before this is reached. ``kept`` says what the cache holds
    ("work is", "answers are"). An error that says how to continue itself (a
    cache at its --cache-max-gb, a full disk) is printed alone."""
    print_error(error)
    if error is not None and "to continue" in error:
        return
    print(f"Completed {kept} in the cache; once the cause above is gone (the server answers again, the disk "
          "has space), rerun the same command to continue where this run stopped.", file=sys.stderr)


def print_answer_warnings(warnings) -> None:
    """The run's degenerate-answer warnings (core/reports/answer_warnings.py), one line each."""
    if warnings:
        from tension.core.reports.answer_warnings import warning_text

        for w in warnings:
            print(f"warning: {warning_text(w)}", file=sys.stderr)


def print_replica_events(summary) -> None:
    """The requests each replica answered; the events themselves (taken out,
    re-admitted) were told on stderr when they happened."""
    for role, figs in summary.replicas.items():
        if len(figs) > 1:
            print(f"{role} servers: " + ", ".join(
                f"{f['url']} {f['requests']} req" + ("" if f["up"] else " (out)") for f in figs), file=sys.stderr)


def print_fairplay_summary(summary) -> int:
    """The fair-play metrics' warnings, errors, group table and files; the exit status."""
    for w in summary.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print_errors(summary.errors)
    if not summary.files:  # no story read: the outputs there (an earlier run's) are not this run's
        print(f"nothing written to {summary.out}: no story could be read", file=sys.stderr)
        return EXIT_FAILED
    md = summary.out / "groups.md"
    if md.exists():
        print(md.read_text())
    print(f"{summary.stories} stories -> {summary.out}/: " + ", ".join(summary.files)
          + f", fairplay.json, {summary.plots} plots in plots/")
    if summary.errors:
        print(f"{len(summary.errors)} line(s) failed; see the errors above", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
