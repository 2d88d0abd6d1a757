"""What a finished score run cached for one position, read back without a server:
its n endings and each one's raw verdict (`tension-run view` shows them).

A position's line in positions.jsonl names the cache keys it was scored from, so
its records are read by those keys, whatever the run's settings were. A run
written before the lines named them has its requests rebuilt by its own
`ScoreRequests` from the settings and model ids in its run.json. Either way the
records are read by score/lookup.py's walk, as the judge and `estimate` read
them. Nothing is sent: a position whose records are not in the cache says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from tension.cache.store import Store
from tension.core.config import ScoreConfig, load_config
from tension.core.pipelines.score.judge import counted
from tension.core.pipelines.score.lookup import Cached, lookup, lookup_at
from tension.core.pipelines.score.requests import ScoreRequests
from tension.core.prompts import score as prompts
from tension.core.run.reads import CacheReads

__all__ = ["Recalled", "ScoreRecall"]


class Recalled(msgspec.Struct, kw_only=True):
    """A position's endings and verdicts as the cache holds them. `endings` is None
    when the generation record is missing; a verdict is None for an empty ending
    (never judged) or one whose record is missing (`missing` counts those)."""

    endings: list[str] | None
    raw: list[str | None]  # the judge's answer per ending
    counted: list[str | None]  # the verdict the no-rate counted (with a logprobs judge, the favoured letter)
    verdicts: list[str]  # per ending: "match", "no match", "malformed", "empty" or "not cached"
    missing: int
    generation_model: str
    judge_model: str


class ScoreRecall:
    """The cached records of one score run, given its run.json and an open store."""

    def __init__(self, run_record: dict[str, Any], store: Store):
        cfg = _config(run_record.get("config", {}))
        models = run_record.get("models", {})
        self.cfg = cfg
        self.reads = CacheReads(store)
        self.requests = ScoreRequests(cfg, models.get("generation") or cfg.model or "",
                                      models.get("judge") or cfg.judge_model or "")

    def position(self, sentences: Sequence[str] | None, k: int, endings_key: str | None = None,
                 judged_key: str | None = None) -> Recalled:
        reqs = self.requests
        cached: Cached | None = None
        if endings_key is not None:
            cached = lookup_at(self.reads, bytes.fromhex(endings_key),
                               bytes.fromhex(judged_key) if judged_key is not None else None)
        if cached is None and sentences is not None:
            cached = lookup(self.reads, reqs, sentences, k)
        if cached is None or cached.endings is None or cached.answers is None:
            return Recalled(endings=None, raw=[], counted=[], verdicts=[], missing=0,
                            generation_model=reqs.gen_model, judge_model=reqs.judge_model)
        endings = list(cached.endings.texts)
        raw = cached.answers.texts
        votes = counted(self.cfg.judge_constraint, cached.answers)
        verdicts = []
        for e, c in zip(endings, votes):
            if not e.strip():
                verdicts.append("empty")
            elif c is None:
                verdicts.append("not cached")
            else:
                match, malformed = prompts.parse_verdict(c)
                verdicts.append("match" if match else "malformed" if malformed else "no match")
        return Recalled(endings=endings, raw=raw, counted=votes, verdicts=verdicts,
                        missing=verdicts.count("not cached"), generation_model=reqs.gen_model,
                        judge_model=reqs.judge_model)


def _config(saved: dict[str, Any]) -> ScoreConfig:
    """The run's settings from its run.json; keys this version does not know (a
    run by another version) are left out rather than refused."""
    known = set(ScoreConfig.__struct_fields__)
    return load_config(None, {k: v for k, v in saved.items() if k in known and v is not None})
