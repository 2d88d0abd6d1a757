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

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from tension.cache.store import Store
from tension.core.config import ScoreConfig, load_config
from tension.core.config.score import RECORDED_BEFORE
from tension.core.errors import InputError
from tension.core.formats import PositionLine
from tension.core.inputs.corpus import read_corpus
from tension.core.inputs.segment import split_sentences
from tension.core.pipelines.score.judge import counted
from tension.core.pipelines.score.lookup import Cached, judge_ask, lookup_at, lookup_position
from tension.core.pipelines.score.requests import ScoreRequests
from tension.core.prompts import score as prompts
from tension.core.run.reads import CacheReads, chat_key, chunk_key

__all__ = ["recorded_cache", "Recalled", "ScoreRecall", "RunKeys", "run_keys", "run_record"]


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
            cached = lookup_position(self.reads, reqs, sentences, k)
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
    run by another version) are left out rather than refused, and settings it did
    not know have the value it was made with (RECORDED_BEFORE: a seeded run recorded
    without `seed_scheme` seeded every position with its seed)."""
    known = set(ScoreConfig.__struct_fields__)
    # as a fallback, not as flags: the record holds every setting, given by the user or not
    return load_config(None, {}, fallback={k: v for k, v in {**RECORDED_BEFORE, **saved}.items()
                                           if k in known and v is not None})


class RunKeys(msgspec.Struct, kw_only=True):
    """The cache keys of a score run folder's positions, per database (`cache drop
    --run`). With the run's corpus readable: every position of every story whose
    endings record (under the run's settings and models) the cache holds, with
    its judged record and each verdict's key, so the positions of a stopped run
    and those in flight when it stopped are found too; without it only the keys
    its lines in positions.jsonl and positions.partial.jsonl name (`note` says
    so: the verdict records cannot be named then)."""

    keys: dict[str, set[bytes]]
    note: str | None = None


def run_keys(run_dir: Path, store: Store) -> RunKeys:
    """The keys of the run in `run_dir` (RunKeys); `store` holds its records."""
    record = run_record(run_dir)
    keys: dict[str, set[bytes]] = {"endings": set(), "verdicts": set(), "positions": set()}
    for line in _position_lines(run_dir):
        if line.endings_key:
            keys["endings"].add(bytes.fromhex(line.endings_key))
        if line.judged_key:
            keys["positions"].add(bytes.fromhex(line.judged_key))
    corpus = record.get("corpus")
    if not corpus or not Path(corpus).exists():
        return RunKeys(keys=keys, note=f"the run's corpus ({corpus or 'not named in run.json'}) is not there: only "
                                        "the endings and judged records its positions files name are found, not "
                                        "its verdict records (score --refresh judge asks those again instead)")
    recall = ScoreRecall(record, store)
    # the chunk sizes its servers took (run.json servers[].max_n): its chunks are records too
    sizes = sorted({s["max_n"] for s in record.get("servers") or [] if isinstance(s, dict)
                    and isinstance(s.get("max_n"), int) and s["max_n"] > 0})
    for story in read_corpus(corpus, min_words=0, max_words=10**9).stories:
        sentences = split_sentences(story.text)
        for k in range(1, len(sentences) + 1):
            if recall.cfg.adaptive:  # its rounds, as the run drew them
                for key, ask in lookup_position(recall.reads, recall.requests, sentences, k).rounds:
                    keys["endings"].add(key)
                    keys["positions"].add(ask.group)
                    keys["verdicts"].update(chat_key(r) for r in ask.requests if r is not None)
                continue
            request = recall.requests.endings(sentences, k)
            for m in sizes:  # kept as they came, also of a position stopped before it had all its endings
                for start in range(0, request.n, m):
                    part = chunk_key(request, start, min(m, request.n - start))
                    if recall.reads.endings_at(part) is not None:
                        keys["endings"].add(part)
            key = chat_key(request)
            rec = recall.reads.endings_at(key)
            if rec is None:
                continue
            ask = judge_ask(recall.requests, sentences, k, rec.texts)
            keys["endings"].add(key)
            keys["positions"].add(ask.group)
            keys["verdicts"].update(chat_key(r) for r in ask.requests if r is not None)
    return RunKeys(keys=keys)


def recorded_cache(run_dir: Path) -> Path | None:
    """The cache the run in `run_dir` used, as its run.json records it (None: it
    names none); a relative path is read against the folder the run was started in."""
    record = run_record(run_dir)
    used = record.get("cache")
    path = (used.get("path") if isinstance(used, dict) else None) or (record.get("config") or {}).get("cache")
    if not isinstance(path, str) or not path:
        return None
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(record.get("cwd") or run_dir) / p


def run_record(run_dir: Path, label: str = "--run") -> dict[str, Any]:
    """A score run folder's run.json; an InputError naming the folder and `label`
    (the flag or verb that was given it) when it is missing, unreadable or no record:
    the run folder is the input these read, so it is exit 1 as a missing corpus is
    (docs/reliability.md, "Exit statuses")."""
    path = run_dir / "run.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(str(run_dir), 0, None,
                         f"not a score run folder (no run.json in it), given to {label}") from None
    except (OSError, ValueError) as e:
        raise InputError(str(path), 0, None, f"cannot be read: {e} (given to {label})") from None
    if not isinstance(doc, dict):
        raise InputError(str(path), 0, None, f"is not a run record (given to {label})")
    return doc


def _position_lines(run_dir: Path) -> list[PositionLine]:
    """The lines of the run's positions.jsonl and positions.partial.jsonl (either may
    be missing; a line cut by a kill is skipped)."""
    out = []
    for name in ("positions.jsonl", "positions.partial.jsonl"):
        try:
            data = (run_dir / name).read_bytes()
        except FileNotFoundError:
            continue
        for raw in data.splitlines():
            try:
                out.append(_line_decoder.decode(raw))
            except msgspec.DecodeError:
                continue
    return out


_line_decoder = msgspec.json.Decoder(PositionLine)
