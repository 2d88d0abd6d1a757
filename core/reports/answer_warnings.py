"""Warnings that a run's answers are degenerate: the models did not do the task,
so the numbers computed from them carry little or no information.

The pipelines find them (core/pipelines/score/watch.py, core/pipelines/answer_checks.py);
they are printed at the end of the run, kept in its record (run.json `warnings`,
fairplay_run.json, STORIES.run.json) and shown in report.md. Each one says what
was seen, with counts, and what it means for the numbers (docs/reliability.md,
"Degenerate answers").
"""

from __future__ import annotations

from typing import Any

import msgspec

from tension.core.reports.markdown import md_text

__all__ = ["AnswerWarning", "warning_text", "markdown_section", "DEMO_CAVEAT"]

# What `tension-run demo` says after its numbers, whatever they are: the bundled
# model is far too small for the task (docs/embedded.md).
DEMO_CAVEAT = ("note: the bundled 135M model shows that the pipeline works, not what this story's tension is: "
               "its judge cannot tell a matching ending from another (it says yes to nearly every one), so these "
               "no-rates are near 0 and carry no information. For numbers, score with real models (README, "
               "`tension-run score --base-url`).")


class AnswerWarning(msgspec.Struct, kw_only=True):
    """One degenerate pattern of a run's answers."""

    check: str  # which guard found it, e.g. "judge_malformed" (docs/reliability.md lists them)
    seen: str  # what was seen, with counts
    meaning: str  # what it means for the numbers
    count: int  # answers (or positions, stories, values) showing it
    total: int  # out of


def warning_text(w: AnswerWarning | dict[str, Any]) -> str:
    """One line: what was seen, then what it means for the numbers."""
    if isinstance(w, dict):  # as read back from a run record
        w = msgspec.convert(w, AnswerWarning)
    return f"{w.seen} — {w.meaning} [{w.check}]"


def markdown_section(run: dict[str, Any]) -> list[str]:
    """report.md's "Warnings" lines from a run record; none when it has none."""
    found = run.get("warnings") or []
    if not found:
        return []
    return (["## Warnings: the models did not do the task as asked", "",
             "These numbers come from degenerate answers; read them with the warnings below "
             "(docs/reliability.md, \"Degenerate answers\").", ""]
            + [f"- {md_text(warning_text(w))}" for w in found] + [""])
