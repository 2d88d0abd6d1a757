"""Throughput of the fair-play kernel (docs/fairplay.md) against plain numpy,
and of the whole `fairplay-metrics` library call.

Contenders, on the same packed arrays:

* ``tension.kernels.fairplay.batch_fairplay``: one serial ``@njit`` loop over
  CSR-packed stories (all readers, all per-step quantities and story scores);
* a numpy version of the SAME quantities written here, the way a researcher
  would: a Python loop over stories, vectorised numpy over readers × paragraphs ×
  suspects inside each story.

Quantities (both): per reader and paragraph U (ε-clipped cross-entropy with M*),
SEff since the previous defined step, Δcoh, Δintel, weak/strong surprise, hit
(a tie within 1e-12 splits it), M(i)_{y*}, M(i)_{distractor}; per story the hit rates and
probability-weighted means over each reader's recorded steps, S, C, FP (over the
steps shared with the gullible reader),
insufficient_gap. Early convergence and shares are left to the kernel only.

Data: ``--n`` synthetic stories (default 20,000) of L = 25 paragraphs and 4
suspects, seeded; gullible and experienced at every paragraph with 3% nulls,
know-it-all at the 19 checkpoints 3 … 21 and at 24, 25; an actual reader on a
third of the stories; rows drawn from a Dirichlet and some rounded to 0.05 (ties).

Phases: check (numpy and kernel agree on ``--check`` stories; any difference
aborts with exit 1), numba (warm-up, then the median of ``--repeats`` calls),
numpy (median of ``--numpy-repeats`` passes over ``--numpy-n`` stories, scaled
by story count), and end to end: ``fairplay_metrics`` on ``--e2e-n`` stories
written as READERS.jsonl (no plots, ``--e2e-resamples`` bootstrap resamples),
median of 3, split into read+check / kernels / outputs.

Run from the repository root::

    python bench/fairplay.py
    python bench/fairplay.py --n 5000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np

from tension.kernels import fairplay as fp
from tension.testing.bench import timed

BANNER = 60
L, K, R = 25, 4, 4
TIE = 1e-12


def synth(n: int, seed: int):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(K, 0.7), size=(R, n * L)).reshape(R, n * L * K)
    rounded = rng.random((R, n * L)) < 0.2
    p3 = probs.reshape(R, n * L, K)
    p3[rounded] = np.round(p3[rounded] * 20) / 20
    p3[p3.sum(-1) == 0] = 0.25
    null = rng.random((R, n * L)) < 0.03
    step = np.tile(np.arange(1, L + 1), n)
    null[fp.KNOW_IT_ALL] = ~(((step >= 3) & (step <= 21)) | (step >= 24))
    no_actual = np.repeat(rng.random(n) < 2 / 3, L)
    null[fp.ACTUAL] |= no_actual
    p3[null] = np.nan
    culprit = rng.integers(0, K, n)
    distractor = (culprit + rng.integers(1, K, n)) % K
    distractor[rng.random(n) < 0.1] = -1
    return probs, np.full(n, L), np.full(n, K), culprit, distractor


def numpy_story(P, y, d, eps, eps_s, delta_s):
    """One story, P of shape (R, L, K) with NaN rows: the kernel's quantities."""
    logk = math.log(K)
    tot = P.sum(-1)
    ok = np.isfinite(tot) & (tot > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        M = P / tot[..., None]
    pt = M[..., y]
    # the authors' tie rule: 1/|argmax set| when the culprit is in it
    tied = M >= M.max(-1, keepdims=True) - TIE
    with np.errstate(invalid="ignore", divide="ignore"):
        hit = np.where(ok, tied[..., y] / tied.sum(-1), np.nan)
    star = M[fp.KNOW_IT_ALL]
    both = ok & ok[fp.KNOW_IT_ALL][None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        terms = np.where(star[None] > 0, star[None] * np.log(np.maximum(M, eps)), 0.0)
        U = np.where(both, -terms.sum(-1), np.nan)
        H = -np.where(star > 0, star * np.log(np.maximum(star, eps)), 0.0).sum(-1)
    seff = np.full_like(U, np.nan)
    for r in range(R):
        idx = np.flatnonzero(both[r])
        if idx.size:
            u = U[r, idx]
            seff[r, idx] = np.concatenate([[logk], u[:-1]]) - u
    dcoh = logk - U
    dintel = U - H[None]
    weak = np.where(both, (U >= logk - eps_s).astype(float), np.nan)
    strong = np.where(both, (U >= logk + delta_s).astype(float), np.nan)
    p_true = np.where(ok, pt, np.nan)
    p_dist = np.where(ok, M[..., d], np.nan) if d >= 0 else np.full_like(pt, np.nan)
    n_ok = ok.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(n_ok > 0, np.nansum(hit, axis=1) / n_ok, np.nan)
        ptm = np.where(n_ok > 0, np.nansum(p_true, axis=1) / n_ok, np.nan)
    S = 1 - rate[fp.GULLIBLE]
    # FP over the paragraphs both the reader and the gullible reader have
    shared = ok & ok[fp.GULLIBLE][None, :]
    n_sh = shared.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        FP = np.where(n_sh > 0, np.where(shared, hit - hit[fp.GULLIBLE][None, :], 0.0).sum(axis=1) / n_sh, np.nan)
    FP[fp.GULLIBLE] = np.nan
    ins = np.nan if math.isnan(FP[fp.KNOW_IT_ALL]) else float(FP[fp.KNOW_IT_ALL] < 1 / L - TIE)
    return dict(U=U, seff=seff, dcoh=dcoh, dintel=dintel, weak=weak, strong=strong, hit=hit, p_true=p_true,
                p_distractor=p_dist), dict(S=S, C=rate, FP=FP, p_true_mean=ptm, insufficient_gap=ins)


def numpy_all(probs, culprit, distractor, n, s: fp.FairPlaySettings):
    out = []
    for j in range(n):
        P = probs[:, j * L * K:(j + 1) * L * K].reshape(R, L, K)
        out.append(numpy_story(P, int(culprit[j]), int(distractor[j]), s.eps, s.eps_surprise, s.delta_surprise))
    return out


def check(probs, Ls, Ks, culprit, distractor, n, s) -> int:
    steps, sc, soff = fp.batch_fairplay(probs[:, :n * L * K], Ls[:n], Ks[:n], culprit[:n], distractor[:n], s)
    bad = 0
    for j, (st, story) in enumerate(numpy_all(probs, culprit, distractor, n, s)):
        for name, arr in st.items():
            got = getattr(steps, name)[:, soff[j]:soff[j + 1]]
            bad += not np.allclose(got, arr, rtol=1e-9, atol=1e-12, equal_nan=True)
        for name, ref in (("S", story["S"]), ("insufficient_gap", story["insufficient_gap"])):
            bad += not np.allclose(getattr(sc, name)[j], ref, equal_nan=True)
        bad += not np.allclose(sc.C[j], story["C"], equal_nan=True)
        bad += not np.allclose(sc.FP[j], story["FP"], equal_nan=True)
        bad += not np.allclose(sc.p_true_mean[j], story["p_true_mean"], equal_nan=True)
    return bad


def write_readers(path: Path, probs, culprit, distractor, n: int) -> None:
    names = ["Ann", "Bob", "Cy", "Di"]
    with path.open("w") as f:
        for j in range(n):
            P = probs[:, j * L * K:(j + 1) * L * K].reshape(R, L, K)
            readers = {}
            for r, name in enumerate(fp.READERS):
                rows = [None if np.isnan(row[0]) else [round(float(v), 6) for v in row] for row in P[r]]
                if any(x is not None for x in rows):
                    readers[name] = rows
            f.write(json.dumps({"id": f"s{j}", "group": f"g{j % 4}", "suspects": names,
                                "culprit": names[culprit[j]],
                                "distractor": names[distractor[j]] if distractor[j] >= 0 else None,
                                "revelation": 24, "L": L, "readers": readers}) + "\n")


def end_to_end(probs, culprit, distractor, n: int, resamples: int) -> dict:
    from tension.core.reports import fairplay_metrics as fm

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "readers.jsonl"
        write_readers(path, probs, culprit, distractor, n)
        phases = {"total": [], "read+check": [], "kernels": []}
        for _ in range(3):
            t0 = time.perf_counter()
            stories, errors = fm.read_readers(path)
            t1 = time.perf_counter()
            fm.compute(stories)
            t2 = time.perf_counter()
            assert not errors, errors[:3]
            phases["read+check"].append(t1 - t0)
            phases["kernels"].append(t2 - t1)
            t = time.perf_counter()
            summary = fm.fairplay_metrics(path, Path(tmp) / "out", max_plots=0, n_resamples=resamples)
            phases["total"].append(time.perf_counter() - t)
            assert summary.stories == n and not summary.errors
        return {k: statistics.median(v) for k, v in phases.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--check", type=int, default=2_000)
    ap.add_argument("--numpy-n", type=int, default=2_000)
    ap.add_argument("--numpy-repeats", type=int, default=3)
    ap.add_argument("--e2e-n", type=int, default=2_000)
    ap.add_argument("--e2e-resamples", type=int, default=10_000)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    s = fp.FairPlaySettings()
    print("=" * BANNER)
    print(f"fair-play kernel bench: n={args.n} stories, L={L}, K={K}, R={R}, seed={args.seed}")
    print(f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}, "
          f"{platform.machine()}")
    print("=" * BANNER)
    probs, Ls, Ks, culprit, distractor = synth(args.n, args.seed)
    t = time.perf_counter()
    fp.batch_fairplay(probs[:, :L * K], Ls[:1], Ks[:1], culprit[:1], distractor[:1], s)
    first = time.perf_counter() - t
    bad = check(probs, Ls, Ks, culprit, distractor, min(args.check, args.n), s)
    print(f"check: {min(args.check, args.n)} stories, {bad} disagreements")
    if bad:
        return 1
    nb = timed(lambda: fp.batch_fairplay(probs, Ls, Ks, culprit, distractor, s), args.repeats)
    m = min(args.numpy_n, args.n)
    npy = timed(lambda: numpy_all(probs, culprit, distractor, m, s), args.numpy_repeats)
    t_nb = statistics.median(nb)
    t_np = statistics.median(npy) * args.n / m
    steps = args.n * L
    rows = [("numba batch_fairplay", t_nb), ("numpy per story*", t_np)]
    print(f"\nfirst call (cache load or compile): {first:.2f} s")
    print(f"{'implementation':<22} {'time (s)':>9} {'stories/s':>11} {'steps/s':>12} {'vs numpy':>9}")
    for name, tt in rows:
        print(f"{name:<22} {tt:>9.3f} {args.n / tt:>11,.0f} {steps / tt:>12,.0f} {t_np / tt:>8.1f}x")
    print(f"* numpy: median of {args.numpy_repeats} passes over {m} stories, scaled to {args.n}")
    e2e = end_to_end(probs, culprit, distractor, min(args.e2e_n, args.n), args.e2e_resamples)
    n2 = min(args.e2e_n, args.n)
    print(f"\nfairplay_metrics end to end, {n2} stories, no plots, {args.e2e_resamples} resamples (median of 3):")
    for k, v in e2e.items():
        print(f"  {k:<11} {v:7.3f} s  ({n2 / v:,.0f} stories/s)")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "numba": nb, "numpy": npy, "first_call": first,
                                               "end_to_end": e2e}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
