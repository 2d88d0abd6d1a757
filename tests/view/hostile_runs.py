"""A score run on hostile ground, made once per session by the CLI's `main()` in this
process, in the folder `score` runs in (tension.testing.cli run_here; review 2026-12-01,
9b, 9f, 6f, 9g): ids, a group and a text holding `<!--<script>` and other HTML, two
ids that differ only in case, a judge that says Y to everything (so run.json holds
warnings), and the corpus and cache given as paths relative to the folder `score`
ran in, which the view is not started from."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from view_fixtures import private_home

from tension.testing.cli import run_here
from tension.testing.corpus import write_story
from tension.testing.openai_server import LoopbackServer

HOSTILE_ID = "plain-<!--<script>"
CASE_IDS = ("Story", "story")
HOSTILE_GROUP = "<!--<script>g|x"
ENDINGS = 3


class HostileRun:
    def __init__(self, root: Path):
        self.root = root
        self.scored_in = root / "scored in"  # the folder `score` ran in; its paths are relative to it
        self.elsewhere = root / "elsewhere"  # where the view is started
        self.run = self.scored_in / "out dir"
        self.home = private_home(root)  # over this process's environment (run_here, tension_run)
        self.env = {**os.environ, "HOME": str(root / "home"), "XDG_CACHE_HOME": str(root / "home" / ".cache")}

    def positions(self) -> list[dict]:
        return [json.loads(x) for x in (self.run / "positions.jsonl").read_text().splitlines()]


def make_hostile_run(tmp_path_factory) -> HostileRun:
    """The hostile run (conftest's session fixture `hostile` makes it once)."""
    r = HostileRun(tmp_path_factory.mktemp("hostile"))
    r.scored_in.mkdir()
    r.elsewhere.mkdir()
    rng = random.Random(7)
    stories = [
        {"id": HOSTILE_ID, "group": HOSTILE_GROUP,
         "text": write_story(rng, 600).replace(". ", ". The old sign read <!--<script> hidden there. ", 1)},
        {"id": CASE_IDS[0], "group": "</script><script>document.title='pwned'</script>",
         "text": write_story(rng, 600) + " \u2028 A line separator, and & < > too."},
        {"id": CASE_IDS[1], "group": "<img src=x onerror=alert(1)>", "text": write_story(rng, 600)},
    ]
    (r.scored_in / "hostile.jsonl").write_text("".join(json.dumps(s) + "\n" for s in stories))
    with LoopbackServer(model=["test-gen", "test-judge"], misbehave="always_y") as srv:
        done = run_here("score", "hostile.jsonl", "--out", "out dir", "--base-url", srv.base_url, "--model",
                        "test-gen", "--endings", str(ENDINGS), "--cache", "cache", "--no-progress", env=r.home,
                        cwd=r.scored_in)
        assert done.returncode == 0, done.stderr
    return r
