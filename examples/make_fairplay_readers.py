"""Write examples/fairplay_readers.jsonl and examples/fairplay_guesses.csv:
synthetic reader distributions for trying `tension-run fairplay-metrics` (made
here from a formula; no story, model or person is involved).

Two made-up groups of 25-paragraph whodunits with four suspects: in "fair"
stories the know-it-all finds the culprit gradually while the gullible reader
follows the distractor until the revelation; in "deus" stories the culprit
appears from nowhere at the end, so both readers are misled alike. The
know-it-all has values at the 19 checkpoints 3 … 21 and after the revelation;
the guesses are those of five made-up readers sampled from a middle course.

    python examples/make_fairplay_readers.py
"""
import csv
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
L = 25
SUSPECTS = ["Mrs Avery", "the gardener", "Colonel Burr", "Nell Quist"]
rng = random.Random(20261129)


def belief(culprit_weight: float, distractor_weight: float, culprit: int, distractor: int) -> list[float]:
    w = [1.0 + rng.uniform(0, 0.3) for _ in SUSPECTS]
    w[culprit] += culprit_weight
    w[distractor] += distractor_weight
    s = sum(w)
    return [round(v / s, 3) for v in w]


def story(group: str, n: int):
    culprit, distractor = rng.sample(range(4), 2)
    reveal = 24 if group == "fair" else 25
    fair = group == "fair"
    g, k, mid = [], [], []
    for i in range(1, L + 1):
        t = i / L
        after = i >= reveal
        g.append(belief(40 if after else 0.3, 0 if after else 4 * t, culprit, distractor))
        known = 40 if after else (8 * t ** 1.5 if fair else 0.2)
        k.append(belief(known, 0 if after else (0.5 if fair else 2 * t), culprit, distractor)
                 if 3 <= i <= 21 or after else None)
        mid.append(belief(40 if after else (3 * t ** 2 if fair else 0.2), 0 if after else 2 * t, culprit, distractor))
    record = {"id": f"{group}-{n:02d}", "group": group, "suspects": SUSPECTS, "culprit": SUSPECTS[culprit],
              "distractor": SUSPECTS[distractor], "revelation": reveal, "L": L,
              "readers": {"gullible": g, "know_it_all": k}}
    guesses = []
    for r in range(5):
        for i, p in enumerate(mid, start=1):
            guess = rng.choices(SUSPECTS, weights=p)[0] if rng.random() > 0.1 else "not sure"
            guesses.append((record["id"], f"reader-{r}", i, guess))
    return record, guesses


def main() -> None:
    rows, guesses = [], []
    for group in ("fair", "deus"):
        for n in range(6):
            rec, gs = story(group, n)
            rows.append(rec)
            guesses += gs if n < 3 else []  # only some stories were read by people
    (HERE / "fairplay_readers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with (HERE / "fairplay_guesses.csv").open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "reader", "paragraph", "guess"])
        w.writerows(guesses)


if __name__ == "__main__":
    main()
