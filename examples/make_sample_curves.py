"""Write examples/sample_curves.jsonl: synthetic no-rate curves for trying
`tension-run metrics` (made here from a formula; no real story is involved).

Two made-up groups: "steady" curves drift down slowly as the ending becomes
predictable; "twisty" curves carry sharp late reversals. No-rates are rounded to
hundredths, as real ones are (k of 100 endings).

    python examples/make_sample_curves.py > examples/sample_curves.jsonl
"""
import json
import math
import random

rng = random.Random(20261129)
for group, twists in (("steady", 0), ("twisty", 4)):
    for s in range(12):
        m = rng.randint(40, 120)
        x = sorted(rng.uniform(0.10, 0.99) for _ in range(m))
        x = [round(v, 4) for v in x]
        x = [v for i, v in enumerate(x) if i == 0 or v > x[i - 1]]
        spikes = [rng.uniform(0.3, 0.95) for _ in range(twists)]
        y = []
        for v in x:
            base = 0.85 - 0.45 * v + 0.05 * math.sin(9 * v + s)
            base += sum(0.35 * math.exp(-((v - c) / 0.04) ** 2) for c in spikes)
            base += rng.gauss(0, 0.015)
            y.append(round(min(1.0, max(0.0, base)), 2))
        print(json.dumps({"id": f"{group}-{s:02d}", "group": group, "x": x, "y": y}))
