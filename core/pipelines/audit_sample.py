"""`tension-run audit sample RUN_DIR`: the verdicts of a finished score run that people
label (issue 60; docs/metrics.md 1.10), drawn once, seeded, into audit/sample.json.

The run's judged verdicts (its positions.jsonl counts: a position's n_match are the judge's
yes, its other non-empty endings its no, a malformed answer among them as the no-rate
counts it) are split by the judge's answer. Half the sample is drawn from each answer (all
of one when it has fewer), systematically with a seeded random start over its verdicts
ordered by part of the story (early, middle, late: pct < 1/3, < 2/3, else), story and
position: within an answer every verdict has the same chance, and the parts and stories
get their share of it. So each answer's labelled items stand for that answer's count in
the run (core/reports/judge_audit.py weights them so); the counts are kept in the sample.

Each item carries what a person needs, read from the run's cache the way the view reads
it (score/recall.py `ScoreRecall`, the walk of score/lookup.py): the story up to the anchor,
the continuation the judge saw (anchor + the rest, cut as the judge prompt cut it), the
predicted ending (anchor + ending), and the judge's answer, which the labelling page never
shows. Its key is the verdict's own cache key (its judge request's). A `shared` number of
items, half from each answer, is shown to every annotator, first; the presentation order
is otherwise shuffled (seeded), so the judge's answer cannot be guessed from it.
Nothing is sent to a server.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from tension.cache.store import Store, default_path
from tension.core.errors import ConfigError, InputError
from tension.core.formats import PositionLine
from tension.core.inputs.corpus import read_corpus
from tension.core.inputs.jsonl import decode_line, iter_lines
from tension.core.inputs.labels import Sample, SampleItem, labels_path, now, sample_path, write_sample
from tension.core.inputs.segment import continuation_text, prefix_text, split_sentences
from tension.core.inputs.verdict_counts import PARTS, part_of, verdict_counts
from tension.core.pipelines.score.lookup import judge_ask
from tension.core.pipelines.score.recall import ScoreRecall, run_record
from tension.core.reports.unfinished import no_positions
from tension.core.run.reads import chat_key

__all__ = ["DEFAULT_SIZE", "draw_sample", "part_of", "PARTS"]

DEFAULT_SIZE = 100


def _lines(run_dir: Path) -> list[PositionLine]:
    path = run_dir / "positions.jsonl"
    if not path.is_file():
        raise no_positions(run_dir, "the audit samples a finished run's verdicts")
    return [decode_line(str(path), n, raw, PositionLine) for n, raw in iter_lines(path)]


def _systematic(total: int, n: int, rng: np.random.Generator) -> list[int]:
    """n of range(total), one in each of n equal steps from a random start (all when n ≥ total)."""
    if n >= total:
        return list(range(total))
    step = total / n
    start = rng.random() * step
    return sorted({min(total - 1, int(math.floor(start + i * step))) for i in range(n)})


def draw_sample(run_dir: str | Path, *, size: int = DEFAULT_SIZE, shared: int | None = None, seed: int = 0,
                cache: str | Path | None = None, redraw: bool = False) -> Sample:
    """Draw the audit sample of the finished score run in `run_dir` and write it to
    audit/sample.json; return it. A sample already there is returned as it is (drawn
    once) unless `redraw`, which is refused once it has labels."""
    d = Path(run_dir)
    if size < 2:
        raise ConfigError(f"--size: expected at least 2 verdicts, got {size}")
    shared = size // 5 if shared is None else shared
    if not 0 <= shared <= size:
        raise ConfigError(f"--shared: expected 0 to --size ({size}) items, got {shared}")
    if sample_path(d).is_file() and not redraw:
        from tension.core.inputs.labels import read_sample

        return read_sample(d)
    if redraw and labels_path(d).is_file() and labels_path(d).stat().st_size > 0:
        raise ConfigError(f"{labels_path(d)} holds labels of the sample drawn before: a labelled sample is never "
                          "drawn again (move the audit folder away first to start a new audit)")
    record = run_record(d, "audit sample")
    if record.get("command", "score") != "score":
        raise InputError(str(d), 0, None, f"its run.json is the record of `{record.get('command')}`, not of a "
                                          "score run")
    lines = _lines(d)
    where = Path(cache) if cache else _recorded(record, d)
    if not (where / "data.mdb").is_file():
        raise InputError(str(d), 0, None, f"no cache at {where}: the sample's endings are read from it "
                                          "(give --cache PATH)")
    sentences = _sentences(record, d)
    # the population: each position's judge-no and judge-yes verdicts, in the drawing's order
    order = sorted(range(len(lines)), key=lambda i: (part_of(lines[i].pct), lines[i].group, lines[i].id,
                                                     lines[i].k))
    counts = verdict_counts(lines)
    n_no = sum(c.no for c in counts)
    n_yes = sum(c.yes for c in counts)
    want_no = min(n_no, size // 2)
    want_yes = min(n_yes, size - want_no)
    want_no = min(n_no, size - want_yes)
    rng = np.random.default_rng(seed)
    picks: list[tuple[int, bool, int]] = []  # (line index, judge said no, rank among the line's answers of that kind)
    for said_no, want in ((True, want_no), (False, want_yes)):
        sizes = [(lines[i].n_endings - lines[i].n_match - lines[i].n_empty) if said_no else lines[i].n_match
                 for i in order]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        for j in _systematic(int(starts[-1]), want, rng):
            at = int(np.searchsorted(starts, j, side="right") - 1)
            picks.append((order[at], said_no, j - int(starts[at])))
    notes: list[str] = []
    items: list[SampleItem] = []
    with Store(where, readonly=True) as store:
        recall = ScoreRecall(record, store)
        cont_words = recall.cfg.continuation_words
        for li, said_no, rank in picks:
            ln = lines[li]
            item = _item(recall, ln, sentences.get(ln.id), said_no, rank, cont_words)
            if isinstance(item, str):
                notes.append(f"story {ln.id!r} k = {ln.k}: {item}; left out of the sample")
                continue
            items.append(item)
    if not items:
        raise InputError(str(d), 0, None, "no verdict could be read for the sample" + (f": {notes[0]}" if notes
                                                                                        else " (no judged verdict)"))
    items = _ordered(items, shared, rng)
    sample = Sample(run=str(d.resolve()), seed=seed, size=size, shared=sum(it.shared for it in items), drawn=now(),
                    judge_model=recall.requests.judge_model, generation_model=recall.requests.gen_model,
                    counts=counts,
                    items=items, notes=notes)
    write_sample(d, sample)
    return sample


def _item(recall: ScoreRecall, ln: PositionLine, sentences: list[str] | None, said_no: bool, rank: int,
          cont_words: int) -> SampleItem | str:
    """The item of the position's `rank`-th verdict of the judge's answer, or why not."""
    if sentences is None:
        return "the story's text is not in the run's corpus (the person needs it)"
    r = recall.position(sentences, ln.k, ln.endings_key, ln.judged_key)
    if r.endings is None or r.missing:
        return "its endings or verdicts are not in the cache"
    if r.verdicts.count("match") != ln.n_match:
        return f"the cache's verdicts give {r.verdicts.count('match')} matches, positions.jsonl {ln.n_match} " \
               "(judged again since?)"
    kinds = ("no match", "malformed") if said_no else ("match",)
    at = [i for i, v in enumerate(r.verdicts) if v in kinds]
    if rank >= len(at):
        return "fewer verdicts of that answer in the cache than in positions.jsonl"
    i = at[rank]
    ask = judge_ask(recall.requests, sentences, ln.k, r.endings)
    request = ask.requests[i]
    if request is None:
        return "an empty ending (never judged)"
    anchor = sentences[ln.k - 1]
    return SampleItem(key=chat_key(request).hex(), story=ln.id, group=ln.group, k=ln.k, pct=ln.pct,
                      part=part_of(ln.pct), ending=i, judge="no match" if said_no else "match",
                      judge_raw=r.raw[i], prefix=prefix_text(sentences, ln.k),
                      continuation=anchor + " " + continuation_text(sentences, ln.k, cont_words),
                      predicted=anchor + " " + r.endings[i])


def _ordered(items: list[SampleItem], shared: int, rng: np.random.Generator) -> list[SampleItem]:
    """The shared items first (half from each judge answer, as far as they go), each part shuffled."""
    import msgspec

    by = {kind: [i for i, it in enumerate(items) if it.judge == kind] for kind in ("no match", "match")}
    for v in by.values():
        rng.shuffle(v)
    half = min(shared // 2, len(by["no match"]))
    take = by["no match"][:half] + by["match"][:shared - half]
    take += by["no match"][half:half + shared - len(take)]  # one answer short: the other fills in
    chosen = set(take)
    first = [items[i] for i in take]
    rest = [items[i] for i in range(len(items)) if i not in chosen]
    rng.shuffle(first)
    rng.shuffle(rest)
    return [msgspec.structs.replace(it, shared=True) for it in first] + rest


def _recorded(record: dict[str, Any], run_dir: Path) -> Path:
    path = (record.get("config") or {}).get("cache")
    if not path:
        return default_path()
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(record.get("cwd") or run_dir) / p


def _sentences(record: dict[str, Any], run_dir: Path) -> dict[str, list[str]]:
    """Each story's sentences from the run's corpus; {} when it is not there."""
    path = record.get("corpus")
    if not path:
        return {}
    p = Path(path).expanduser()
    p = p if p.is_absolute() else Path(record.get("cwd") or run_dir) / p
    if not p.exists():
        raise InputError(str(run_dir), 0, None, f"the run's corpus ({p}) is not there: people need the story texts "
                                                "to label its verdicts")
    return {s.id: split_sentences(s.text) for s in read_corpus(p, min_words=0, max_words=10**9).stories}
