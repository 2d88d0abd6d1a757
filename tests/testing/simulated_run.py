"""A score-run folder of simulated stories (`write_simulated_run`): one config of
tension.testing.curve_families with binomial verdicts, what `report`, `compare` and the
comparable statistics' tests read back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tension.testing.curve_families import FAMILIES

__all__ = ["write_simulated_run"]


def write_simulated_run(d, config: tuple[str, int, float], stories: int, n: int, m: int = 60, seed: int = 0,
                        ids: Sequence[str] | None = None):
    """A score-run folder (positions.jsonl, meta.jsonl) of `stories` simulated stories of
    one config, with n verdicts a position: what `report` and `compare` read back."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    family, k_features, level = config
    rng = np.random.default_rng([seed, m, n])
    x = np.linspace(0.1, 0.99, m)
    ids = list(ids) if ids is not None else [f"s{i:02d}" for i in range(stories)]
    with (d / "positions.jsonl").open("w") as pos, (d / "meta.jsonl").open("w") as meta:
        for sid in ids:
            f = np.clip(FAMILIES[family](m, k_features, level, rng), 0.005, 0.995)
            matches = n - rng.binomial(n, f)
            for j in range(m):
                pos.write(json.dumps({"id": sid, "group": family, "k": j + 1, "pct": float(x[j]), "n_endings": n,
                                      "n_match": int(matches[j]), "n_empty": 0, "n_malformed": 0,
                                      "no_rate": 1.0 - int(matches[j]) / n}) + "\n")
            meta.write(json.dumps({"id": sid, "group": family, "words": 700, "meta": {}}) + "\n")
    return d
