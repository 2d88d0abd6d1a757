"""Shared fixtures: the loopback OpenAI-compatible server, synthetic stories
written here (no text from elsewhere), and a private cache/home per test."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from openai_server import LoopbackServer  # noqa: E402

_WORDS = ("the old keeper watched a grey boat drift past the harbour wall while rain fell on "
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
        body = " ".join(rng.choice(_WORDS) for _ in range(length - 1))
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


def verdict_records(cache: Path) -> dict:
    """Every verdict record of a cache, by key (read with LMDB's cursor for the keys,
    then through the Store, which checks and decodes them)."""
    import lmdb

    from tension.cache.store import Store

    env = lmdb.open(str(cache), max_dbs=8, readonly=True, lock=False)
    with env.begin() as txn:
        keys = [k for k, _ in txn.cursor(env.open_db(b"verdicts", txn=txn, create=False))]
    env.close()
    with Store(cache, readonly=True) as s:
        return dict(zip(keys, s.get_many("verdicts", keys)))


@pytest.fixture
def server():
    with LoopbackServer(model=["test-gen", "test-judge"]) as srv:
        yield srv


# The real environment, before _private_home: the slow tests that run the embedded
# server share its one installation (≈ 3.4 GB) under the real cache folder.
REAL_ENV = {k: os.environ[k] for k in ("HOME", "XDG_CACHE_HOME") if k in os.environ}


def real_home_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME")}
    env.update(REAL_ENV)
    return env


@pytest.fixture(autouse=True)
def _private_home(tmp_path_factory, monkeypatch):
    """No test may touch the user's real cache or key."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
