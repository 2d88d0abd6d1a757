"""Synthetic stories, written here (no text from elsewhere): `write_story` makes one,
`make_corpus` a JSONL corpus of them (the tests' and the benchmarks' inputs),
`write_unique_corpus` one whose prompts share only the prefixes the pipeline makes,
and `EMBEDDED_STORY` the short story the real-server tests score."""

from __future__ import annotations

import json
import random
from pathlib import Path

__all__ = ["WORDS", "EMBEDDED_STORY", "SHARED_DATA", "make_corpus", "write_story", "write_unique_corpus",
           "shared_texts"]

# The real stories of the workplace (never copied into the repo): tests that read them
# skip where they are absent, as on a fresh CI machine.
SHARED_DATA = Path("/work/shared/data")

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


def write_unique_corpus(path: Path, n_stories: int, seed: int = 0) -> list[list[str]]:
    """Stories whose every sentence starts with its own word, so that two prompts
    share a token prefix only where the pipeline makes them share it (a trie then
    counts exactly what a prefix cache computes). Returns each story's sentences."""
    rng = random.Random(seed)
    vocab = "harbour lantern letter ferry chapel stone rain boat keeper name".split()
    stories = []
    with path.open("w") as f:
        for s in range(n_stories):
            sents = []
            for j in range(rng.randint(40, 60)):
                body = " ".join(rng.choice(vocab) for _ in range(rng.randint(5, 18)))
                sents.append(f"S{s}x{j} {body}.")
            stories.append(sents)
            f.write(json.dumps({"id": f"u{s}", "text": " ".join(sents)}) + "\n")
    return stories


# The story the real-server (slow) tests score, written for them (tests/core/test_embedded_e2e.py).
# Eleven sentences, each long enough to be an anchor.
EMBEDDED_STORY = (
    "Every morning the baker on Tanner Street left one warm loaf on the step of the empty house across the road. "
    "Nobody in the neighbourhood knew who took the loaf, but by noon it was always gone without a crumb left behind. "
    "The baker's apprentice, a curious boy named Oskar, decided one cold Tuesday to hide behind the rain barrel and watch. "
    "He waited through the church bells and the milk cart and the first grey drizzle of the day without seeing anyone. "
    "Just before noon the front door of the empty house opened a hand's width and a thin arm reached out for the bread. "
    "Oskar crept across the road, pushed the door wider, and found an old woman sitting alone in a room full of clocks. "
    "She told him that she had once been engaged to the baker, fifty years ago, before a quarrel neither of them could remember. "
    "Every clock in the room had stopped at a different hour, and she said each one marked a day she had almost forgiven him. "
    "Oskar ran back to the bakery and told the baker everything he had seen, expecting the old man to be angry with him. "
    "Instead the baker took off his apron, combed his hair with his fingers, and walked across the road for the first time in fifty years. "
    "That afternoon, for the first time anyone could remember, the clocks in the empty house began to tick again."
)


def shared_texts():
    """(file name, its story's number from 1, text) of every story with a text in SHARED_DATA."""
    n = 0
    for f in sorted(SHARED_DATA.glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            text = json.loads(line).get("text")
            if isinstance(text, str) and text:
                n += 1
                yield f.name, n, text

