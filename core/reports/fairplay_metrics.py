"""`tension-run fairplay-metrics`: fair-play scores from saved reader distributions.

Input is READERS.jsonl, one story per line (what `tension-run fairplay` writes)::

    {"id": "s1", "group": "gen-A", "suspects": ["Ann", "Bob", "Cy", "Di"],
     "culprit": "Bob", "distractor": "Cy", "revelation": 25, "L": 25,
     "readers": {"gullible": [[0.25, 0.25, 0.25, 0.25], …], "know_it_all": [null, …]}}

Each reader is a list of L entries (paragraphs 1 … L), each a list of
probabilities in the order of ``suspects`` or null where the reader has no value.
Human guesses can come from a CSV (``id, reader, paragraph, guess``). No LLM is
involved; the numbers are defined in docs/fairplay.md ("Definitions") and computed
by kernels/fairplay.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import msgspec
import numpy as np

from tension.core.errors import InputError
from tension.core.formats import DEFAULT_GROUP
from tension.core.inputs.jsonl import folder_aside, write_together
from tension.core.inputs.readers import (
    NOT_SURE,
    SOURCES,
    ReaderRecord,
    ScoredWhodunit,
    check_record,
    read_actual,
    read_readers,
    read_source,
    reader_names,
    row_warnings,
)
from tension.core.reports.fairplay_tables import GroupRow, curves_csv, groups_csv, groups_md, groups_table
from tension.core.reports.filenames import safe_filename
from tension.core.reports.rows import Cell, Rows, rows_csv
from tension.kernels.bootstrap import N_RESAMPLES
from tension.kernels.fairplay import (
    ACTUAL,
    EXPERIENCED,
    GULLIBLE,
    KNOW_IT_ALL,
    READERS,
    FairPlaySettings,
    StepArrays,
    StoryScores,
    batch_fairplay,
    clopper_pearson,
    pooled_curves,
)
from tension.kernels.groups import describe

__all__ = [
    "DEFAULT_GROUP",
    "ALL_STORIES",
    "NOT_SURE",
    "INTEL_NOTE",
    "ReaderRecord",
    "ScoredWhodunit",
    "Computed",
    "GroupRow",
    "FairPlaySummary",
    "check_record",
    "read_readers",
    "read_actual",
    "compute",
    "score_columns",
    "score_matrix",
    "group_rows",
    "stories_csv",
    "stories_rows",
    "steps_jsonl",
    "groups_csv",
    "groups_md",
    "curves_csv",
    "distributions_jsonl",
    "fairplay_metrics",
    "reader_tag",
    "SOURCES",
]

ALL_STORIES = "(all)"  # the pooled curves over every story
# The intelligence gap needs the brilliant reader M1; none is available, so M*
# stands in for it (docs/fairplay.md, "Definitions"). Written into every output
# that carries Δintel.
INTEL_NOTE = "intelligence gap: M1 (brilliant reader) approximated by M* (know-it-all)"

class FairPlaySummary(msgspec.Struct, kw_only=True):
    stories: int
    errors: list[str]
    out: Path
    warnings: list[str] = []
    plots: int = 0
    files: list[str] = []
    # stories.csv's and groups.csv's rows as computed (what the API's result holds)
    story_rows: Rows | None = None
    group_rows: Rows | None = None


# ----------------------------------------------------------------------------
# Computing


class Computed(msgspec.Struct, kw_only=True):
    steps: StepArrays
    scores: StoryScores
    soff: np.ndarray
    present: np.ndarray  # (n, R) bool: the reader is in the story's record
    readers: list[str]  # the kernel rows: READERS, then further experienced readers


def compute(stories: Sequence[ScoredWhodunit], settings: FairPlaySettings = FairPlaySettings()) -> Computed:
    """Pack every story and run the kernels once."""
    n = len(stories)
    names = reader_names(stories)
    L = np.array([s.L for s in stories], dtype=np.int64)
    K = np.array([len(s.suspects) for s in stories], dtype=np.int64)
    probs = np.full((len(names), int((L * K).sum())), np.nan)
    present = np.zeros((n, len(names)), dtype=bool)
    a = 0
    for j, s in enumerate(stories):
        b = a + s.L * len(s.suspects)
        for r, name in enumerate(names):
            if name in s.probs:
                probs[r, a:b] = s.probs[name].ravel()
                present[j, r] = True
        a = b
    steps, scores, soff = batch_fairplay(probs, L, K, np.array([s.culprit for s in stories], dtype=np.int64),
                                         np.array([s.distractor for s in stories], dtype=np.int64), settings)
    return Computed(steps=steps, scores=scores, soff=soff, present=present, readers=names)


# ----------------------------------------------------------------------------
# Outputs


def reader_tag(name: str) -> str:
    """The suffix of a reader's C_/FP_ columns: UB, ER, AR, or ER_<setting> for
    the experienced reader of that setting (reader ``experienced_<setting>``)."""
    tags = {READERS[KNOW_IT_ALL]: "UB", READERS[EXPERIENCED]: "ER", READERS[ACTUAL]: "AR"}
    return tags.get(name) or "ER_" + name.removeprefix(READERS[EXPERIENCED] + "_")


def _compared(readers: Sequence[str]) -> list[int]:
    """Rows with C_/FP_ columns, in column order: UB, ER, AR, then ER_<setting>."""
    return [KNOW_IT_ALL, EXPERIENCED, ACTUAL, *range(len(READERS), len(readers))]


def score_columns(settings: FairPlaySettings, readers: Sequence[str] = READERS) -> list[str]:
    """The numeric story columns of stories.csv after ``id, group, L`` (output order)."""
    tags = [reader_tag(readers[r]) for r in _compared(readers)]
    cols = ["S"] + [f"{x}_{t}" for t in tags for x in ("C", "FP")] + ["insufficient_gap"]
    cols += ["S_pw"] + [f"{x}_{t}_pw" for t in tags for x in ("C", "FP")]
    cols += [f"early_{i}" for i in settings.early_steps]
    cols += [f"weak_surprise_{READERS[GULLIBLE]}", f"strong_surprise_{READERS[GULLIBLE]}"]
    return cols


def score_matrix(c: Computed, settings: FairPlaySettings) -> np.ndarray:
    """(n, len(score_columns)) values; NaN where a reader is absent or undefined."""
    sc = c.scores
    cols = [sc.S]
    for r in _compared(c.readers):
        cols += [sc.C[:, r], sc.FP[:, r]]
    cols.append(sc.insufficient_gap)
    cols.append(sc.S_pw)
    for r in _compared(c.readers):
        cols += [sc.C_pw[:, r], sc.FP_pw[:, r]]
    cols += [sc.early[:, e] for e in range(len(settings.early_steps))]
    cols += [sc.weak_share[:, GULLIBLE], sc.strong_share[:, GULLIBLE]]
    return np.column_stack(cols) if len(sc.S) else np.empty((0, len(cols)))


_FLAG_COLUMNS = ("insufficient_gap", "early_")


def stories_rows(stories: Sequence[ScoredWhodunit], c: Computed, settings: FairPlaySettings) -> Rows:
    """stories.csv's rows as computed: the scores (the early-guess and gap flags as
    0/1), each reader's steps (None for a reader the story lacks), the counts."""
    names = score_columns(settings, c.readers)
    tail = [f"steps_{r}" for r in c.readers] + ["n_suspects", "extracted_suspects", "n_failures", "renormalised",
                                                "empty_rows", "zero_rows"]
    m = score_matrix(c, settings)
    rows: list[tuple[Cell, ...]] = []
    for j, s in enumerate(stories):
        cells = [None if math.isnan(v) else int(v) if name.startswith(_FLAG_COLUMNS) else float(v)
                 for name, v in zip(names, m[j])]
        steps = [int(c.scores.n_steps[j, r]) if c.present[j, r] else None for r in range(len(c.readers))]
        rows.append((s.id, s.group, s.L, *cells, *steps, len(s.suspects), int(s.extracted_suspects), s.n_failures,
                     s.renormalised, s.empty_rows, s.zero_rows))
    return Rows(columns=("id", "group", "L", *names, *tail), rows=rows)


def stories_csv(stories: Sequence[ScoredWhodunit], c: Computed, settings: FairPlaySettings) -> str:
    return rows_csv(stories_rows(stories, c, settings))


def _jlist(a: np.ndarray) -> list:
    # numpy's stubs take no None for an array; at run time it makes the result an object array
    return np.where(np.isnan(a), None, a).tolist()  # type: ignore[call-overload]


def steps_jsonl(stories: Sequence[ScoredWhodunit], c: Computed) -> bytes:
    """One line per story and present reader: the per-paragraph quantities."""
    st = c.steps
    enc = msgspec.json.Encoder()
    lines = []
    for j, s in enumerate(stories):
        a, b = int(c.soff[j]), int(c.soff[j + 1])
        for r, name in enumerate(c.readers):
            if not c.present[j, r]:
                continue
            lines.append(enc.encode({
                "id": s.id, "group": s.group, "reader": name, "i": list(range(1, s.L + 1)),
                "U": _jlist(st.U[r, a:b]), "SEff": _jlist(st.seff[r, a:b]), "dcoh": _jlist(st.dcoh[r, a:b]),
                "dintel": _jlist(st.dintel[r, a:b]), "weak_surprise": _jlist(st.weak[r, a:b]),
                "strong_surprise": _jlist(st.strong[r, a:b]), "hit": _jlist(st.hit[r, a:b]),
                "p_true": _jlist(st.p_true[r, a:b]), "p_distractor": _jlist(st.p_distractor[r, a:b]),
                "log_n_suspects": math.log(len(s.suspects)), "note": INTEL_NOTE,
            }))
    return b"".join(x + b"\n" for x in lines)


def distributions_jsonl(stories: Sequence[ScoredWhodunit]) -> bytes:
    """The normalised reader distributions, in the READERS.jsonl schema."""
    enc = msgspec.json.Encoder()
    out = []
    names = reader_names(stories)
    for s in stories:
        readers = {name: [None if np.isnan(row[0]) else [float(v) for v in row] for row in s.probs[name]]
                   for name in names if name in s.probs}
        out.append(enc.encode({
            "id": s.id, "group": s.group, "suspects": s.suspects, "culprit": s.suspects[s.culprit],
            "distractor": s.suspects[s.distractor] if s.distractor >= 0 else None, "revelation": s.revelation,
            "L": s.L, "readers": readers, "extracted_suspects": s.extracted_suspects,
        }))
    return b"".join(x + b"\n" for x in out)


def group_rows(stories: Sequence[ScoredWhodunit], c: Computed, settings: FairPlaySettings, *,
               n_resamples: int = N_RESAMPLES, seed: int = 0) -> list[GroupRow]:
    """Per group (first-appearance order) and statistic: the mean of the story
    values with a percentile-bootstrap interval, or for the 0/1 flags the share
    of stories with a Clopper–Pearson interval."""
    names = score_columns(settings, c.readers)
    m = score_matrix(c, settings)
    index: dict[str, list[int]] = {}
    for j, s in enumerate(stories):
        index.setdefault(s.group, []).append(j)
    rows = []
    for g, idx in index.items():
        for k, name in enumerate(names):
            v = m[idx, k]
            ok = v[np.isfinite(v)]
            if name.startswith(_FLAG_COLUMNS):
                lo, hi = clopper_pearson(ok.sum(), ok.size, settings.confidence)
                mean = float(ok.mean()) if ok.size else math.nan
                rows.append(GroupRow(group=g, statistic=name, mean=mean, lo=float(lo), hi=float(hi),
                                     interval="clopper-pearson", n=int(ok.size), n_nan=int(v.size - ok.size)))
            else:
                d = describe(v, n_resamples, seed)
                rows.append(GroupRow(group=g, statistic=name, mean=d.mean, lo=d.boot_lo, hi=d.boot_hi,
                                     interval="bootstrap", n=d.n, n_nan=d.n_nan))
    return rows


def fairplay_metrics(readers: str | Path, out: str | Path, *, actual_csv: str | Path | None = None,
                     settings: FairPlaySettings | None = None, max_plots: int = 20,
                     n_resamples: int = N_RESAMPLES, seed: int = 0, progress: bool = False,
                     source: str = "readers") -> FairPlaySummary:
    """Read READERS.jsonl (or a `fairplay` run folder's; with ``source="authors"`` a
    folder of the fair-play authors' result files) and human guesses, compute the
    fair-play scores, write stories.csv, steps.jsonl, groups.csv, groups.md,
    curves.csv, distributions.jsonl, fairplay.json and reading-curve plots into ``out``."""
    settings = settings or FairPlaySettings()
    out = Path(out)
    readers, stories, errors, notes = read_source(readers, source)
    warnings = notes + row_warnings(stories)
    if not stories:
        # nothing to compute (an empty file, every line bad): the earlier outputs in `out` stay, not empty ones
        if not errors:
            errors.append(InputError(str(readers), 0, None, "no story to compute"))
        return FairPlaySummary(stories=0, errors=[str(e) for e in errors], out=out, warnings=warnings)
    if actual_csv is not None:
        replaced = [s.id for s in stories if READERS[ACTUAL] in s.probs]
        try:
            n_actual, csv_errors = read_actual(actual_csv, stories)
        except InputError as e:  # unreadable or headerless: the other readers still count
            n_actual, csv_errors = 0, [e]
        errors += csv_errors
        if replaced and n_actual:
            warnings.append(f"the actual reader of {len(replaced)} story(ies) in {readers} was replaced by "
                            f"the guesses in {actual_csv} where it has any")
    c = compute(stories, settings)
    rows = group_rows(stories, c, settings, n_resamples=n_resamples, seed=seed)
    pooled = {ALL_STORIES: pooled_curves(c.steps, c.soff, [s.L for s in stories], None, settings)} \
        if stories else {}
    groups = list(dict.fromkeys(s.group for s in stories))
    if len(groups) > 1:
        for g in groups:
            idx = [j for j, s in enumerate(stories) if s.group == g]
            pooled[g] = pooled_curves(c.steps, c.soff, [s.L for s in stories], idx, settings)
    story_table, group_table = stories_rows(stories, c, settings), groups_table(rows)
    files: dict[str, str | bytes] = {
        "stories.csv": rows_csv(story_table),
        "steps.jsonl": steps_jsonl(stories, c),
        "groups.csv": rows_csv(group_table),
        "groups.md": groups_md(rows),
        "curves.csv": curves_csv(pooled, settings, c.readers),
        "distributions.jsonl": distributions_jsonl(stories),
    }
    with folder_aside(out / "plots") as drawn:  # the figures first, into drawn/plots/…, put in place with the files
        plots = _plots(stories, c, pooled, drawn, max_plots, progress, settings)
        summary = FairPlaySummary(stories=len(stories), errors=[str(e) for e in errors], out=out,
                                  warnings=warnings, plots=plots, files=list(files), story_rows=story_table,
                                  group_rows=group_table)
        files["fairplay.json"] = msgspec.json.format(msgspec.json.encode({
            "readers": str(readers), "from": source,
            "actual_csv": None if actual_csv is None else str(actual_csv),
            "settings": settings, "stories": len(stories), "errors": summary.errors, "warnings": warnings,
            "notes": [INTEL_NOTE, "S and C average hits over each reader's recorded paragraphs, FP the differences "
                                  "hit_M - hit_M0 over the paragraphs both readers have (METRICS 2.3); a tie for "
                                  "the maximum is "
                                  f"{'split among the tied suspects' if settings.ties == 'split' else 'a miss'}"
                                  "; *_pw columns are the probability-weighted versions (mean M(i)_{y*})"],
            "n_resamples": n_resamples, "seed": seed,
        }))
        # every file and figure appears together, or none (issue 58, item 5): a figure is put beside the
        # plots of earlier runs (other stories' stay), not in a fresh folder
        write_together({out / name: data for name, data in files.items()},
                       drawn={out / f.relative_to(drawn): f for f in sorted(drawn.rglob("*")) if f.is_file()})
    return summary


def _plots(stories, c, pooled, out, max_plots, progress, settings) -> int:
    # Imported here, not at the top: matplotlib takes a second to import, and
    # the CLI and the readers' checks should not pay it.
    from tqdm.auto import tqdm  # a widget in a notebook, text in a terminal

    from tension.core.reports.fairplay_figures import pooled_figure, reading_curve_figure

    chosen = stories[:max(0, max_plots)]
    n = 0
    for j, s in enumerate(tqdm(chosen, desc="reading curves", unit="plot", disable=not (progress and chosen))):
        a, b = int(c.soff[j]), int(c.soff[j + 1])
        reading_curve_figure(out / "plots" / "stories" / f"{safe_filename(s.id)}.png", s, c.steps.p_true[:, a:b],
                             c.steps.p_distractor[:, a:b], c.present[j])
        n += 1
    for g, pc in (pooled.items() if max_plots > 0 else ()):  # --max-plots 0: no figures at all
        pooled_figure(out / "plots" / f"pooled_{safe_filename(g)}.png", g, pc, settings)
        n += 1
    return n
