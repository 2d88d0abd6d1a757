"""Synthetic stories, written here (no text from elsewhere): `write_story` makes one,
`make_corpus` a JSONL corpus of them (the tests' and the benchmarks' inputs)."""

from __future__ import annotations

import json
import random
from pathlib import Path

__all__ = ["WORDS", "make_corpus", "write_story"]

WORDS = ("the old keeper watched a grey boat drift past the harbour wall while rain fell on "
          "lanterns and nets and somebody called her name from the ferry road across the water "
          "where the letter had been hidden under a loose stone beside the chapel door").split()
_NAMES = ["Mara", "Tobias", "Ines", "Old Fenn", "The constable", "Her brother"]


def write_story(rng: random.Random, words: int) -> str:
    """A made-up story of about `words` words: sentences of 6–22 words, some with
    dialogue in curly quotes, paragraphs of 3–6 sentences."""
    out: list[str] = []
    para: list[str] = []
    n = 0
    while n < words:
        length = rng.randint(6, 22)
        body = " ".join(rng.choice(WORDS) for _ in range(length - 1))
        s = f"{rng.choice(_NAMES)} {body}{rng.choice('.....!?')}"
        if rng.random() < 0.15:
            s = f"\u201c{s}\u201d"
        para.append(s)
        n += len(s.split())
        if len(para) >= rng.randint(3, 6):
            out.append(" ".join(para))
            para = []
    if para:
        out.append(" ".join(para))
    return "\n\n".join(out)


def make_corpus(path: Path, n: int, seed: int = 0, words: tuple[int, int] = (520, 700),
                groups: tuple[str, ...] = ("a", "b"), start: int = 0) -> Path:
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as f:
        for i in range(start, start + n):
            text = write_story(rng, rng.randint(*words))
            f.write(json.dumps({"id": f"story-{i:03d}", "group": groups[i % len(groups)], "text": text,
                                "prompt_id": f"p{i}"}) + "\n")
    return path
