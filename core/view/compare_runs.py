"""Two score runs of the same stories side by side (two judges, two generation
pipelines): the paired summary of `tension-run compare` (bootstrap interval and
t-test, from `reports.comparison.compare`), B − A per story for every statistic, and
per position (same story, same k) the no-rates and their difference."""

from __future__ import annotations

import math
from typing import Any

from tension.core.errors import TensionError
from tension.core.reports.comparison import compare, second_order_note
from tension.core.view.score_run import ScoreRun

__all__ = ["comparison"]


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 6)


def _summary(a: ScoreRun, b: ScoreRun) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], list[str]]:
    """The paired summary rows, per story id the 95% interval of each difference, and the
    notes of `tension-run compare`: a warning per fact of the setup that differs between A
    and B, and the note on second-order statistics across different endings (the page
    says what the terminal says)."""
    try:
        c = compare(a.dir, b.dir, "id", n_resamples=10_000)
    except TensionError as e:
        return [], {}, [f"no paired summary: {e}"]
    said = [*(f"warning: {w}" for w in c.warnings), *(f"note: {n}" for n in c.notes)]
    note = second_order_note(c.about_a, c.about_b) if c.about_a is not None and c.about_b is not None else None
    cis: dict[str, dict[str, Any]] = {}
    for d in c.stories:
        cis.setdefault(d.key, {})[d.stat] = None if math.isnan(d.lo) else [d.lo, d.hi]
    return [{"stat": r.stat, "n_pairs": r.n_pairs, "mean_a": r.mean_a, "mean_b": r.mean_b, "diff": r.diff,
             "lo": r.lo, "hi": r.hi, "t": r.t, "p": r.p, "significant": r.significant, "finding": r.finding,
             "why_not": r.why_not} for r in c.rows], cis, [*said, *([note] if note else [])]


def comparison(a: ScoreRun, b: ScoreRun) -> dict[str, Any]:
    """The page data of B − A, stories paired by id."""
    ca, cb = a.corpus(), b.corpus()
    sb = {s["id"]: s for s in cb["stories"]}
    stories = []
    for s in ca["stories"]:
        t = sb.get(s["id"])
        if t is None:
            continue
        pa = {p.k: p for p in a.positions[s["id"]]}
        pb = {p.k: p for p in b.positions[s["id"]]}
        positions = [{"k": k, "pct": round(pa[k].pct, 4), "a": pa[k].no_rate, "b": pb[k].no_rate,
                      "diff": round(pb[k].no_rate - pa[k].no_rate, 6)} for k in sorted(pa) if k in pb]
        stories.append({"id": s["id"], "slug_a": s["slug"], "slug_b": t["slug"], "group": s["group"],
                        "a": s["stats"], "b": t["stats"],
                        "diff": {k: _diff(s["stats"][k], t["stats"].get(k)) for k in s["stats"]},
                        "positions": positions, "only_a": len(pa.keys() - pb.keys()),
                        "only_b": len(pb.keys() - pa.keys())})
    summary, cis, said = _summary(a, b)
    for s in stories:
        s["diff_ci"] = cis.get(s["id"], {})
    paired = {s["id"] for s in stories}
    return {"kind": "compare", "a": str(a.dir), "b": str(b.dir), "models_a": ca["models"], "models_b": cb["models"],
            "columns": ca["columns"], "stories": stories, "summary": summary,
            "unpaired_a": len(ca["stories"]) - len(paired), "unpaired_b": len(cb["stories"]) - len(paired),
            "notes": [*(f"A: {n}" for n in a.notes), *(f"B: {n}" for n in b.notes), *said]}
