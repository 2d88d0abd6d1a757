"""A fairplay run folder as the view shows it: per story each reader's culprit and
distractor probability per paragraph (the reading curves of paper 003, from the
normalised distributions.jsonl the metrics wrote, else readers.jsonl), the
revelation, the story's scores from stories.csv, and per know-it-all checkpoint
the sampled continuations and the culprit each reveals (from the cache, through
a recall the CLI builds from the reader pipeline's own request builders)."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from tension.cache.store import Store
from tension.core.errors import InputError
from tension.core.view.named_files import unreadable
from tension.core.view.score_run import NotFound, Stores, open_recall, read_record, recorded_path, slugs

__all__ = ["FairPlayRun", "CheckpointRecallFactory", "SCORES"]

# The scores of stories.csv shown beside each story (docs/fairplay.md).
SCORES = ("S", "C_UB", "FP_UB", "C_ER", "FP_ER")

CheckpointRecallFactory = Callable[[dict[str, Any], Store], Any]


def _column(dist: list[list[float] | None], j: int | None) -> list[float | None]:
    return [None if p is None or j is None else round(p[j], 6) for p in dist]


class FairPlayRun:
    """One fairplay run folder, loaded once."""

    kind: Literal["fairplay"] = "fairplay"

    def __init__(self, path: str | Path, stores: Stores, recall: CheckpointRecallFactory | None = None,
                 cache: str | None = None):
        self.dir = Path(path)
        self.notes: list[str] = []
        self.record = read_record(self.dir / "fairplay_run.json", self.notes, "settings and stories file")
        self.stories = self._stories()
        self.slug = slugs([s["id"] for s in self.stories])
        self.scores = self._scores()
        self._recall_from = (stores, recall, cache)
        self._recall = None
        self.cache_note: str | None = None

    def _stories(self) -> list[dict[str, Any]]:
        for name in ("distributions.jsonl", "readers.jsonl"):
            p = self.dir / name
            if p.is_file():
                break
        else:
            raise InputError(str(self.dir), 0, None, "not a finished fairplay run: no readers.jsonl in this folder"
                             + (" (readers.partial.jsonl is here: the run did not finish)"
                                if (self.dir / "readers.partial.jsonl").is_file() else ""))
        out = []
        for lineno, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except ValueError as e:
                self.notes.append(f"{p}:{lineno}: not JSON ({e}); line left out")
        return out

    def _scores(self) -> dict[str, dict[str, str]]:
        p = self.dir / "stories.csv"
        if not p.is_file():
            self.notes.append(f"{p} is missing: no scores per story")
            return {}
        with p.open(encoding="utf-8", newline="") as f:
            return {row["id"]: {k: row.get(k, "") for k in SCORES} for row in csv.DictReader(f)}

    def page(self) -> dict[str, Any]:
        stories = []
        for s in self.stories:
            suspects = s.get("suspects", [])
            j_true = suspects.index(s["culprit"]) if s.get("culprit") in suspects else None
            j_dis = suspects.index(s["distractor"]) if s.get("distractor") in suspects else None
            readers = {name: {"culprit": _column(dist, j_true), "distractor": _column(dist, j_dis)}
                       for name, dist in s.get("readers", {}).items()}
            checkpoints = [i + 1 for i, p in enumerate(s.get("readers", {}).get("know_it_all", [])) if p is not None]
            stories.append({"id": s["id"], "slug": self.slug[s["id"]], "group": s.get("group"),
                            "suspects": suspects, "culprit": s.get("culprit"), "distractor": s.get("distractor"),
                            "revelation": s.get("revelation"), "L": s.get("L"), "readers": readers,
                            "checkpoints": checkpoints, "scores": self.scores.get(s["id"], {})})
        return {"kind": "fairplay", "dir": str(self.dir), "models": self.record.get("models", {}),
                "k": (self.record.get("config") or {}).get("k"), "stories": stories, "notes": self.notes}

    def recall(self):
        stories = recorded_path(self.record, self.record.get("stories_file"), self.dir)
        if self._recall is None and self.cache_note is None and stories and os.path.lexists(stories):
            self.cache_note = unreadable(stories, "the run's stories file")  # the recall reads it whole
        if self._recall is None and self.cache_note is None:
            self._recall, self.cache_note = open_recall(*self._recall_from, self.record, "continuations", self.dir)
        return self._recall

    async def continuations(self, slug_or_id: str, paragraph: int) -> dict[str, Any]:
        by_slug = {v: k for k, v in self.slug.items()}
        sid = by_slug.get(slug_or_id, slug_or_id)
        story = next((s for s in self.stories if s["id"] == sid), None)
        if story is None:
            raise NotFound(f"no story {slug_or_id!r} in the fairplay run {self.dir}")
        kia = story.get("readers", {}).get("know_it_all") or []
        if not 1 <= paragraph <= len(kia) or kia[paragraph - 1] is None:
            raise NotFound(f"story {sid!r} has no know-it-all checkpoint after paragraph {paragraph}")
        out: dict[str, Any] = {"id": sid, "paragraph": paragraph, "cached": False, "continuations": []}
        recall = self.recall()
        if recall is None:
            out["message"] = self.cache_note
            return out
        conts = await recall.checkpoint(sid, paragraph, story["suspects"])
        out["cached"] = any(c.error is None or c.paragraphs for c in conts)
        out["continuations"] = [{"paragraphs": c.paragraphs, "culprit": c.culprit, "error": c.error}
                                for c in conts]
        return out
