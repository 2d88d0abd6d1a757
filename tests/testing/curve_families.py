"""Curve families the second-order study (tension.testing.second_order, docs/metrics.md 1.9)
and its simulated runs (tension.testing.simulated_run) draw stories' noise-free no-rate curves
from: none of them the shapes kernels/denoise.py was tried on (tension.testing.precision's),
and each story draws its own features.

Flat with dips, wave with spikes, falling with dips, a logit random walk with a late twist
(rough, and smoothed over 7 positions), a smooth sigmoid with broad bumps, and stairs. Each
has a feature count K and a level; a *config* is (family, K, level). A family is called as
`FAMILIES[name](m, k, level, rng)`: the curve at m positions, before clipping to (0, 1).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["Family", "FAMILIES", "CONFIGS", "flat_dips", "wave_spikes", "falling_dips", "walk_rough", "walk_smooth",
           "sigmoid_bumps", "stairs"]


def _bump(m: int, c: float, w: float) -> np.ndarray:
    return np.exp(-0.5 * ((np.arange(m) - c) / w) ** 2)


def _centres(m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    return rng.choice(np.arange(3, m - 3), k, replace=False)


def flat_dips(m: int, k: int, level: float, rng: np.random.Generator) -> np.ndarray:
    f = level + 0.02 * np.sin(2 * np.pi * rng.random() + np.linspace(0, 3, m))
    for c in _centres(m, k, rng):
        f = f - rng.uniform(0.2, 0.4) * _bump(m, c, 1.0)
    return f


def wave_spikes(m: int, k: int, level: float, rng: np.random.Generator) -> np.ndarray:
    f = level + 0.15 * np.sin(2 * np.pi * (2.0 * np.linspace(0, 1, m) + rng.random()))
    for c in _centres(m, k, rng):
        f = f + rng.uniform(0.15, 0.3) * _bump(m, c, 1.0)
    return f


def falling_dips(m: int, k: int, level: float, rng: np.random.Generator) -> np.ndarray:
    f = level - 0.5 * np.linspace(0, 1, m)
    for c in _centres(m, k, rng):
        f = f - rng.uniform(0.15, 0.3) * _bump(m, c, 1.0)
    return f


def _walk(m: int, k: int, level: float, rng: np.random.Generator, smooth: int) -> np.ndarray:
    # k sets the step: the walk's roughness, so its turns
    z = np.log(level / (1 - level)) + np.cumsum(rng.normal(0, 0.08 * k, m))
    z[int(0.8 * m):] -= 1.5
    if smooth > 1:
        z = np.convolve(np.pad(z, smooth // 2, mode="edge"), np.ones(smooth) / smooth, "valid")
    return 1 / (1 + np.exp(-z))


def walk_rough(m: int, k: int, level: float, rng: np.random.Generator) -> np.ndarray:
    return _walk(m, k, level, rng, 1)


def walk_smooth(m: int, k: int, level: float, rng: np.random.Generator) -> np.ndarray:
    return _walk(m, k, level, rng, 7)


def sigmoid_bumps(m: int, k: int, level: float, rng: np.random.Generator) -> np.ndarray:
    t = np.linspace(0, 1, m)
    f = level - 0.4 / (1 + np.exp(-(t - rng.uniform(0.4, 0.8)) * 12))
    for c in _centres(m, k, rng):
        f = f + 0.2 * _bump(m, c, m / 30)
    return f


def stairs(m: int, k: int, level: float, rng: np.random.Generator) -> np.ndarray:
    f = np.full(m, level)
    for c in np.sort(_centres(m, k, rng)):
        f[c:] += rng.choice([-1.0, 1.0]) * rng.uniform(0.1, 0.25)
    return f


Family = Callable[[int, int, float, np.random.Generator], np.ndarray]
FAMILIES: dict[str, Family] = {
    "flat with dips": flat_dips,
    "wave with spikes": wave_spikes,
    "falling with dips": falling_dips,
    "walk, rough": walk_rough,
    "walk, smoothed": walk_smooth,
    "sigmoid with bumps": sigmoid_bumps,
    "stairs": stairs,
}

# (family, K, level)
CONFIGS: tuple[tuple[str, int, float], ...] = (
    ("flat with dips", 2, 0.85), ("flat with dips", 4, 0.85), ("flat with dips", 2, 0.55),
    ("flat with dips", 4, 0.55),
    ("wave with spikes", 1, 0.6), ("wave with spikes", 3, 0.6), ("wave with spikes", 3, 0.4),
    ("falling with dips", 1, 0.95), ("falling with dips", 3, 0.95), ("falling with dips", 3, 0.8),
    ("walk, rough", 2, 0.7), ("walk, rough", 4, 0.7), ("walk, rough", 4, 0.4),
    ("walk, smoothed", 3, 0.7), ("walk, smoothed", 6, 0.7), ("walk, smoothed", 6, 0.4),
    ("sigmoid with bumps", 1, 0.85), ("sigmoid with bumps", 3, 0.85), ("sigmoid with bumps", 3, 0.65),
    ("stairs", 2, 0.8), ("stairs", 4, 0.8), ("stairs", 4, 0.5),
)
