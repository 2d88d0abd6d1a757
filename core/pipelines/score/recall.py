"""What a finished score run cached for one position, read back without a server:
its n endings and each one's raw verdict (`tension-run view` shows them).

The requests are rebuilt by the run's own `ScoreRequests` from the settings and
model ids in its run.json, so the keys are those the run used; records are read
through the store's public `get`, so a change of record format reaches here too.
Nothing is sent: a position whose records are not in the cache says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from tension.cache.keys import request_key
from tension.cache.store import Store
from tension.core.config import ScoreConfig, load_config
from tension.core.pipelines.score.judge import Judge
from tension.core.pipelines.score.requests import ScoreRequests
from tension.core.prompts import score as prompts

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
        self.store = store
        self.requests = ScoreRequests(cfg, models.get("generation") or cfg.model or "",
                                      models.get("judge") or cfg.judge_model or "")
        self.judge = Judge(cfg, None, None)  # only its `answer` is used: how a raw verdict counts

    def position(self, sentences: Sequence[str], k: int) -> Recalled:
        reqs = self.requests
        rec = self.store.get("endings", request_key("chat", reqs.endings(sentences, k)))
        if rec is None:
            return Recalled(endings=None, raw=[], counted=[], verdicts=[], missing=0,
                            generation_model=reqs.gen_model, judge_model=reqs.judge_model)
        endings = list(rec.texts)
        head, tail = reqs.judge_parts(sentences, k)
        texts, logprobs = self._verdicts(head, tail, endings)
        counted = [None if t is None else self.judge.answer(t, lp) for t, lp in zip(texts, logprobs)]
        verdicts = []
        for e, c in zip(endings, counted):
            if not e.strip():
                verdicts.append("empty")
            elif c is None:
                verdicts.append("not cached")
            else:
                match, malformed = prompts.parse_verdict(c)
                verdicts.append("match" if match else "malformed" if malformed else "no match")
        return Recalled(endings=endings, raw=texts, counted=counted, verdicts=verdicts,
                        missing=verdicts.count("not cached"), generation_model=reqs.gen_model,
                        judge_model=reqs.judge_model)

    def _verdicts(self, head: str, tail: str, endings: list[str]):
        """Raw answers and first-token logprobs per ending: from the position's judged
        record, else from the verdict records (as the judge step reads them)."""
        judged = self.store.get("positions", self.requests.position_key(head, tail, endings))
        if judged is not None:
            return list(judged.texts), list(judged.first_logprobs or [None] * len(judged.texts))
        texts: list[str | None] = [None] * len(endings)
        logprobs: list[dict[str, float] | None] = [None] * len(endings)
        asked = self.requests.verdicts(head, tail, endings)
        recs = self.store.get_many("verdicts", [request_key("chat", r) for _, r in asked])
        for (i, _), r in zip(asked, recs):
            if r is not None:
                texts[i], logprobs[i] = r.text, r.first_logprobs
        return texts, logprobs


def _config(saved: dict[str, Any]) -> ScoreConfig:
    """The run's settings from its run.json; keys this version does not know (a
    run by another version) are left out rather than refused."""
    known = set(ScoreConfig.__struct_fields__)
    return load_config(None, {k: v for k, v in saved.items() if k in known and v is not None})
