"""What a finished fairplay run cached for one know-it-all checkpoint, read back
without a server: its K sampled continuations and the culprit the judge named
in each (`tension-run view` shows them).

The reader's own asking methods (`Readers.continue_paragraph`,
`Readers.continuation_culprit`) rebuild every request, so the keys are the run's;
they ask a `CacheReplay` (core/run/engine.py), which only reads the store and
stops at the first record it does not find. Nothing is ever sent.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tension.cache.store import Store
from tension.core.config.fairplay import FairPlayConfig, load_fairplay_config
from tension.core.inputs.whodunits import WhodunitStory, read_stories
from tension.core.pipelines.fairplay.readers import Readers
from tension.core.run.reads import CacheReplay, NotCached

__all__ = ["NotCached", "Continuation", "FairPlayRecall"]


class Continuation(msgspec.Struct, kw_only=True):
    paragraphs: list[str]  # the sampled paragraphs after the checkpoint, to the end
    culprit: str | None  # whom the judge says it reveals; None: nobody or an unusable answer
    error: str | None = None  # why there is no culprit, or what is not cached


class FairPlayRecall:
    """The cached continuations of one fairplay run, from its fairplay_run.json."""

    def __init__(self, run_record: dict[str, Any], store: Store):
        saved = run_record.get("config", {})
        known = set(FairPlayConfig.__struct_fields__)
        self.cfg = load_fairplay_config(None, {k: v for k, v in saved.items() if k in known and v is not None})
        stories, _, _ = read_stories(run_record["stories_file"], self.cfg)
        self.stories: dict[str, WhodunitStory] = {s.id: s for s in stories}
        self.readers = Readers(self.cfg, stories, CacheReplay(store))
        models = run_record.get("models", {})
        self.readers.reader_model = models.get("reader") or self.readers.reader_model
        self.readers.judge_model = models.get("judge") or self.readers.reader_model

    async def checkpoint(self, story_id: str, paragraph: int, suspects: list[str]) -> list[Continuation]:
        """The K continuations after `paragraph` of the story, `suspects` as the
        run used them (readers.jsonl)."""
        st = msgspec.structs.replace(self.stories[story_id], suspects=list(suspects))
        start = list(st.segments[:paragraph])
        try:
            first = await self.readers.continue_paragraph(st, start, None, self.cfg.k)
        except NotCached as e:
            return [Continuation(paragraphs=[], culprit=None, error=str(e))]
        out = []
        for k, text in enumerate(first):
            paragraphs = start + [text]
            try:
                res = await self.readers.continuation_culprit(st, paragraphs, k)
            except NotCached as e:
                out.append(Continuation(paragraphs=paragraphs[paragraph:], culprit=None, error=str(e)))
                continue
            culprit = None if res.error is not None or res.index is None else st.suspects[res.index]
            error = res.error or (None if culprit else "the judge names nobody")
            out.append(Continuation(paragraphs=paragraphs[paragraph:], culprit=culprit, error=error))
        return out
