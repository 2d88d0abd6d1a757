"""Plain-Python reference for docs/metrics.md 1.4 (curves) and 1.5 (groups).

Written from the specification text only, as slowly and literally as possible:
lists, loops and the ``math`` module, no numpy and no numba. The kernels in
``tension.kernels`` are checked against these functions.

Conventions fixed by docs/metrics.md 1.4 that this file follows:

* smoothing: ``ŷ[j] = mean(y[max(0, j-h) : min(m, j+h+1)])`` with ``h = w // 2``;
* unit square: each axis rescaled by the curve's own min and max;
* vertex angle at interior j: angle between ``P[j-1] - P[j]`` and ``P[j+1] - P[j]``,
  NaN where a leg has length 0;
* reversal: ``(ŷ[j] - ŷ[j-1]) * (ŷ[j+1] - ŷ[j]) < 0`` where a difference with
  ``|d| <= 1e-12`` counts as zero;
* ``IR_a = #{j : reversal and angle <= a} / m`` (angles within 1e-9 degrees of
  ``a`` count as on it, the project's documented ANGLE_EPS);
* peaks on the raw curve: ``y[j] > y[j-1]`` and ``y[j] > y[j+1]`` (same tie rule),
  ``low = min(y[j+1 : j+1+R])``, Retain = 100 * mean(low / y[j]),
  convergence = 100 * mean((low - y[j]) / y[j]);
* late NR: mean of y over ``x >= late_threshold``; the tie rule ("every comparison
  above and below") makes an x within 1e-12 below the threshold count as late.

Choices the specification leaves open and that this reference makes only so it
can return *something* (the tests never compare them with the kernels):
a flat smoothed curve maps to ``Y = 0`` in the unit square.
"""

from __future__ import annotations

import math

TIE = 1e-12
ANGLE_TOL = 1e-9
NAN = float("nan")

# Reason bits (values of tension.kernels.curves.Reason, restated here so the
# reference does not import the code it checks).
NO_POSITIONS = 1
FEW_POSITIONS = 2
NO_LATE = 4
NO_PEAK = 8
NAN_INPUT = 16


def sign(d: float) -> int:
    """Sign of a difference, with |d| <= 1e-12 counted as zero."""
    if abs(d) <= TIE:
        return 0
    return 1 if d > 0 else -1


def mean(values) -> float:
    values = list(values)
    if not values:
        return NAN
    return math.fsum(values) / len(values)


# ---------------------------------------------------------------------------
# curves


def smooth(y, window: int) -> list[float]:
    if window < 1 or window % 2 == 0:
        raise ValueError("window must be odd and >= 1")
    h = window // 2
    m = len(y)
    out = []
    for j in range(m):
        lo = max(0, j - h)
        hi = min(m, j + h + 1)
        out.append(mean(y[lo:hi]))
    return out


def rescale(values) -> list[float]:
    lo = min(values)
    hi = max(values)
    if hi == lo:
        return [0.0 for _ in values]  # reference-only convention (see module doc)
    return [(v - lo) / (hi - lo) for v in values]


def unit_square(x, ys) -> tuple[list[float], list[float]]:
    return rescale(x), rescale(ys)


def angle_deg(p0, p1, p2) -> float:
    """Angle at p1 between p0 - p1 and p2 - p1, in degrees (0 = hairpin); NaN when
    either leg has length 0 (docs/metrics.md 1.4: a zero vector has no direction;
    atan2(0, ±0) would say 0 or 180 by the sign of a zero)."""
    ux, uy = p0[0] - p1[0], p0[1] - p1[1]
    vx, vy = p2[0] - p1[0], p2[1] - p1[1]
    if (ux == 0.0 and uy == 0.0) or (vx == 0.0 and vy == 0.0):
        return NAN
    cross = ux * vy - uy * vx
    dot = ux * vx + uy * vy
    return math.degrees(math.atan2(abs(cross), dot))


def vertex_angles(x, ys) -> list[float]:
    m = len(x)
    if m == 0:
        return []
    X, Y = unit_square(x, ys)
    out = [NAN] * m
    for j in range(1, m - 1):
        out[j] = angle_deg((X[j - 1], Y[j - 1]), (X[j], Y[j]), (X[j + 1], Y[j + 1]))
    return out


def reversals(ys) -> list[bool]:
    m = len(ys)
    out = [False] * m
    for j in range(1, m - 1):
        out[j] = sign(ys[j] - ys[j - 1]) * sign(ys[j + 1] - ys[j]) < 0
    return out


def is_flat(ys) -> bool:
    return max(ys) == min(ys)


def inflection_rates(x, y, window: int, thresholds) -> list[float]:
    m = len(y)
    if m < 3:
        return [NAN for _ in thresholds]
    ys = smooth(y, window)
    rev = reversals(ys)
    if not any(rev):  # includes the flat curve
        return [0.0 for _ in thresholds]
    ang = vertex_angles(x, ys)
    rates = []
    for a in thresholds:
        count = 0
        for j in range(1, m - 1):
            if rev[j] and ang[j] <= a + ANGLE_TOL:
                count += 1
        rates.append(count / m)
    return rates


def peaks(y) -> list[int]:
    out = []
    for j in range(1, len(y) - 1):
        if sign(y[j] - y[j - 1]) > 0 and sign(y[j] - y[j + 1]) > 0:
            out.append(j)
    return out


def retention(y, retention_window: int) -> tuple[float, float]:
    """(Retain %, post-spike convergence %) of the raw curve; NaN without a peak."""
    ratios = []
    changes = []
    for j in peaks(y):
        low = min(y[j + 1 : j + 1 + retention_window])
        ratios.append(low / y[j])
        changes.append((low - y[j]) / y[j])
    if not ratios:
        return NAN, NAN
    return 100.0 * mean(ratios), 100.0 * mean(changes)


def story_stats(
    x,
    y,
    window: int = 5,
    thresholds=(30.0, 60.0, 120.0),
    late_threshold: float = 0.8,
    retention_window: int = 10,
) -> dict:
    x = [float(v) for v in x]
    y = [float(v) for v in y]
    assert len(x) == len(y)
    m = len(x)
    t = len(thresholds)
    if not all(math.isfinite(v) for v in x + y):
        return dict(n_positions=m, mean_nr=NAN, late_nr=NAN, retain=NAN,
                    convergence=NAN, ir=[NAN] * t, reasons=NAN_INPUT)
    reasons = 0
    if m == 0:
        reasons |= NO_POSITIONS
    if m < 3:
        reasons |= FEW_POSITIONS
    # "x >= 0.80" is one of the comparisons of 1.4 that the tie rule covers
    late = [yj for xj, yj in zip(x, y) if sign(xj - late_threshold) >= 0]
    if not late:
        reasons |= NO_LATE
    retain, convergence = retention(y, retention_window)
    if math.isnan(retain):
        reasons |= NO_PEAK
    return dict(
        n_positions=m,
        mean_nr=mean(y),
        late_nr=mean(late),
        retain=retain,
        convergence=convergence,
        ir=inflection_rates(x, y, window, thresholds),
        reasons=reasons,
    )


# ---------------------------------------------------------------------------
# groups


def describe(values) -> dict:
    """Mean, sample sd (ddof=1), normal half-width 1.96*sd/sqrt(n), n, n_nan."""
    vals = [float(v) for v in values]
    kept = [v for v in vals if not math.isnan(v)]
    n = len(kept)
    mu = mean(kept)
    if n >= 2:
        sd = math.sqrt(math.fsum((v - mu) ** 2 for v in kept) / (n - 1))
        ci = 1.96 * sd / math.sqrt(n)
    else:
        sd = NAN
        ci = NAN
    return dict(mean=mu, sd=sd, ci95=ci, n=n, n_nan=len(vals) - n)


def group_stats(values, labels) -> dict:
    order = []
    members: dict = {}
    for v, g in zip(values, labels):
        if g not in members:
            order.append(g)
            members[g] = []
        members[g].append(v)
    return {g: describe(members[g]) for g in order}
