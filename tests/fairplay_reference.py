"""Plain-Python reference for docs/fairplay.md (fair-play reader metrics).

Written from the specification text and docs/fairplay.md only, slowly and
literally: lists, loops and ``math``; no numpy, no numba. The kernels in
``tension.kernels.fairplay`` are checked against it.

A story is a dict ``{"K", "L", "culprit", "distractor" (index or None),
"readers": {name: [row or None, …]}}`` with rows of K non-negative numbers.
Conventions (docs/fairplay.md):

* a row is divided by its sum; log arguments are clipped at ``eps``;
* ``U_M(i) = −Σ_y M*(i)_y · log max(M(i)_y, eps)`` where both rows exist;
  ``U_M(0) = log K``;
* ``SEff(i) = U(previous step with a U, or 0) − U(i)``; ``Δcoh(i) = log K − U(i)``;
  ``Δintel(i) = Δcoh_{M*}(i) − Δcoh_M(i)``;
* weak surprise ``U ≥ log K − eps_s``, strong ``U ≥ log K + delta_s``;
* hit: the tied set T = every suspect within 1e-12 of the maximum; "split" (the
  authors' rule): 1/|T| if the culprit is in T; "miss": 1 only if T is the culprit alone;
* S, C over each reader's own recorded steps; FP = mean of ``hit_M − hit_M0`` over
  the paragraphs where both exist (likewise ``_pw`` with ``M(i)_{y*}``);
  ``insufficient = FP_UB < 1/L``; early: ``M*(i)_{y*} > 0.5``.
"""

from __future__ import annotations

import math

NAN = float("nan")
TIE = 1e-12
NAMES = ("gullible", "experienced", "know_it_all", "actual")


def normalise(row):
    total = math.fsum(row)
    return [v / total for v in row]


def mean(values):
    values = list(values)
    return math.fsum(values) / len(values) if values else NAN


def cross_entropy(star, m, eps):
    return -math.fsum(p * math.log(max(q, eps)) for p, q in zip(star, m) if p > 0)


def hit(row, culprit, ties="split"):
    top = max(row)
    tied = [y for y, v in enumerate(row) if v >= top - TIE]
    if culprit not in tied:
        return 0.0
    if ties == "split":
        return 1.0 / len(tied)
    return 1.0 if len(tied) == 1 else 0.0


def reader_steps(story, name, eps=1e-6, eps_s=0.1, delta_s=0.1, ties="split"):
    """Per-step dicts for one reader (None entries where undefined)."""
    K, L, yc, d = story["K"], story["L"], story["culprit"], story["distractor"]
    rows = story["readers"].get(name)
    star_rows = story["readers"].get("know_it_all")
    logk = math.log(K)
    out = []
    previous_u = logk
    for i in range(L):
        step = dict(U=None, seff=None, dcoh=None, dintel=None, weak=None, strong=None, hit=None,
                    p_true=None, p_distractor=None)
        row = rows[i] if rows is not None else None
        if row is not None:
            m = normalise(row)
            step["hit"] = hit(m, yc, ties)
            step["p_true"] = m[yc]
            if d is not None:
                step["p_distractor"] = m[d]
            star = star_rows[i] if star_rows is not None else None
            if star is not None:
                star = normalise(star)
                u = cross_entropy(star, m, eps)
                entropy = cross_entropy(star, star, eps)
                step["U"] = u
                step["seff"] = previous_u - u
                previous_u = u
                step["dcoh"] = logk - u
                step["dintel"] = (logk - entropy) - (logk - u)
                step["weak"] = 1.0 if u >= logk - eps_s else 0.0
                step["strong"] = 1.0 if u >= logk + delta_s else 0.0
        out.append(step)
    return out


def story_scores(story, early_steps=(1, 3, 5), eps=1e-6, eps_s=0.1, delta_s=0.1, ties="split", names=NAMES):
    steps = {n: reader_steps(story, n, eps, eps_s, delta_s, ties) for n in names}
    hits = {n: [s["hit"] for s in steps[n] if s["hit"] is not None] for n in names}
    probs = {n: [s["p_true"] for s in steps[n] if s["p_true"] is not None] for n in names}
    S = 1.0 - mean(hits["gullible"])
    S_pw = 1.0 - mean(probs["gullible"])
    res = {"steps": steps, "S": S, "S_pw": S_pw}
    for n in names[1:]:
        tag = {"know_it_all": "UB", "experienced": "ER", "actual": "AR"}.get(n, n)
        res[f"C_{tag}"] = mean(hits[n])
        res[f"C_{tag}_pw"] = mean(probs[n])
        both = [(a, b) for a, b in zip(steps[n], steps["gullible"]) if a["hit"] is not None and b["hit"] is not None]
        res[f"FP_{tag}"] = mean(a["hit"] - b["hit"] for a, b in both)
        res[f"FP_{tag}_pw"] = mean(a["p_true"] - b["p_true"] for a, b in both)
    fp = res["FP_UB"]
    res["insufficient_gap"] = NAN if math.isnan(fp) else (1.0 if fp < 1.0 / story["L"] else 0.0)
    star_rows = story["readers"].get("know_it_all")
    early = []
    for i in early_steps:
        if star_rows is None or i > story["L"] or star_rows[i - 1] is None:
            early.append(NAN)
        else:
            early.append(1.0 if normalise(star_rows[i - 1])[story["culprit"]] > 0.5 else 0.0)
    res["early"] = early
    g = [s for s in steps["gullible"] if s["U"] is not None]
    res["weak_share"] = mean(s["weak"] for s in g)
    res["strong_share"] = mean(s["strong"] for s in g)
    res["n_steps"] = {n: len(hits[n]) for n in names}
    return res


def pooled(stories, bins, ties="split"):
    """Per reader and bin: [n, hits, sum of p_true, n_U, sum U, sum SEff, sum Δcoh,
    sum Δintel]; bin of step i (1-based) of a story of L paragraphs is the b with
    b/B < i/L <= (b+1)/B."""
    table = {n: [[0, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0] for _ in range(bins)] for n in NAMES}
    for story in stories:
        L = story["L"]
        for n in NAMES:
            for i, step in enumerate(reader_steps(story, n, ties=ties), start=1):
                if step["hit"] is None:
                    continue
                b = next(b for b in range(bins) if b * L < i * bins <= (b + 1) * L)
                cell = table[n][b]
                cell[0] += 1
                cell[1] += step["hit"]
                cell[2] += step["p_true"]
                if step["U"] is not None:
                    cell[3] += 1
                    cell[4] += step["U"]
                    cell[5] += step["seff"]
                    cell[6] += step["dcoh"]
                    cell[7] += step["dintel"]
    return table
