"""Ideas for `generate` and scripted answers for its pipeline that show where they
came from (the warmup's seed, the beats' idea, the story's beats), so that a test can
check how the steps chain."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["IDEAS", "LONG", "script_pipeline", "write_ideas"]

LONG = "The ferry left without her, and the harbour lights went out one by one. " * 4  # > 200 characters

IDEAS = [
    {"id": "lamp", "idea": "A lighthouse keeper finds a letter addressed to her, dated next year."},
    {"id": "bees", "idea": "Two beekeepers feud over a swarm that settles on the border fence.", "group": "rural"},
    {"id": "choir", "idea": "A choir loses its only tenor the week before the {winter} concert."},
]


def write_ideas(path: Path, ideas=IDEAS) -> Path:
    path.write_text("".join(json.dumps(i) + "\n" for i in ideas), encoding="utf-8")
    return path


def script_pipeline(srv) -> None:
    """Answers that show where they came from, so the chaining can be checked."""
    srv.script("extract 7 scene-level beats", lambda m, seed, i: f"WARMUP[{seed}] " + m[-1]["content"][7:40])
    srv.script("to-do list of the most important", lambda m, seed, i: f"BEATS[{seed}] for "
               + m[-1]["content"].split("THIS story:\n\n", 1)[1][:30])
    srv.script("Write the story now.", lambda m, seed, i: f"STORY[{seed}] " + LONG)
